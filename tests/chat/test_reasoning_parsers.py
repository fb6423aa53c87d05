"""Reasoning parsing splits ``<think>`` output into ``reasoning`` and ``content`` as vLLM 0.32.

Reference: vLLM's own ``deepseek_r1`` and ``qwen3`` parsers (composed by ``ParserManager``, as its
chat serving does) in the test process; see test_tool_parsers.py for the harness.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.chat.test_tool_parsers import (
    deltas_of,
    ours_full,
    ours_parsers,
    ours_stream,
    prompt_ids,
    tokenizer,
    vllm_full,
    vllm_parser_cls,
    vllm_request,
    vllm_stream,
)
from vllm_frontend.chat.output_parser import ParserConfigError, RequestToolOptions

pytestmark = pytest.mark.oracle  # imports vLLM or transformers as the reference

pytest.importorskip("vllm")

OUTPUTS = [
    "<think>\nThe user asks about weather. I should answer.\n</think>\n\nIt is sunny.",
    "The user asks about weather.\n</think>\n\nIt is sunny.",
    "<think>Still thinking when the tokens ran out",
    "No reasoning markers at all.",
    "<think></think>Empty reasoning.",
    "<think>a < b and c > d, not a </thi marker</think>Answer: x<y",
    "<think>first</think>middle</think>end",
    "before<think>inside</think>after",
    "<think>Zürich 日本 ünïcode</think>Grüße",
    "</think>only an end",
    "<think>thinking</think>",
]

REASONERS = ["deepseek_r1", "qwen3"]


@pytest.mark.parametrize("text", OUTPUTS)
@pytest.mark.parametrize("reasoning", REASONERS)
def test_reasoning_and_content_match_vllm(text: str, reasoning: str) -> None:
    req = vllm_request(None)
    assert ours_full(None, reasoning, text, req) == vllm_full(None, reasoning, text, req)
    ids = tokenizer().encode(text, add_special_tokens=False)
    for cuts in ([], list(range(len(ids))), [2, 5]):
        deltas = deltas_of(text, cuts)
        assert ours_stream(None, reasoning, deltas, req) == vllm_stream(
            None, reasoning, deltas, req
        ), cuts


@pytest.mark.parametrize("text", OUTPUTS[:4])
def test_qwen3_with_thinking_disabled_is_all_content(text: str) -> None:
    req = vllm_request(None, chat_template_kwargs={"enable_thinking": False})
    assert ours_full(None, "qwen3", text, req) == vllm_full(None, "qwen3", text, req)


@pytest.mark.parametrize("text", OUTPUTS[:3])
@pytest.mark.parametrize("reasoning", REASONERS)
def test_include_reasoning_false_drops_reasoning(text: str, reasoning: str) -> None:
    req = vllm_request(None, include_reasoning=False)
    assert ours_full(None, reasoning, text, req) == vllm_full(None, reasoning, text, req)
    deltas = deltas_of(text, [1, 3, 4, 9])
    assert ours_stream(None, reasoning, deltas, req) == vllm_stream(None, reasoning, deltas, req)


@pytest.mark.parametrize(
    "prompt",
    [
        "<|im_start|>assistant\n",
        "<|im_start|>assistant\n<think>\n\n</think>\n\n",
        "<|im_start|>assistant\n<think>\n",
        "<|im_start|>user\n<think>x</think><|im_end|>\n<|im_start|>assistant\n",
    ],
)
@pytest.mark.parametrize("reasoning", REASONERS)
def test_prompt_decides_whether_output_starts_in_reasoning(prompt: str, reasoning: str) -> None:
    ids = prompt_ids(prompt)
    cls = vllm_parser_cls(None, reasoning)
    expected = cls(tokenizer(), None, chat_template_kwargs={}).is_reasoning_end(ids)
    ours = ours_parsers(None, reasoning).for_request(RequestToolOptions(False, "none"))
    assert ours.reasoning is not None
    assert ours.reasoning.prompt_ends_reasoning(ids) == expected


@pytest.mark.parametrize("text", OUTPUTS)
@pytest.mark.parametrize("reasoning", REASONERS)
def test_reasoning_token_count_matches_vllm(text: str, reasoning: str) -> None:
    ids = tokenizer().encode(text, add_special_tokens=False)
    cls = vllm_parser_cls(None, reasoning)
    expected = cls(tokenizer(), None, chat_template_kwargs={}).count_reasoning_tokens(ids)
    ours = ours_parsers(None, reasoning).for_request(RequestToolOptions(False, "none"))
    assert ours.count_reasoning_tokens(ids) == expected


@pytest.mark.parametrize("text", OUTPUTS)
@pytest.mark.parametrize("reasoning", REASONERS)
def test_streamed_reasoning_token_count_matches_vllm(text: str, reasoning: str) -> None:
    req = vllm_request(None)
    deltas = deltas_of(text, [1, 2, 4, 7])
    vllm_parser = vllm_parser_cls(None, reasoning)(tokenizer(), None, chat_template_kwargs={})
    ours = ours_parsers(None, reasoning).for_request(RequestToolOptions(False, "none"))
    all_ids: list[int] = []
    for k, (delta_text, ids) in enumerate(deltas):
        last = k == len(deltas) - 1
        vllm_parser.parse_delta(delta_text, ids, req, prompt_token_ids=prompt_ids(), finished=last)
        ours.feed(delta_text, ids, prompt_ids(), finished=last)
        all_ids += ids
    assert ours.streamed_reasoning_tokens() == vllm_parser.count_reasoning_tokens(all_ids)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(OUTPUTS),
    st.sampled_from(REASONERS),
    st.lists(st.integers(0, 40), max_size=10),
)
def test_streaming_matches_vllm_for_any_cut(text: str, reasoning: str, cuts: list[int]) -> None:
    req: Any = vllm_request(None)
    deltas = deltas_of(text, cuts)
    assert ours_stream(None, reasoning, deltas, req) == vllm_stream(None, reasoning, deltas, req)


def test_unknown_reasoning_parser_fails_with_the_valid_names() -> None:
    with pytest.raises(ParserConfigError, match=r"deepseek_r1.*qwen3"):
        ours_parsers(None, "nope")


def test_reasoning_parser_needs_think_tokens() -> None:
    with pytest.raises(ParserConfigError, match="<think>"):
        from vllm_frontend.chat.output_parser import OutputParsers

        OutputParsers({"x": 0}, reasoning_parser="qwen3")


# -- over HTTP: the chat route with a scripted engine ----------------------------------------

THOUGHT = "<think>\nThe user asks about the weather.\n</think>\n\nIt is sunny in Paris."


@pytest.fixture(scope="module")
def think_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The test tokenizer (with ``<think>`` tokens) saved for our own Tokenizer."""
    path = tmp_path_factory.mktemp("think-tokenizer")
    tokenizer().save_pretrained(path)
    return str(path)


def _reasoning_app(tokenizer_dir: str) -> tuple[Any, Any]:
    from tests.chat.test_tool_parsers import _chat_app, _ScriptedEngine
    from tests.support.shared_tokenizer import shared_tokenizer
    from vllm_frontend.chat.output_parser import OutputParsers

    tok = shared_tokenizer(tokenizer_dir)
    engine = _ScriptedEngine(tok.encode(THOUGHT, add_special_tokens=False))
    parsers = OutputParsers.for_tokenizer(tok.token_to_id, reasoning_parser="qwen3")
    return _chat_app(engine, parsers, tokenizer_dir), engine


CHAT = {"model": "m", "messages": [{"role": "user", "content": "Weather?"}]}


def test_chat_route_separates_reasoning_like_vllm(think_tokenizer_dir: str) -> None:
    import json

    from tests.chat.test_tool_parsers import _post

    req = vllm_request(None)
    expected = vllm_full(None, "qwen3", THOUGHT, req)
    ids = tokenizer().encode(THOUGHT, add_special_tokens=False)
    vllm_parser = vllm_parser_cls(None, "qwen3")(tokenizer(), None, chat_template_kwargs={})
    expected_tokens = vllm_parser.count_reasoning_tokens([*ids, 128009])

    app, engine = _reasoning_app(think_tokenizer_dir)
    status, raw = _post(app, CHAT)
    assert status == 200, raw
    body = json.loads(raw)
    message = body["choices"][0]["message"]
    assert (message["reasoning"], message["content"]) == (expected.reasoning, expected.content)
    assert body["usage"]["completion_tokens_details"] == {"reasoning_tokens": expected_tokens}
    # vLLM's qwen3 parser asks for special tokens to stay in the text.
    assert engine.requests[0].sampling_params.skip_special_tokens is False

    status, raw = _post(app, {**CHAT, "include_reasoning": False})
    message = json.loads(raw)["choices"][0]["message"]
    assert (message["reasoning"], message["content"]) == (None, expected.content)

    app, _ = _reasoning_app(think_tokenizer_dir)
    status, raw = _post(app, {**CHAT, "stream": True, "stream_options": {"include_usage": True}})
    chunks = [
        json.loads(line.removeprefix("data: "))
        for line in raw.decode().split("\n\n")
        if line.startswith("data: {")
    ]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    streamed = vllm_stream(None, "qwen3", deltas_of(THOUGHT, list(range(len(ids)))), req)
    assert "".join(d.get("reasoning") or "" for d in deltas) == streamed.reasoning
    assert "".join(d.get("content") or "" for d in deltas) == streamed.content
    reference = vllm_parser_cls(None, "qwen3")(tokenizer(), None, chat_template_kwargs={})
    updates = [*deltas_of(THOUGHT, list(range(len(ids)))), ("", [128009])]
    for k, (text, update_ids) in enumerate(updates):
        reference.parse_delta(
            text, update_ids, req, prompt_token_ids=prompt_ids(), finished=k == len(updates) - 1
        )
    assert chunks[-1]["usage"]["completion_tokens_details"] == {
        "reasoning_tokens": reference.count_reasoning_tokens([*ids, 128009])
    }

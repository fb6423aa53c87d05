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

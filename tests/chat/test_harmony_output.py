"""gpt-oss output read back through Harmony: our parser against vLLM 0.32's ``HarmonyParser``
on the same token ids, whole and in any chunking, for each parser configuration.

The outputs are Harmony completions as gpt-oss writes them (reasoning, preambles, tool calls in
both header forms, final answers, built-in tool calls, truncations, text without any header), and
arbitrary sequences of Harmony's control tokens and text, tokenized by the tiny gpt-oss model's
tokenizer. Tool-call ids are random on both sides: they are compared by format.
"""

from __future__ import annotations

import functools
import itertools
import pathlib
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.tiny_gptoss import tiny_gptoss_dir
from vllm_frontend.chat.harmony_output import HarmonyOutputParser
from vllm_frontend.chat.output_parser import OutputParsers, RequestToolOptions
from vllm_frontend.text.tokenizer import Tokenizer

pytestmark = pytest.mark.oracle  # imports vLLM as the reference

ID = re.compile(r"chatcmpl-tool-[0-9a-f]{16}")
WEATHER = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}},
}

OUTPUTS: dict[str, str] = {
    "reasoning then answer": "<|channel|>analysis<|message|>Let me think.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>The answer is 42.<|return|>",
    "tool call": "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant"
    '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": '
    '"Paris", "unit": "°C"}<|call|>',
    "legacy tool-call header": " to=functions.get_time<|channel|>commentary json<|message|>"
    '{ "a" :1}<|call|>',
    "preamble then call": "<|channel|>commentary<|message|>Checking now.<|end|><|start|>assistant"
    ' to=functions.get_weather<|channel|>commentary json<|message|>{"city":"Oslo"}<|call|>',
    "two calls": "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
    '{"c":1}<|call|><|start|>assistant<|channel|>commentary to=functions.get_weather '
    '<|constrain|>json<|message|>{"c":2}<|call|>',
    "bare recipient and text arguments": "<|channel|>commentary to=lookup <|constrain|>text"
    "<|message|>Paris please<|call|>",
    "arguments that are not JSON": "<|channel|>commentary to=functions.get_weather <|constrain|>"
    "json<|message|>{city: Paris<|call|>",
    "built-in tool": "<|channel|>analysis<|message|>search<|end|><|start|>assistant<|channel|>"
    'analysis to=browser.search<|message|>{"q":"x"}<|call|>',
    "truncated reasoning": "<|channel|>analysis<|message|>I was thinking and then the length ran",
    "truncated call": "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
    '{"city": "Par',
    "text without a header": "Just plain text, no channels.",
    "final with constrain": '<|channel|>final <|constrain|>json<|message|>{"a": 1}<|return|>',
    "several answers": "<|channel|>final<|message|>one<|end|><|start|>assistant<|channel|>final"
    "<|message|>two<|end|><|start|>assistant<|channel|>analysis<|message|>r1<|end|>"
    "<|start|>assistant<|channel|>analysis<|message|>r2<|end|>",
    "unicode": "<|channel|>analysis<|message|>思考中…🤔<|end|><|start|>assistant<|channel|>final"
    "<|message|>答え: ✓<|return|>",
    "empty messages": "<|channel|>analysis<|message|><|end|><|start|>assistant<|channel|>final"
    "<|message|><|return|>",
}

CONFIGS = {
    "both": ("openai_gptoss", "openai"),
    "reasoning only": ("openai_gptoss", None),
    "tools only": (None, "openai"),
}


@functools.cache
def model_dir() -> pathlib.Path:
    return tiny_gptoss_dir()


@functools.cache
def our_tokenizer() -> Tokenizer:
    return Tokenizer.from_dir(model_dir())


@functools.cache
def hf_tokenizer() -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir())


def ids_of(text: str) -> list[int]:
    """The output's token ids (Harmony's control tokens as themselves)."""
    from vllm_frontend.chat.harmony_encoding import harmony_encoding

    ids = harmony_encoding().encode(text, allowed_special="all")
    assert ids == our_tokenizer().encode(text, add_special_tokens=False)
    return list(ids)


def vllm_parser(reasoning: str | None, tool: str | None) -> Any:
    """A fresh vLLM parser as its chat serving builds one for a gpt-oss model."""
    from vllm.parser import ParserManager

    cls = ParserManager.get_parser(
        tool_parser_name=tool,
        reasoning_parser_name=reasoning,
        enable_auto_tools=True,
        is_harmony=True,
    )
    return cls(hf_tokenizer(), [], chat_template_kwargs={}, model_config=None)


def vllm_request(**fields: Any) -> Any:
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": [WEATHER]}
    return ChatCompletionRequest.model_validate({**body, **fields})


def our_parser(reasoning: str | None, tool: str | None, **fields: Any) -> HarmonyOutputParser:
    parsers = OutputParsers(
        {},
        tool_call_parser=tool,
        reasoning_parser=reasoning,
        enable_auto_tool_choice=True,
        harmony=True,
        decode=lambda ids: our_tokenizer().decode(ids, skip_special_tokens=False),
    )
    parser = parsers.for_request(
        RequestToolOptions(
            tools=True,
            tool_choice=fields.get("tool_choice", "auto"),
            include_reasoning=fields.get("include_reasoning", True),
        )
    )
    assert isinstance(parser, HarmonyOutputParser)
    return parser


def _shape(call_id: str | None) -> str:
    if call_id is None:
        return ""
    assert ID.fullmatch(call_id), call_id
    return "id"


def our_events(parser: HarmonyOutputParser, chunks: list[list[int]]) -> list[Any]:
    out = []
    for i, chunk in enumerate(chunks):
        delta = parser.feed("", chunk, [], finished=i == len(chunks) - 1)
        if delta is not None:
            out.append(
                (delta.content, delta.reasoning,
                 [(c.index, _shape(c.id), c.name, c.arguments) for c in delta.tool_calls])
            )  # fmt: skip
    return out


def vllm_events(parser: Any, request: Any, chunks: list[list[int]]) -> list[Any]:
    out = []
    for i, chunk in enumerate(chunks):
        delta = parser.parse_delta("", chunk, request, [], finished=i == len(chunks) - 1)
        if delta is not None:
            calls = [
                (c.index, _shape(c.id), c.function.name if c.function else None,
                 c.function.arguments if c.function else None)
                for c in delta.tool_calls
            ]  # fmt: skip
            out.append((delta.content, delta.reasoning, calls))
    return out


def _chunks(ids: list[int], cuts: list[int]) -> list[list[int]]:
    points = sorted({c % (len(ids) + 1) for c in cuts} | {0, len(ids)})
    return [ids[a:b] for a, b in itertools.pairwise(points)] or [[]]


def assert_same(text_or_ids: str | list[int], config: str, cuts: list[int], **fields: Any) -> None:
    reasoning, tool = CONFIGS[config]
    ids = ids_of(text_or_ids) if isinstance(text_or_ids, str) else text_or_ids
    request = vllm_request(**fields)
    chunks = _chunks(ids, cuts)
    ours, theirs = our_parser(reasoning, tool, **fields), vllm_parser(reasoning, tool)
    assert our_events(ours, chunks) == vllm_events(theirs, request, chunks)
    assert ours.streamed_reasoning_tokens() == theirs.count_reasoning_tokens(ids)
    # The whole output.
    ours, theirs = our_parser(reasoning, tool, **fields), vllm_parser(reasoning, tool)
    parsed = ours.parse("", ids)
    r, c, calls = theirs.parse("", request, enable_auto_tools=True, model_output_token_ids=ids)
    our_calls = [(t.name, t.arguments) for t in parsed.tool_calls]
    assert all(ID.fullmatch(t.id) for t in parsed.tool_calls)
    if fields.get("tool_choice", "auto") in ("auto", "required") and tool is not None:
        assert our_calls == [(f.name, f.arguments) for f in calls or []]
    else:
        assert our_calls == []
    assert (parsed.reasoning, parsed.content) == (r, c)
    assert ours.count_reasoning_tokens(ids) == theirs.count_reasoning_tokens(ids)
    fresh = vllm_parser(reasoning, tool).count_reasoning_tokens(ids)
    assert our_parser(reasoning, tool).count_reasoning_tokens(ids) == fresh


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("name", list(OUTPUTS))
def test_outputs_match_vllm_token_by_token_and_whole(name: str, config: str) -> None:
    assert_same(OUTPUTS[name], config, list(range(200)))


@pytest.mark.parametrize("name", list(OUTPUTS))
def test_outputs_match_vllm_in_one_chunk_without_reasoning_shown(name: str) -> None:
    assert_same(OUTPUTS[name], "both", [], include_reasoning=False)


@pytest.mark.parametrize("choice", ["none", "required"])
def test_tool_choice_matches_vllm(choice: str) -> None:
    for text in OUTPUTS.values():
        assert_same(text, "both", [3, 7, 20], tool_choice=choice)


@settings(max_examples=80, deadline=None)
@given(
    name=st.sampled_from(list(OUTPUTS)),
    config=st.sampled_from(list(CONFIGS)),
    cuts=st.lists(st.integers(0, 200), max_size=8),
)
def test_any_chunking_matches_vllm(name: str, config: str, cuts: list[int]) -> None:
    assert_same(OUTPUTS[name], config, cuts)


_PIECES = [
    "<|start|>", "assistant", "<|channel|>", "analysis", "final", "commentary", " to=",
    "functions.get_weather", "browser.open", " <|constrain|>", "json", "<|message|>", "<|end|>",
    "<|call|>", "<|return|>", "hello", " world", '{"a": 1}', "é", "\n",
]  # fmt: skip


@settings(max_examples=120, deadline=None)
@given(
    pieces=st.lists(st.sampled_from(_PIECES), max_size=24),
    config=st.sampled_from(list(CONFIGS)),
    cuts=st.lists(st.integers(0, 60), max_size=6),
)
def test_arbitrary_token_sequences_match_vllm(
    pieces: list[str], config: str, cuts: list[int]
) -> None:
    assert_same("".join(pieces), config, cuts)

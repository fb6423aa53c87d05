"""``--tool-call-parser gemma4`` and ``--reasoning-parser gemma4`` match vLLM's, delta for delta
(``tests/chat/tool_family_harness.py``), and the argument format reads as vLLM reads it."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.chat.test_engine_tool_parsers import TOOLS, check_all, requests
from tests.chat.tool_family_harness import Family, vllm_request

pytestmark = pytest.mark.oracle  # imports vLLM as the reference

pytest.importorskip("vllm")

_SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

SPECIAL = (
    "<|channel>",
    "<channel|>",
    "<|tool_call>",
    "<tool_call|>",
    '<|"|>',
    "<|turn>",
    "<turn|>",
    "<|tool_response>",
)
GEMMA = Family("gemma4", special=SPECIAL)
GEMMA_R = Family("gemma4", reasoning="gemma4", special=SPECIAL)
Q = '<|"|>'


def _call(name: str, args: str, *, prefix: str = "call:", end: bool = True) -> str:
    return f"<|tool_call>{prefix}{name}{args}" + ("<tool_call|>" if end else "")


OUTPUTS = [
    _call("get_weather", f"{{city:{Q}Paris{Q}}}"),
    "Let me check."
    + _call("get_weather", f"{{city:{Q}Zürich 日本{Q},unit:{Q}c{Q}}}")
    + _call("get_time", "{}"),
    _call("plan_trip", "{days:3,budget:12.5,metric:true,stops:[1,2],opts:{n:4}}"),
    _call("plan_trip", "{days:three,budget:null, metric : false}"),
    _call("get_time", "{}", prefix=":"),
    _call("get_weather", f"(city:{Q}x{Q})"),
    _call("get_weather", f"{{city:{Q}Pa", end=False),
    _call("get_weather", f"{{city:{Q}a,b:{{c}}]{Q}}}") + " after",
    _call("unknown", "{a:1,b:}"),
    "<|channel>thought\nNeed the weather.<channel|>Sure." + _call("get_time", "{}"),
    "thought\nimplicit channel<channel|>answer",
    "<|channel>thought\nonly thinking, never closed",
    "<|channel>thought\nplan  \n" + _call("get_time", "{}"),
    "<|channel>thoughts without the newline<channel|>x",
    "plain answer",
    "\n\n" + _call("get_time", "{}"),
    _call("get_time", ""),
    _call("get_weather", f"{{city:{Q}x{Q}}}") + "<turn|>",
    "text <channel|> more",
    _call("plan_trip", f"{{stops:[{Q}a{Q},{{n:1}}, [2]],opts:{{n:[1,[2]]}},days:1.}}"),
    _call("plan_trip", f"{{{Q}days{Q}:2,city:{Q}{Q}}}"),
    _call("get_weather", "{city:Paris,unit:c"),
]


@pytest.mark.parametrize("text", OUTPUTS)
def test_gemma4_matches_vllm(text: str) -> None:
    check_all(GEMMA_R, text)
    GEMMA_R.check(text, vllm_request(TOOLS, chat_template_kwargs={"enable_thinking": True}))


@pytest.mark.parametrize("text", [OUTPUTS[i] for i in (1, 9, 10, 12, 18)])
def test_gemma4_without_a_reasoning_parser_matches_vllm(text: str) -> None:
    """Channel markers are then text (the first delta's implied opener included)."""
    check_all(GEMMA, text)


@pytest.mark.parametrize("text", OUTPUTS[9:14])
def test_gemma4_reasoning_alone_matches_vllm(text: str) -> None:
    family = Family(None, reasoning="gemma4", special=SPECIAL)  # type: ignore[arg-type]
    family.check(text, vllm_request(None))
    family.check(text, vllm_request(None, chat_template_kwargs={"enable_thinking": True}))


@pytest.mark.parametrize(
    "prompt_end", [("<|channel>",), ("<|channel>", "<channel|>"), ("<|turn>",)]
)
@pytest.mark.parametrize(
    "text", ["thought\nstill thinking<channel|>done", "more" + OUTPUTS[0], "<|channel>x"]
)
def test_gemma4_prompt_that_leaves_a_channel_open_matches_vllm(
    prompt_end: tuple[str, ...], text: str
) -> None:
    """A prompt ending inside ``<|channel>`` starts the stream in reasoning."""
    family = Family("gemma4", reasoning="gemma4", special=SPECIAL, prompt_end=prompt_end)
    n = len(family.tok.encode(text, add_special_tokens=False))
    for req in (
        vllm_request(TOOLS),
        vllm_request(TOOLS, chat_template_kwargs={"enable_thinking": True}),
    ):
        for cuts in ([], list(range(n))):
            family.check_stream(text, cuts, req)


@_SETTINGS
@given(
    st.sampled_from(OUTPUTS),
    st.lists(st.integers(0, 50), max_size=12),
    st.sampled_from(range(len(requests()))),
    st.booleans(),
)
def test_gemma4_streaming_matches_vllm_for_any_cut(
    text: str, cuts: list[int], which: int, reasoning: bool
) -> None:
    (GEMMA_R if reasoning else GEMMA).check_stream(text, cuts, requests()[which])


_ARGS = st.lists(
    st.sampled_from([Q, "{", "}", "[", "]", ",", ":", " ", "a", "1", ".", "<|", '"', "true", "\n"]),
    max_size=14,
).map("".join)


@settings(max_examples=500, deadline=None)
@given(_ARGS, st.booleans())
def test_gemma4_arguments_read_as_vllms(raw: str, partial: bool) -> None:
    from vllm.parser.gemma4 import _gemma4_arg_converter

    from vllm_frontend.chat.tools.gemma4 import gemma4_arguments

    assert gemma4_arguments(raw, partial) == _gemma4_arg_converter(raw, partial)

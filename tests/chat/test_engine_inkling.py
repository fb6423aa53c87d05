"""``--tool-call-parser inkling`` and ``--reasoning-parser inkling`` match vLLM's, delta for
delta (``tests/chat/tool_family_harness.py``), the prompt's last block included."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.chat.test_engine_tool_parsers import TOOLS, check_all, requests
from tests.chat.tool_family_harness import Family, vllm_request
from vllm_frontend.chat.tools.inkling import INKLING_TOKENS

pytestmark = pytest.mark.oracle  # imports vLLM as the reference

pytest.importorskip("vllm")

INK = Family("inkling", special=INKLING_TOKENS)
INK_R = Family("inkling", reasoning="inkling", special=INKLING_TOKENS)

M, END = "<|message_model|>", "<|end_message|>"
TEXT, THINK = "<|content_text|>", "<|content_thinking|>"
TOOL = "<|content_invoke_tool_json|>"
SAMPLED = "<|content_model_end_sampling|>"


def _tool(body: str, header: str = "", end: str = END) -> str:
    return f"{M}{header}{TOOL}{body}{end}"


OUTPUTS = [
    f"{M}{TEXT}Hello there{END}",
    f"{M}{THINK}plan it  {END}" + _tool('{"name":"get_weather","args":{"city":"SF"}}'),
    _tool('{"name": "get_time", "args": {}}') + f"{M}{TEXT}after the call{END}",
    _tool('{"name":"get_weather","args":{"city":"Zürich"}}', "get_weather", SAMPLED),
    _tool('{"name":"get_weather","args":{"city":"Pa', end=""),
    _tool('{"name":"get_weather","args":"not an object"}'),
    f"{M}<|content_invoke_tool_text|>raw call text{END}",
    f"{M}<|content_tool_error|>oops{END}",
    f"{THINK}no header thinking{SAMPLED}",
    "plain text with no markers",
    _tool('{"name":"a","args":{"x":1}}') + _tool('{"args":{"y":"}"},"name":"b"}'),
    f"{M}header only{END}",
    f"{M}{THINK}a{END}{M}{THINK}b{END}{M}{TEXT}c{END}",
    _tool('{"name":"plan_trip","arguments":{"days":2}}'),
]


@pytest.mark.parametrize("text", OUTPUTS)
def test_inkling_matches_vllm(text: str) -> None:
    check_all(INK_R, text)


@pytest.mark.parametrize("text", [OUTPUTS[i] for i in (0, 1, 2, 8, 11)])
def test_inkling_without_a_reasoning_parser_matches_vllm(text: str) -> None:
    check_all(INK, text)


@pytest.mark.parametrize("prompt_end", [(THINK,), (TEXT,), (M,), (M, TEXT, "<|end_message|>")])
@pytest.mark.parametrize("text", [OUTPUTS[1], "still thinking" + END + OUTPUTS[0], "visible"])
def test_inkling_prompt_decides_where_the_output_starts_like_vllm(
    prompt_end: tuple[str, ...], text: str
) -> None:
    family = Family("inkling", reasoning="inkling", special=INKLING_TOKENS, prompt_end=prompt_end)
    n = len(family.tok.encode(text, add_special_tokens=False))
    for cuts in ([], list(range(n))):
        family.check_stream(text, cuts, vllm_request(TOOLS))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(OUTPUTS),
    st.lists(st.integers(0, 40), max_size=10),
    st.sampled_from(range(len(requests()))),
    st.booleans(),
)
def test_inkling_streaming_matches_vllm_for_any_cut(
    text: str, cuts: list[int], which: int, reasoning: bool
) -> None:
    (INK_R if reasoning else INK).check_stream(text, cuts, requests()[which])

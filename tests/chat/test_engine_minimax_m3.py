"""``--tool-call-parser minimax_m3`` matches vLLM's, delta for delta
(``tests/chat/tool_family_harness.py``), and its argument elements read as vLLM reads them."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.chat.test_engine_tool_parsers import TOOLS, TYPED_TOOL, check_all, requests
from tests.chat.tool_family_harness import Family

pytestmark = pytest.mark.oracle  # imports vLLM as the reference

pytest.importorskip("vllm")

NS = "]<]minimax[>["
M3 = Family("minimax_m3", (NS,), special=("[e~[",))
LIST_TOOL = {
    "type": "function",
    "function": {
        "name": "order",
        "parameters": {
            "type": "object",
            "properties": {
                "items": {"type": "array", "items": {"type": "object"}},
                "tags": {"anyOf": [{"type": "null"}, {"type": "array"}]},
                "meta": {"type": "object", "additionalProperties": {"type": "integer"}},
                "n": {"type": "integer"},
            },
        },
    },
}


def _el(name: str, body: str) -> str:
    return f"{NS}<{name}>{body}{NS}</{name}>"


def _invoke(name: str, *params: str, quote: str = '"') -> str:
    return f"{NS}<invoke name={quote}{name}{quote}>\n" + "\n".join(params) + f"\n{NS}</invoke>\n"


def _block(*invokes: str) -> str:
    return f"{NS}<tool_call>\n" + "".join(invokes) + f"{NS}</tool_call>"


OUTPUTS = [
    _block(_invoke("get_weather", _el("city", "Paris"))),
    "Sure. "
    + _block(
        _invoke("get_weather", _el("city", "Zürich 日本"), _el("unit", "c"), quote="'"),
        _invoke("get_time", quote=""),
    ),
    _block(
        _invoke(
            "plan_trip",
            _el("days", "3"),
            _el("budget", "null"),
            _el("metric", "true"),
            _el("stops", _el("item", "1") + _el("item", "2")),
            _el("opts", _el("n", "4")),
        )
    ),
    _block(
        _invoke(
            "order",
            _el("items", _el("item", _el("sku", "a")) + _el("item", _el("sku", "b"))),
            _el("tags", ""),
            _el("meta", _el("x", "1") + "loose text"),
            _el("n", "2"),
            _el("n", "3"),
        )
    ),
    _block(_invoke("get_weather", _el("city", "Pa")))[:-40],
    _block(_invoke("get_weather", _el("city", "x") + f"{NS}<broken"))
    + " after the block is dropped",
    f"{NS}<tool_call>{NS}</tool_call> tail",
    "no calls here",
    _el("city", "not in a block"),
    _block(_invoke("unknown", _el("a", "1"))),
]
TOOLS_M3 = [*TOOLS, LIST_TOOL]


@pytest.mark.parametrize("text", OUTPUTS)
def test_minimax_m3_matches_vllm(text: str) -> None:
    from tests.chat.tool_family_harness import vllm_request

    check_all(M3, text)
    M3.check(text, vllm_request(TOOLS_M3))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(OUTPUTS),
    st.lists(st.integers(0, 80), max_size=12),
    st.sampled_from(range(len(requests()))),
)
def test_minimax_m3_streaming_matches_vllm_for_any_cut(
    text: str, cuts: list[int], which: int
) -> None:
    M3.check_stream(text, cuts, requests()[which])


_PIECES = st.sampled_from(
    [f"{NS}<a>", f"{NS}</a>", f"{NS}<b>", f"{NS}</b>", f"{NS}<", f"{NS}</", "x", " ", "\n", ">",
     "1", f"{NS}<$text>", "item", f"{NS}<item>", f"{NS}</item>"]
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(
    st.lists(_PIECES, max_size=12).map("".join),
    st.sampled_from([None, LIST_TOOL, TYPED_TOOL]),
)
def test_minimax_m3_arguments_read_as_vllms(raw: str, tool: dict | None) -> None:
    from vllm.parser.minimax_m3 import _minimax_m3_arg_converter

    from vllm_frontend.chat.tools.minimax_m3 import minimax_m3_arguments

    props = tool["function"]["parameters"]["properties"] if tool else None
    props = {**(props or {}), "a": {"type": "array"}, "b": {"type": "integer"}} if tool else None
    assert minimax_m3_arguments(raw, False, props) == _minimax_m3_arg_converter(raw, False, props)


def _served_families() -> list[Family]:
    from tests.chat.test_engine_gemma4 import GEMMA, GEMMA_R
    from tests.chat.test_engine_inkling import INK
    from tests.chat.test_engine_mistral import PRE_V11, V11_FAMILIES

    return [M3, GEMMA, GEMMA_R, INK, V11_FAMILIES[2], PRE_V11[0]]


@pytest.mark.parametrize(
    "family", _served_families(), ids=lambda f: f"{f.parser}-{f.reasoning}-{len(f.special)}"
)
def test_special_tokens_are_kept_when_vllm_keeps_them(family: Family) -> None:
    """MiniMax M3's markers are ordinary tokens: vLLM keeps its default; the others keep
    special tokens whenever vLLM's renderer runs their request adjustment (with a reasoning
    parser, or a tool choice other than ``none``)."""
    from tests.chat.tool_family_harness import options_of, vllm_request

    for req in (
        vllm_request(TOOLS),
        vllm_request(TOOLS, tool_choice="none"),
        vllm_request(None),
        vllm_request(TOOLS, tool_choice="required"),
    ):
        adjusted = family.reasoning is not None or req.tool_choice != "none"
        kept = adjusted and family.vllm_parser(req).adjust_request(req).skip_special_tokens is False
        assert family.ours.needs_special_tokens(options_of(req)) == kept

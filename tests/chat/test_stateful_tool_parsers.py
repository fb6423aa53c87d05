"""Tool parsers whose vLLM class is a model-specific streaming state machine (Hunyuan V3/V4,
LFM2, dots, …) match vLLM 0.32's, delta for delta.

Each family's outputs (well formed, several calls, content around calls, truncated, malformed,
unicode, typed arguments) go through the tiny tokenizer with the family's markers as tokens, cut
into engine updates every which way, and through vLLM's composed parser and ours
(``tests/chat/tool_family_harness.py``), under every request shape.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.chat.tool_family_harness import (
    TIME_TOOL,
    WEATHER_TOOL,
    Family,
    options_of,
    vllm_request,
)

pytestmark = pytest.mark.oracle  # imports vLLM as the reference

pytest.importorskip("vllm")

_SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])

TYPED_TOOL = {
    "type": "function",
    "function": {
        "name": "plan_trip",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "days": {"type": "integer"},
                "budget": {"type": ["number", "null"]},
                "metric": {"type": "boolean"},
                "stops": {"type": "array", "items": {"type": "integer"}},
                "opts": {"type": "object"},
                "size": {"type": "int64"},
                "ratio": {"type": "float"},
                "either": {"anyOf": [{"type": "string"}, {"type": "array"}]},
                "note": {"oneOf": [{"type": "string"}, {"type": "null"}]},
                "free": {},
                "custom": {"type": "tuple"},
            },
        },
    },
}
TOOLS = [WEATHER_TOOL, TIME_TOOL, TYPED_TOOL]


def requests() -> list[Any]:
    """The request shapes every family is checked under."""
    return [
        vllm_request(TOOLS),
        vllm_request(TOOLS, tool_choice="none"),
        vllm_request(None),
        vllm_request(TOOLS, include_reasoning=False),
        vllm_request(TOOLS, tool_choice="required"),
        vllm_request(TOOLS, tool_choice={"type": "function", "function": {"name": "get_time"}}),
    ]


def check_all(family: Family, text: str, every_shape: bool = True) -> None:
    """Whole output and streaming (whole, per token, and a few cuts), under every request
    shape, or (to keep the suite fast: the hypothesis tests vary the shapes) ``auto`` only."""
    for req in requests() if every_shape else requests()[:1]:
        family.check(text, req, [2, 3, 7, 11])


def light_check(family: Family, text: str, req: Any, cuts: list[int]) -> None:
    """Whole output, and streaming in one delta and at ``cuts`` (no token-by-token run)."""
    assert family.ours_full(text, req) == family.vllm_full(text, req), text
    for split in ([], cuts):
        family.check_stream(text, split, req)


def first(texts: list[str], text: str, n: int = 4) -> bool:
    """Whether ``text`` is among the first ``n`` of its corpus."""
    return texts.index(text) < n


# -- hy_v3 / hy_v4 -----------------------------------------------------------------------------

HY_MARKERS = (
    "<tool_calls>",
    "</tool_calls>",
    "<tool_call>",
    "</tool_call>",
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
)
HY_V3 = Family("hy_v3", (*HY_MARKERS, "<tool_sep>"))
HY_V4 = Family("hy_v4", HY_MARKERS)


def _hy(name: str, *pairs: tuple[str, str], sep: str = "<tool_sep>", gap: str = "") -> str:
    args = "".join(f"<arg_key>{k}</arg_key>{gap}<arg_value>{v}</arg_value>" for k, v in pairs)
    return f"<tool_call>{name}{sep}{args}</tool_call>"


def hy_outputs(sep: str) -> list[str]:
    """A Hunyuan corpus (``sep``: the V3 name separator, empty for V4)."""

    def call(name: str, *pairs: tuple[str, str], gap: str = "") -> str:
        return _hy(name, *pairs, sep=sep, gap=gap)

    weather = call("get_weather", ("city", "Paris"))
    return [
        f"<tool_calls>{weather}</tool_calls>",
        f"Let me check.\n<tool_calls>{call('get_weather', ('city', 'Zürich 日本'), ('unit', 'c'))}"
        f"{call('get_time')}</tool_calls>",
        "<tool_calls>"
        + call(
            "plan_trip",
            ("city", 'say "hi"\n\t\\ ok'),
            ("days", "3"),
            ("budget", "12.5"),
            ("metric", "True"),
            ("stops", "[1, 2]"),
            ("opts", '{"n": 4}'),
            ("size", "7"),
            ("ratio", "2"),
            ("either", "[1]"),
            ("note", "null"),
            ("free", "{'a': (1, 2)}"),
            ("custom", "(1, 'x')"),
        )
        + "</tool_calls>",
        "<tool_calls>"
        + call(
            "plan_trip", ("days", "three"), ("budget", "1e3"), ("metric", "yes"), ("custom", "x")
        )
        + "</tool_calls>",
        f"<tool_calls>{weather}"[:-20],
        f"<tool_calls>{call('get_weather', ('city', 'Pa'))}"[:-25],
        f"<tool_calls>{weather}",
        f"<tool_calls>{weather}{call('get_time')}{call('get_weather', ('city', 'x'))}</tool_calls>",
        "No tools needed.",
        "<tool_call>get_time</tool_call> without the block",
        f"<tool_calls>{call('get_weather', ('city', 'a'), gap=' ')}</tool_calls>",
        f"<tool_calls><tool_call>{sep}</tool_call></tool_calls>",
        f"<tool_calls>{weather} junk </tool_calls> after",
        f"<tool_calls>{weather}</tool_calls><tool_calls>{call('get_time')}</tool_calls>",
        f"<tool_calls><tool_call>get_weather{sep}<arg_key>city</arg_key><arg_value>x"
        "</tool_call></tool_calls>",
        f"<tool_calls><tool_call>get_weather{sep}<arg_key>city<arg_value>x</arg_value>"
        "</tool_call></tool_calls>",
        f"<tool_calls>{call('unknown', ('k', '1'))}</tool_calls>",
        f"<tool_calls>{call('get_weather', ('city', '</arg_val'), ('unit', '<x>'))}</tool_calls>",
        f"<tool_calls>\n{weather}\n{call('get_time')}\n</tool_calls>\n",
        f"<tool_calls>{call(' get_time ')}</tool_calls>",
    ]


HY_CASES = [(HY_V3, hy_outputs("<tool_sep>")), (HY_V4, hy_outputs(""))]


@pytest.mark.parametrize(
    ("family", "text"),
    [(f, t) for f, texts in HY_CASES for t in texts],
    ids=lambda x: getattr(x, "parser", None) or str(len(x)),
)
def test_hy_families_match_vllm(family: Family, text: str) -> None:
    check_all(family, text, first(hy_outputs(""), text.replace("<tool_sep>", "")))


@_SETTINGS
@given(
    st.sampled_from(range(len(HY_CASES))),
    st.integers(0, 40),
    st.lists(st.integers(0, 90), max_size=14),
    st.sampled_from(range(len(requests()))),
)
def test_hy_streaming_matches_vllm_for_any_cut(
    case: int, which_text: int, cuts: list[int], which: int
) -> None:
    family, texts = HY_CASES[case]
    family.check_stream(texts[which_text % len(texts)], cuts, requests()[which])


def _char_deltas(family: Family, text: str, cuts: list[int]) -> list[tuple[str, list[int]]]:
    """``text`` cut at character positions, each piece with its own token ids: under a
    structural tag the model may write a marker in pieces."""
    bounds = [0, *sorted({c for c in cuts if 0 < c < len(text)}), len(text)]
    pieces = [text[a:b] for a, b in itertools.pairwise(bounds)]
    return [(p, family.tok.encode(p, add_special_tokens=False)) for p in pieces]


GUIDED_TAG = '{"type": "structural_tag", "format": {"type": "any_text"}}'


def guided_requests() -> list[Any]:
    """Request shapes whose ``structured_outputs`` hold a structural tag (vLLM's hy_v4 parser
    then looks for its markers in the text)."""
    so = {"structural_tag": GUIDED_TAG}
    return [
        vllm_request(TOOLS, tool_choice="required", structured_outputs=so),
        vllm_request(
            TOOLS,
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            structured_outputs=so,
        ),
        vllm_request(TOOLS, structured_outputs=so),
    ]


@pytest.mark.parametrize("text", hy_outputs(""))
def test_hy_v4_under_a_structural_tag_matches_vllm(text: str) -> None:
    # Whole outputs, then streamed: per token, per character, and at a few characters.
    n = len(text)
    for req in guided_requests():
        assert options_of(req).guided
        assert HY_V4.ours_full(text, req) == HY_V4.vllm_full(text, req), text
        for cuts in ([], list(range(n)), [1, 5, 11, 12, 13, 20, 31, n - 3]):
            deltas = _char_deltas(HY_V4, text, cuts)
            assert HY_V4.ours_stream(deltas, req) == HY_V4.vllm_stream(deltas, req), cuts
        HY_V4.check_stream(text, list(range(n)), req)


@_SETTINGS
@given(
    st.sampled_from(hy_outputs("")),
    st.lists(st.integers(0, 200), max_size=16),
    st.sampled_from(range(3)),
    st.sampled_from(["", "Let me see <tool", "x <tool_calls", "<"]),
)
def test_hy_v4_under_a_structural_tag_for_any_cut(
    text: str, cuts: list[int], which: int, before: str
) -> None:
    text = before + text
    deltas = _char_deltas(HY_V4, text, cuts)
    req = guided_requests()[which]
    assert HY_V4.ours_stream(deltas, req) == HY_V4.vllm_stream(deltas, req), cuts


@pytest.mark.parametrize("reasoning", ["hy_v3", "hy_v4"])
def test_hy_after_its_reasoning_parser_matches_vllm(reasoning: str) -> None:
    markers = (*HY_MARKERS, "<tool_sep>", "<think>", "</think>")
    family = Family(reasoning, markers, reasoning)
    sep = "<tool_sep>" if reasoning == "hy_v3" else ""
    body = hy_outputs(sep)[1]
    for effort in (None, "high", "no_think"):
        kwargs = {} if effort is None else {"chat_template_kwargs": {"reasoning_effort": effort}}
        for text in (f"plan</think>{body}", f"<think>plan</think>\n{body}", body):
            light_check(family, text, vllm_request(TOOLS, **kwargs), [1, 4, 9])


@pytest.mark.parametrize("thinking_mode", [None, "enabled"])
def test_minimax_m3_reasoning_hands_the_tool_phase_its_content_ids_like_vllm(
    thinking_mode: str | None,
) -> None:
    """minimax_m3 gives the tool phase the ids of the content that ended the reasoning; the
    hy_v4 tool parser reads them (its block starts only once ``<tool_calls>`` is among them)."""
    family = Family("hy_v4", (*HY_MARKERS, "<mm:think>", "</mm:think>"), "minimax_m3")
    kwargs = {} if thinking_mode is None else {"chat_template_kwargs": {"thinking_mode": "enabled"}}
    req = vllm_request(TOOLS, **kwargs)
    body = hy_outputs("")[1]
    for text in (
        f"plan</mm:think>{body}",
        f"<mm:think>plan</mm:think>{body}",
        f"</mm:think>{body}",
        body,
        f"<mm:thought{body}",
        f"<mm:think>plan</mm:think>ok <mm:thi{body}",
    ):
        light_check(family, text, req, [1, 2, 4, 9])
    family.check(f"plan</mm:think>{body}", req, [1, 2, 4, 9])


# -- dots --------------------------------------------------------------------------------------

DOTS = Family("dots", ("<dots_function_call>", "</dots_function_call>"))
DEFS_TOOL = {
    "type": "function",
    "function": {
        "name": "book",
        "parameters": {
            "type": "object",
            "$defs": {"Count": {"type": "integer"}},
            "properties": {
                "n": {"$ref": "#/$defs/Count"},
                "x": {"anyOf": [{"type": "null"}, {"type": "number"}]},
                "ok": {"type": ["null", "boolean"]},
                "tags": {"type": "array"},
                "deep": {"allOf": [{"$ref": "#/$defs/Missing"}, {"type": "float"}]},
            },
        },
    },
}


def _dots_invoke(name: str, quote: str = '"', **params: str) -> str:
    body = "".join(
        f"<parameter name={quote}{k}{quote}>{v}</parameter>\n" for k, v in params.items()
    )
    return f"<invoke name={quote}{name}{quote}>\n{body}</invoke>\n"


def _dots(*invokes: str) -> str:
    return "<dots_function_call>\n" + "".join(invokes) + "</dots_function_call>"


DOTS_OUTPUTS = [
    _dots(_dots_invoke("get_weather", city="Shanghai")),
    "Let me look.\n"
    + _dots(
        _dots_invoke("get_weather", "'", city=" Zürich 日本 ", unit="c"), _dots_invoke("get_time")
    )
    + "\nDone.",
    _dots(_dots_invoke("book", n="3", x="2.0", ok="1", tags='["a"]', deep="1e3")),
    _dots(_dots_invoke("book", n="three", x="nan", ok="no", tags="[bad", deep="x")),
    _dots(_dots_invoke("book", n="null", x="1e400")),
    '<dots_function_call>{"name": "get_weather", "arguments": {"city": "Paris"}}'
    "</dots_function_call>",
    '<dots_function_call>\n{"name": "get_time", "parameters": {"tz": "UTC"}}\n</dots_function_call>'
    + _dots(_dots_invoke("get_weather", city="x")),
    '<dots_function_call>{"name": "get_weather", "arguments": {"city": "Pa',
    '<dots_function_call>{"name": "unknown", "arguments": {}}</dots_function_call> tail',
    "<dots_function_call>not json</dots_function_call>",
    '<dots_function_call>["x"]</dots_function_call>',
    '<dots_function_call>{"name": "get_weather", "arguments": "x"}</dots_function_call>',
    "<dots_function_call><invoke name=get_time></invoke></dots_function_call>",
    "<dots_function_call><invoke name=nope><parameter name=a>1</parameter></invoke>"
    "</dots_function_call>",
    "<dots_function_call></dots_function_call>",
    _dots(_dots_invoke("get_weather", city="Paris"))[:-15],
    "No tools. </dots_function_call> stray end <dots_func",
    "a <dots_function_call",
    '<dots_function_call>{"name": "get_weather", "arguments": {"city": "Rome"}} trailing'
    "</dots_function_call>",
]


@pytest.mark.parametrize("text", DOTS_OUTPUTS)
def test_dots_matches_vllm(text: str) -> None:
    shapes = requests() if first(DOTS_OUTPUTS, text) else requests()[:1]
    for req in [*shapes, vllm_request([*TOOLS, DEFS_TOOL])]:
        DOTS.check(text, req, [2, 3, 7, 11])


@_SETTINGS
@given(
    st.sampled_from(DOTS_OUTPUTS),
    st.lists(st.integers(0, 60), max_size=14),
    st.sampled_from(range(len(requests()) + 1)),
)
def test_dots_streaming_matches_vllm_for_any_cut(text: str, cuts: list[int], which: int) -> None:
    DOTS.check_stream(text, cuts, [*requests(), vllm_request([*TOOLS, DEFS_TOOL])][which])


# -- lfm2 --------------------------------------------------------------------------------------

LFM2 = Family("lfm2", special=("<|tool_call_start|>", "<|tool_call_end|>", "<|im_end|>"))
S, E = "<|tool_call_start|>", "<|tool_call_end|>"
LFM2_OUTPUTS = [
    f'{S}[get_weather(city="Paris")]{E}',
    f"Let me check. {S}[get_weather(city='Zürich 日本', unit='c'), get_time()]{E}It is sunny.",
    f"{S}[get_weather(city='Paris')]{E}[get_weather(city='Paris')]{E}The weather is fine.",
    f"{S}[get_weather(city='Paris')]{E}[get_weather(city='Par",
    f"{S}[get_weather(city='Paris')]{E}<|im_end|>",
    f"{S}[get_weather(city='Paris')]{E} trailing words",
    f"{S}[get_weather(city='Pa",
    f"{S} [get_time()]",
    f"{S}[get_time(month=07, day=10)]{E}",
    f"{S}[memory_get(from=1, to=2)]{E}",
    f"{S}[run(command='sed -n '1,9p' f.py')]{E}",
    f"{S}[run(command='a\nb\tc')]{E}",
    f"{S}[run(command=\"x 'y' z\", n=00)]{E}",
    f"{S}not a call{E} after",
    f"{S}[]{E}",
    f"{S}[get_weather(city=get_city())]{E}",
    f"{S}[get_weather(city='Paris'), get_time()]",
    "No tools at all.",
    f"{E} a stray end",
    f"{S}[get_time(tz='UTC')]{E}\n[echo]{E}\nDone.",
    f"before {S}[get_time(class=1, x=True)]{E}",
]


@pytest.mark.parametrize("text", LFM2_OUTPUTS)
def test_lfm2_matches_vllm(text: str) -> None:
    check_all(LFM2, text, first(LFM2_OUTPUTS, text))


@_SETTINGS
@given(
    st.sampled_from(LFM2_OUTPUTS),
    st.lists(st.integers(0, 60), max_size=14),
    st.sampled_from(range(len(requests()))),
)
def test_lfm2_streaming_matches_vllm_for_any_cut(text: str, cuts: list[int], which: int) -> None:
    LFM2.check_stream(text, cuts, requests()[which])


@settings(max_examples=400, deadline=None)
@given(
    st.text(st.sampled_from(list("'\"\\\n\t\x00 ()[],:=_aefrom0179.xjJ")), max_size=24),
)
def test_python_repairs_match_vllms_helpers(text: str) -> None:
    from vllm.tool_parsers import utils as theirs

    from vllm_frontend.chat.tools import python_repair as ours

    assert ours.escape_control_chars(text) == theirs.escape_ctrl_chars_in_strings(text)
    assert ours.unpad_integers(text) == theirs.normalize_leading_zero_ints(text)
    assert ours.rename_keyword_arguments(text) == theirs.rename_reserved_kwargs(text)
    assert ours.requote_nested_quotes(text) == theirs.escape_nested_quotes_in_strings(text)
    assert ours.has_broken_string(text) == theirs.contains_broken_string_literal(text)
    renamed, _ = ours.rename_keyword_arguments(text)
    args = {w: 1 for w in renamed.replace("(", " ").replace("=", " ").split()}
    assert ours.restore_keyword_arguments(args) == theirs.restore_reserved_kwarg_names(args)


# -- poolside_v1 -------------------------------------------------------------------------------

POOLSIDE = Family("poolside_v1", ("<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>",
                                  "<arg_value>", "</arg_value>"))  # fmt: skip


def _ps(name: str, *pairs: tuple[str, str], newline: str = "\n") -> str:
    args = "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n" for k, v in pairs)
    return f"<tool_call>{name}{newline}{args}</tool_call>"


POOLSIDE_OUTPUTS = [
    _ps("get_weather", ("city", "Paris")),
    "Let me check.\n"
    + _ps("get_weather", ("city", " Zürich\n日本 "), ("unit", "c"))
    + _ps("get_time"),
    _ps(
        "plan_trip",
        ("city", 'say "hi" \\'),
        ("days", " 3 "),
        ("stops", "[1, 2]"),
        ("metric", "True"),
        ("opts", "{'n': (1, 2)}"),
        ("budget", "1e3"),
        ("note", "not json"),
    ),
    _ps("plan_trip", ("days", "3"), ("days", "4"), ("city", "a"), ("city", "b"), ("", "x")),
    _ps("get_weather", ("city", "Paris"))[:-20],
    _ps("get_weather", ("city", "Pa"))[:-30],
    _ps("get_time")[:-12],
    "<tool_call></tool_call>after",
    "<tool_call>\n<arg_key>city</arg_key><arg_value>x</arg_value></tool_call>",
    _ps("get_weather", ("city", "x"), newline="") + " trailing",
    "No tools at all < here.",
    "<tool_call>get_time",
    _ps("get_weather", ("city", "</arg_val ue>")) + "\n" + _ps("get_time"),
    "<tool_call>get_weather\n<arg_key>city</arg_key> junk <arg_value>x</arg_value></tool_call>",
]


@pytest.mark.parametrize("text", POOLSIDE_OUTPUTS)
def test_poolside_v1_matches_vllm(text: str) -> None:
    check_all(POOLSIDE, text, first(POOLSIDE_OUTPUTS, text))
    POOLSIDE.check(text, vllm_request(TOOLS, logprobs=True), [1, 5])


@_SETTINGS
@given(
    st.sampled_from(POOLSIDE_OUTPUTS),
    st.lists(st.integers(0, 60), max_size=14),
    st.sampled_from(range(len(requests()))),
)
def test_poolside_v1_streaming_matches_vllm_for_any_cut(
    text: str, cuts: list[int], which: int
) -> None:
    POOLSIDE.check_stream(text, cuts, requests()[which])


@pytest.mark.parametrize("text", POOLSIDE_OUTPUTS[:3])
def test_poolside_v1_after_its_reasoning_parser_matches_vllm(text: str) -> None:
    markers = (*POOLSIDE.markers, "<think>", "</think>", "<assistant>")
    family = Family("poolside_v1", markers, "poolside_v1")
    for kwargs in ({}, {"chat_template_kwargs": {"thinking": True}}):
        for body in (f"plan</think>{text}", text):
            light_check(family, body, vllm_request(TOOLS, **kwargs), [1, 4, 9])


# -- muse_glimmer ------------------------------------------------------------------------------

MUSE_SPECIAL = ("<|start|>", "<|message|>", "<|eom|>", "<|eot|>")
MUSE = Family("muse_glimmer", special=MUSE_SPECIAL)
MUSE_WITH_REASONING = Family("muse_glimmer", (), "muse_glimmer", MUSE_SPECIAL)


def _atem(
    *invokes: tuple[str, dict[str, str]], to: str = "get_weather", end: str = "<|eom|>"
) -> str:
    body = "".join(
        f'<atem:invoke name="{name}">'
        + "".join(f'<atem:parameter name="{k}">{v}</atem:parameter>' for k, v in params.items())
        + "</atem:invoke>\n"
        for name, params in invokes
    )
    calls = f"<atem:function_calls>\n{body}</atem:function_calls>"
    return f"<|start|>assistant to={to}<|message|>{calls}{end}"


MUSE_OUTPUTS = [
    "to=self<|message|>I should check.<|eom|>" + _atem(("get_weather", {"city": "Paris"})),
    _atem(("get_weather", {"city": '"Zürich"', "n": "[1, 2]"}), ("get_time", {}))
    + "<|start|>assistant to=user<|message|>Done.<|eot|>",
    _atem(("get_weather.get_weather", {"city": "x"}), ("other.tool", {"q": "1"})),
    'to=self<|message|>maybe <atem:invoke name="get_time"></atem:invoke><|eom|>'
    "<|start|>assistant to=user<|message|>No call.<|eot|>",
    _atem(("get_weather", {"city": "Pa"}))[:-40],
    '<atem:function_calls><atem:invoke name="get_time"></atem:invoke></atem:function_calls>',
    "to=user<|message|>Just an answer <with> tags<|eot|>",
    "plain text without framing",
    "to=self<|message|>open reasoning to=get_time<|message|><atem:function_calls>"
    '<atem:invoke name="get_time"></atem:invoke>',
    _atem(("get_weather", {"city": "a"}), to="user"),
    "<|message|>bare header body<|eot|>",
]


@pytest.mark.parametrize("family", [MUSE, MUSE_WITH_REASONING], ids=["alone", "with-reasoning"])
@pytest.mark.parametrize("text", MUSE_OUTPUTS)
def test_muse_glimmer_matches_vllm(family: Family, text: str) -> None:
    check_all(family, text, first(MUSE_OUTPUTS, text))


@_SETTINGS
@given(
    st.sampled_from(MUSE_OUTPUTS),
    st.sampled_from([MUSE, MUSE_WITH_REASONING]),
    st.lists(st.integers(0, 70), max_size=14),
    st.sampled_from(range(len(requests()))),
)
def test_muse_glimmer_streaming_matches_vllm_for_any_cut(
    text: str, family: Family, cuts: list[int], which: int
) -> None:
    family.check_stream(text, cuts, requests()[which])


# -- minicpm5 ----------------------------------------------------------------------------------

MINICPM5 = Family("minicpm5", special=("<|im_end|>",))
REQUIRED_TOOL = {
    "type": "function",
    "function": {
        "name": "book",
        "parameters": {
            "type": "object",
            "properties": {"n": {"type": "integer"}, "who": {"type": "string"}, "x": {}},
            "required": ["n"],
        },
    },
}
TELECOM_TOOLS = [
    {"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {
        k: {"type": "string"} for k in props}}}}
    for n, props in [
        ("get_customer_by_phone", ["phone_number"]),
        ("get_customer_by_name", ["full_name", "date_of_birth", "dob"]),
        ("get_details_by_id", ["id"]),
        ("toggle_roaming", ["line_id", "enabled"]),
        ("refuel_data", ["customer_id", "line_id", "amount_gb"]),
    ]
]  # fmt: skip


def _fn(name: str, *params: tuple[str, str], q: str = '"') -> str:
    body = "".join(f"<param name={q}{k}{q}>{v}</param>" for k, v in params)
    return f"<function name={q}{name}{q}>{body}</function>"


MINICPM5_OUTPUTS = [
    _fn("get_weather", ("city", "Paris")),
    "Let me check. " + _fn("get_weather", ("city", "Zürich 日本"), ("unit", "c")) + " and "
    + _fn("get_time", q="'") + " done",
    _fn("book", ("n", "3"), ("who", "[1, 2]"), ("x", "{'a': 1}")),
    _fn("book", ("who", "x")),
    _fn("book", ("n", "1"), ("n", "2")),
    _fn("book", ("arguments", '{"n": 4, "who": 5, "zzz": 1}')),
    _fn("book", ("n", "<![CDATA[ 7 ]]>")),
    "<function name=\"book\"><param name=\"n\">1 < 2</param></function>",
    "<function name=\"book\"><param>1</param></function>",
    "<function name=\"book\"><arguments><param name=\"n\">9</param></arguments></function>",
    _fn("unknown", ("a", "1")),
    _fn("get_weather", ("city", "Paris"))[:-15],
    _fn("get_weather", ("city", "Pa"))[:-20],
    "<functionname=\"get_time\"></function>",
    "thinking</think>\n\nNo tools here.",
    "plain text <functi",
    _fn("get_details_by_phone", ("phone", "555")) + _fn("enable_roaming", ("id", "L1"))
    + _fn("add_data_to_line", ("line_id", "L2"), ("gb", "3"), ("customer_id", "C")),
    _fn("get_details_by_name", ("name", "Ann"), ("dob", "1990"))
    + _fn("get_plan_details", ("plan_id", "P"))
    + _fn("get_line_status", ("line_id", "L3")) + _fn("disable_roaming", ("line_id", "L4")),
]  # fmt: skip


@pytest.mark.parametrize("text", MINICPM5_OUTPUTS)
def test_minicpm5_matches_vllm(text: str) -> None:
    check_all(MINICPM5, text, first(MINICPM5_OUTPUTS, text))
    for tools in ([*TOOLS, REQUIRED_TOOL], [*TOOLS, *TELECOM_TOOLS]):
        MINICPM5.check(text, vllm_request(tools), [2, 5, 9])


@_SETTINGS
@given(
    st.sampled_from(MINICPM5_OUTPUTS),
    st.lists(st.integers(0, 70), max_size=14),
    st.sampled_from(range(len(requests()))),
)
def test_minicpm5_streaming_matches_vllm_for_any_cut(
    text: str, cuts: list[int], which: int
) -> None:
    MINICPM5.check_stream(text, cuts, requests()[which])
    MINICPM5.check_stream(text, cuts, vllm_request([*TOOLS, REQUIRED_TOOL, *TELECOM_TOOLS]))


# -- k2_horizon --------------------------------------------------------------------------------

K2_MARKERS = (
    "<ifm|tool_calls>", "</ifm|tool_calls>", "<ifm|tool_call>", "</ifm|tool_call>",
    "<ifm|arg_key>", "</ifm|arg_key>", "<ifm|arg_type>", "</ifm|arg_type>",
    "<ifm|arg_value>", "</ifm|arg_value>",
)  # fmt: skip
K2_THINK = ("<ifm|think>", "</ifm|think>")
K2 = Family("k2_horizon", K2_MARKERS)
K2_WITH_REASONING = Family("k2_horizon", (*K2_MARKERS, *K2_THINK), "k2_horizon")


def _k2_xml(name: str, *args: tuple[str, str | None, str]) -> str:
    body = "".join(
        f"<ifm|arg_key>{k}</ifm|arg_key>"
        + (f"<ifm|arg_type>{t}</ifm|arg_type>" if t is not None else "")
        + f"<ifm|arg_value>{v}</ifm|arg_value>"
        for k, t, v in args
    )
    return f"<ifm|tool_call>{name}{body}</ifm|tool_call>"


def _k2(*calls: str) -> str:
    return "<ifm|tool_calls>" + "".join(calls) + "</ifm|tool_calls>"


K2_XML = [
    _k2(_k2_xml("get_weather", ("city", None, "Paris"))),
    "  Let me check. "
    + _k2(_k2_xml("get_weather", ("city", None, " Zürich "), ("unit", None, "c")),
          _k2_xml("get_time"))
    + " after",
    _k2(_k2_xml("plan_trip", ("days", None, " 3 "), ("budget", None, "null"),
                ("stops", None, "[1]"))),
    _k2(_k2_xml("get_weather", ("city", "string", "x"))),
    _k2(_k2_xml("get_weather", ("city", None, "a"), ("city", None, "b"))),
    _k2(_k2_xml("unknown_tool")),
    _k2(_k2_xml("get weather")),
    _k2(_k2_xml("get_time") + " junk"),
    _k2(_k2_xml("get_weather", ("city", None, "Pa")))[:-25],
    "No tools.",
    "   ",
    "<ifm|tool_calls>not a call</ifm|tool_calls>",
]  # fmt: skip
K2_TYPED = [
    _k2(_k2_xml("plan_trip", ("days", "integer", "4"), ("free", "any", " x "),
                ("ratio", "number", "2"))),
    _k2(_k2_xml("plan_trip", ("days", None, "4"))),
    _k2(_k2_xml("get_weather", ("city", "array[string]", '["a"]'))),
]  # fmt: skip
K2_JSON = [
    _k2('<ifm|tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</ifm|tool_call>'),
    _k2('<ifm|tool_call>{"name": "plan_trip", "arguments": {"days": "3", "stops": [1], '
        '"city": ["日本"]}}</ifm|tool_call>'),
    _k2('<ifm|tool_call>{"name": "get_time"}</ifm|tool_call><ifm|tool_call>[1]</ifm|tool_call>'),
    _k2('<ifm|tool_call>{"name": "get_time", "arguments": []}</ifm|tool_call>'),
]  # fmt: skip
K2_CASES = [(None, K2_XML), ("xml", K2_XML[:4]), ("xml_typed", K2_TYPED), ("json", K2_JSON)]


def _k2_requests(fmt: str | None) -> list[Any]:
    kwargs = {} if fmt is None else {"chat_template_kwargs": {"tool_call_format": fmt}}
    return [
        vllm_request(TOOLS, **kwargs),
        vllm_request(TOOLS, tool_choice="none", **kwargs),
        vllm_request(None, **kwargs),
        vllm_request(TOOLS, tool_choice="required", **kwargs),
        vllm_request(
            TOOLS, tool_choice={"type": "function", "function": {"name": "get_time"}}, **kwargs
        ),
    ]


@pytest.mark.parametrize(
    ("fmt", "text"), [(f, t) for f, texts in K2_CASES for t in texts], ids=lambda x: str(x)[:12]
)
def test_k2_horizon_matches_vllm(fmt: str | None, text: str) -> None:
    shapes = _k2_requests(fmt)
    every_shape = first([t for f, texts in K2_CASES if f == fmt for t in texts], text, 3)
    for req in shapes if every_shape else shapes[:1]:
        K2.check(text, req, [2, 3, 7, 11])
    body = text.strip()
    for reasoned in (f"plan</ifm|think>{body}", f"<ifm|think>plan</ifm|think>{body}",
                     f"plan {body}"):  # fmt: skip
        light_check(K2_WITH_REASONING, reasoned, shapes[0], [1, 4, 9])


@_SETTINGS
@given(
    st.sampled_from([(f, t) for f, texts in K2_CASES for t in texts]),
    st.sampled_from([K2, K2_WITH_REASONING]),
    st.lists(st.integers(0, 70), max_size=14),
    st.integers(0, 4),
)
def test_k2_horizon_streaming_matches_vllm_for_any_cut(
    case: tuple[str | None, str], family: Family, cuts: list[int], which: int
) -> None:
    fmt, text = case
    family.check_stream(text, cuts, _k2_requests(fmt)[which])


def test_k2_horizon_refuses_an_unknown_tool_call_format_like_vllm() -> None:
    req = vllm_request(TOOLS, chat_template_kwargs={"tool_call_format": "yaml"})
    parser = K2.vllm_parser(req)
    with pytest.raises(ValueError) as theirs:
        parser.adjust_request(req)
    with pytest.raises(ValueError) as mine:
        K2.ours.check_request(options_of(req))
    assert str(mine.value) == str(theirs.value)


@pytest.mark.parametrize("stream", [False, True])
def test_k2_horizon_bad_tool_call_format_is_a_400_before_the_engine(stream: bool) -> None:
    """vLLM refuses the request while preparing it (its parser's ``adjust_request``): a 400
    with the parser's message, and no engine request."""
    import json

    from tests.chat.test_tool_parsers import CHAT, _chat_app, _post, _ScriptedEngine
    from tests.support.shared_tokenizer import shared_tokenizer
    from tests.support.tiny_model import tiny_model_dir
    from vllm_frontend.chat.output_parser import OutputParsers

    tok = shared_tokenizer(tiny_model_dir(), use_fastokens=False)
    parsers = OutputParsers.for_tokenizer(
        tok.token_to_id, tool_call_parser="k2_horizon", enable_auto_tool_choice=True
    )
    engine = _ScriptedEngine(tok.encode("hello", add_special_tokens=False))
    kwargs = {"tool_call_format": "yaml"}
    body = {**CHAT, "tools": TOOLS, "chat_template_kwargs": kwargs, "stream": stream}
    status, raw = _post(_chat_app(engine, parsers), body)
    req = vllm_request(TOOLS, chat_template_kwargs=kwargs)
    with pytest.raises(ValueError) as theirs:
        K2.vllm_parser(req).adjust_request(req)
    assert status == 400, raw
    error = json.loads(raw)["error"]
    assert (error["type"], error["message"]) == ("BadRequestError", str(theirs.value))
    assert engine.requests == []


_WRITTEN_KEYS = [
    (HY_V3, hy_outputs("<tool_sep>")[:6]),
    (HY_V4, hy_outputs("")[:6]),
    (DOTS, DOTS_OUTPUTS),
    (LFM2, LFM2_OUTPUTS),
    (POOLSIDE, POOLSIDE_OUTPUTS),
    (MUSE, MUSE_OUTPUTS[:6]),
    (MUSE_WITH_REASONING, MUSE_OUTPUTS[:6]),
    (MINICPM5, MINICPM5_OUTPUTS[:6]),
    (K2, K2_XML[:6]),
    (K2_WITH_REASONING, K2_XML[:6]),
]


@pytest.mark.parametrize(
    ("family", "outputs"),
    _WRITTEN_KEYS,
    ids=[f.label for f, _ in _WRITTEN_KEYS],
)
def test_streamed_deltas_write_the_fields_vllms_parser_sets(
    family: Family, outputs: list[str]
) -> None:
    """A field vLLM's parser sets to None is written as ``null`` (its stream dumps with
    ``exclude_unset``): dots', lfm2's, poolside_v1's, hy_v3's and k2_horizon's tool-call deltas
    say ``"content": null``; ours write the same keys, token by token and whole."""
    for text in outputs:
        family.check_written_keys(text)

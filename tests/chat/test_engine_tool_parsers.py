"""Tool parsers vLLM 0.32 runs on its parser engine match vLLM's, delta for delta.

Each family's outputs go through the tiny tokenizer with the family's markers as tokens (its
special tokens special), cut into engine updates every which way, and through vLLM's composed
parser and ours (``tests/chat/tool_family_harness.py``).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.chat.tool_family_harness import TIME_TOOL, WEATHER_TOOL, Family, vllm_request

pytestmark = pytest.mark.oracle  # imports vLLM as the reference

pytest.importorskip("vllm")

_SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

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
                "opts": {"type": "object", "properties": {"n": {"type": "integer"}}},
            },
        },
    },
}
TOOLS = [WEATHER_TOOL, TIME_TOOL, TYPED_TOOL]
CHATML = ("<|im_start|>", "<|im_end|>")


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


def check_all(family: Family, text: str) -> None:
    """Whole output and streaming (whole, per token), under every request shape."""
    for req in requests():
        family.check(text, req)


# -- qwen3_coder / qwen3_xml and the grammar's relatives ---------------------------------------


def _qc(name: str, **params: str) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


QWEN3_OUTPUTS = [
    _qc("get_weather", city="Paris"),
    "Let me check." + _qc("get_weather", city="Paris", unit="celsius"),
    _qc("get_weather", city="Zürich 日本") + "\n" + _qc("get_time"),
    _qc("plan_trip", city="Rome", days="3", budget="12.5", metric="true", stops="[1, 2]"),
    _qc("plan_trip", days="three", budget="null", opts='{"n": "4"}', metric="0"),
    _qc("get_weather", city='say "hi" \\ <b>')[:-30],
    _qc("get_weather", city="Paris")[:-12],
    "<tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>",
    "<tool_call>\n<function=get_weather\n</function>\n</tool_call>",
    "<function=get_time>\n</function>",
    "No tools needed.",
    "   \n",
    _qc("unknown_tool", x="1") + " trailing words",
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n<parameter=unit>\nc\n"
    "</function>\n</tool_call>",
    "text </think> more <think> x",
    "a<|im_end|>b" + _qc("get_time"),
    "\n\n" + _qc("get_time") + "\n\n" + _qc("get_weather", city="x"),
    "<tool_call>" + _qc("get_time"),
]

QWEN3 = Family(
    "qwen3_coder", ("<tool_call>", "</tool_call>", "<think>", "</think>"), special=CHATML
)
QWEN3_FAMILIES = [
    QWEN3,
    Family("qwen3_xml", QWEN3.markers, special=CHATML),
    Family("mimo", QWEN3.markers, special=CHATML),
    Family("step3p5", QWEN3.markers, special=CHATML),
]


@pytest.mark.parametrize("family", QWEN3_FAMILIES, ids=lambda f: f.parser)
@pytest.mark.parametrize("text", QWEN3_OUTPUTS)
def test_qwen3_xml_family_matches_vllm(family: Family, text: str) -> None:
    check_all(family, text)


@pytest.mark.parametrize("reasoning", ["qwen3", "deepseek_r1"])
@pytest.mark.parametrize(
    "text",
    [
        "<think>Weather needed.</think>\n\n" + QWEN3_OUTPUTS[1],
        "plan first</think>" + QWEN3_OUTPUTS[2],
        "thinking and then a call " + QWEN3_OUTPUTS[0],
        "<think>only thoughts",
        "<think>x</think>\n\nJust text.</think> <think>y</think>",
    ],
)
def test_qwen3_coder_after_a_reasoning_parser_matches_vllm(reasoning: str, text: str) -> None:
    family = Family(QWEN3.parser, QWEN3.markers, reasoning, CHATML)
    for req in requests()[:4]:
        family.check(text, req)


SEED = Family(
    "seed_oss",
    ("<seed:tool_call>", "</seed:tool_call>", "<seed:think>", "</seed:think>"),
    special=("<seed:bos>", "<seed:eos>"),
)


@pytest.mark.parametrize("text", QWEN3_OUTPUTS)
def test_seed_oss_matches_vllm(text: str) -> None:
    text = (
        text.replace("<tool_call>", "<seed:tool_call>")
        .replace("</tool_call>", "</seed:tool_call>")
        .replace("think>", "seed:think>")
        .replace("<|im_end|>", "<seed:eos>")
    )
    check_all(SEED, text)


@_SETTINGS
@given(
    st.sampled_from(QWEN3_OUTPUTS),
    st.lists(st.integers(0, 80), max_size=14),
    st.sampled_from(range(4)),
)
def test_qwen3_coder_streaming_matches_vllm_for_any_cut(
    text: str, cuts: list[int], which: int
) -> None:
    QWEN3.check_stream(text, cuts, requests()[which])


# -- glm45 / glm47 / ling3 ---------------------------------------------------------------------


def _glm(name: str, **args: str) -> str:
    body = "".join(f"\n<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>" for k, v in args.items())
    return f"<tool_call>{name}{body}\n</tool_call>"


GLM_MARKERS = (
    "<tool_call>",
    "</tool_call>",
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
    "<think>",
    "</think>",
)
GLM_SPECIAL = ("<|user|>", "<|observation|>", "<|endoftext|>")
GLM_OUTPUTS = [
    _glm("get_weather", city="Paris"),
    "Checking. " + _glm("get_weather", city=" Zürich ", unit="c") + _glm("get_time"),
    "<tool_call>get_time</tool_call>",
    "<tool_call> get_weather <arg_key>city</arg_key><arg_value>x</arg_value></tool_call>",
    _glm("plan_trip", days="4", budget="null", metric="false", stops="[3]", opts='{"n": "2"}'),
    _glm("unknown", a="1") + " after",
    _glm("get_weather", city="Pa")[:-25],
    "<tool_call>get_weather<arg_key>city",
    "Answer <think>hmm</think> done",
    "Text<|observation|>more " + _glm("get_time"),
    "\n" + _glm("get_time") + "\n\n",
    "plain text only",
]
GLM_FAMILIES = [
    Family("glm47", GLM_MARKERS, special=GLM_SPECIAL),
    Family("glm45", GLM_MARKERS, special=GLM_SPECIAL),
    Family("ling3", GLM_MARKERS, special=GLM_SPECIAL),
]


@pytest.mark.parametrize("family", GLM_FAMILIES, ids=lambda f: f.parser)
@pytest.mark.parametrize("text", GLM_OUTPUTS)
def test_glm_family_matches_vllm(family: Family, text: str) -> None:
    check_all(family, text)
    family.check(text, vllm_request(TOOLS, chat_template_kwargs={"enable_thinking": False}))


@pytest.mark.parametrize("reasoning", ["glm45", None])
@pytest.mark.parametrize(
    "text",
    [
        "plan</think>" + GLM_OUTPUTS[1],
        "thinking " + GLM_OUTPUTS[0],
        "<think>a</think>b<think>c</think>" + GLM_OUTPUTS[2],
    ],
)
def test_glm47_after_its_reasoning_parser_matches_vllm(reasoning: str | None, text: str) -> None:
    family = Family("glm47", GLM_MARKERS, reasoning, GLM_SPECIAL)
    for req in requests()[:4]:
        family.check(text, req)


@_SETTINGS
@given(
    st.sampled_from(GLM_OUTPUTS),
    st.lists(st.integers(0, 60), max_size=14),
    st.sampled_from(range(len(requests()))),
)
def test_glm47_streaming_matches_vllm_for_any_cut(text: str, cuts: list[int], which: int) -> None:
    GLM_FAMILIES[0].check_stream(text, cuts, requests()[which])


# -- kimi_k2 -----------------------------------------------------------------------------------

KIMI_MARKERS = (
    "<|tool_calls_section_begin|>",
    "<|tool_calls_section_end|>",
    "<|tool_call_begin|>",
    "<|tool_call_end|>",
    "<|tool_call_argument_begin|>",
)
KIMI = Family("kimi_k2", ("<think>", "</think>"), special=(*KIMI_MARKERS, "<|im_end|>"))
KIMI_K2 = Family("kimi_k2", ("<think>", "</think>"), "kimi_k2", (*KIMI_MARKERS, "<|im_end|>"))


def _kimi(*calls: tuple[str, str], end: bool = True) -> str:
    body = "".join(
        f"<|tool_call_begin|>{header}<|tool_call_argument_begin|>{args}<|tool_call_end|>"
        for header, args in calls
    )
    return "<|tool_calls_section_begin|>" + body + ("<|tool_calls_section_end|>" if end else "")


KIMI_OUTPUTS = [
    _kimi(("functions.get_weather:0", '{"city": "Tokyo"}')),
    "Let me look. "
    + _kimi(("functions.get_weather:0", '{"city": "東京"}'), ("functions.get_time:1", "{}")),
    _kimi(("functions.get_weather:0", '{"city": "Tok'), end=False)[:-17],
    _kimi((" get_weather ", '{"city": "x"}')),
    _kimi(("functions.plan_trip:3", '{"days": 2, "opts": {"n": [1, {"a": "}"}]}}')),
    _kimi(("functions.get_time:0", "")) + " trailing text is dropped",
    _kimi(("functions.get_weather:0", '{"q": "say \\"hi\\""}'), end=False),
    "No tools.<|im_end|>",
    "\n\n" + _kimi(("functions.get_time:0", "{}")),
]


@pytest.mark.parametrize("family", [KIMI, KIMI_K2], ids=["alone", "with-reasoning"])
@pytest.mark.parametrize("text", KIMI_OUTPUTS)
def test_kimi_k2_matches_vllm(family: Family, text: str) -> None:
    if family.reasoning:
        # The engine-think reasoning parsers do not drop special tokens as vLLM's engine does
        # (reasoning/engine_think.py): keep them out of what reaches the reasoning parser.
        text = text.replace("<|im_end|>", "")
    check_all(family, text)
    if family.reasoning:
        family.check("<think>plan</think>" + text)
        family.check("plan </think>\n" + text)
        family.check("plan " + text, vllm_request(TOOLS))
        family.check(text, vllm_request(TOOLS, chat_template_kwargs={"thinking": False}))


@_SETTINGS
@given(
    st.sampled_from(KIMI_OUTPUTS),
    st.lists(st.integers(0, 50), max_size=12),
    st.sampled_from(range(len(requests()))),
)
def test_kimi_k2_streaming_matches_vllm_for_any_cut(text: str, cuts: list[int], which: int) -> None:
    KIMI.check_stream(text, cuts, requests()[which])


# -- minimax_m2 --------------------------------------------------------------------------------

MINIMAX = Family(
    "minimax_m2",
    ("<minimax:tool_call>", "</minimax:tool_call>", "<think>", "</think>"),
    special=("[e~[",),
)


def _mm(name: str, quote: str = '"', **params: str) -> str:
    body = "".join(f'<parameter name="{k}">{v}</parameter>\n' for k, v in params.items())
    return f"<invoke name={quote}{name}{quote}>\n{body}</invoke>\n"


MINIMAX_OUTPUTS = [
    "<minimax:tool_call>\n" + _mm("get_weather", city="Seattle") + "</minimax:tool_call>",
    "Sure. <minimax:tool_call>"
    + _mm("get_weather", "'", city="Zürich", unit="c")
    + _mm("get_time", "")
    + "</minimax:tool_call>",
    "<minimax:tool_call>" + _mm("plan_trip", days="5", metric="true", stops="[1,2]"),
    "<minimax:tool_call>" + _mm("nope", a="1") + "</minimax:tool_call> after",
    "<minimax:tool_call>" + _mm("get_weather", city=" sp ace ")[:-25],
    "<minimax:tool_call><invoke name=\"get_weather\"><parameter name=city>x<parameter name='unit'>y"
    "</invoke></minimax:tool_call>",
    "plain answer[e~[",
    "</minimax:tool_call> stray end",
]


@pytest.mark.parametrize("reasoning", [None, "minimax_m2"])
@pytest.mark.parametrize("text", MINIMAX_OUTPUTS)
def test_minimax_m2_matches_vllm(reasoning: str | None, text: str) -> None:
    family = Family(MINIMAX.parser, MINIMAX.markers, reasoning, MINIMAX.special)
    if reasoning:
        # vLLM's engine drops special tokens and a stray tool-call end from the reasoning pass's
        # content; the engine-think reasoning parsers do not (reasoning/engine_think.py).
        if text.startswith("</minimax:tool_call>"):
            return
        text = text.replace("[e~[", "")
    check_all(family, text)
    if reasoning:
        family.check("thinking</think>\n\n" + text)
        family.check("thinking " + text)


@_SETTINGS
@given(
    st.sampled_from(MINIMAX_OUTPUTS),
    st.lists(st.integers(0, 60), max_size=12),
    st.sampled_from(range(len(requests()))),
)
def test_minimax_m2_streaming_matches_vllm_for_any_cut(
    text: str, cuts: list[int], which: int
) -> None:
    MINIMAX.check_stream(text, cuts, requests()[which])


# -- deepseek_v32 / deepseek_v4 / deepseek_v41 (DSML) ------------------------------------------


def _dsml(
    wrapper: str, *calls: tuple[str, dict[str, tuple[str, str | None]]], sep: str = ""
) -> str:
    d = "｜DSML｜" + sep
    body = ""
    for name, params in calls:
        body += f'<{d}invoke name="{name}">\n'
        for key, (value, is_str) in params.items():
            attr = f' string="{is_str}"' if is_str is not None else ""
            body += f'<{d}parameter name="{key}"{attr}>{value}</{d}parameter>\n'
        body += f"</{d}invoke>\n"
    return f"<{d}{wrapper}>\n{body}</{d}{wrapper}>"


def dsml_outputs(wrapper: str, sep: str = "") -> list[str]:
    """A DSML corpus with ``wrapper`` tags."""
    w = _dsml(wrapper, ("get_weather", {"city": ("杭州", "true")}), sep=sep)
    return [
        w,
        "Let me see.\n\n" + w + " and trailing text",
        _dsml(
            wrapper,
            ("plan_trip", {"days": ("5", "false"), "opts": ('{"n": 2}', None)}),
            ("get_time", {}),
            sep=sep,
        ),
        _dsml(wrapper, ("plan_trip", {"arguments": ('{"days": 3}', "false")}), sep=sep),
        _dsml(wrapper, ("get_weather", {"city": ("Pa", "true")}), sep=sep)[:-40],
        _dsml(wrapper, ("get_weather", {"city": ("x", "true")}), sep=sep)[:-20],
        "No tools here.",
        _dsml(wrapper, ("get_weather", {"city": ("<b>", "true")}), sep=sep)
        + _dsml(wrapper, ("get_time", {}), sep=sep),
    ]


DSML_CASES = [
    (Family("deepseek_v32"), dsml_outputs("function_calls")),
    (
        Family("deepseek_v32", ("<｜DSML｜function_calls>", "</｜DSML｜function_calls>")),
        dsml_outputs("function_calls"),
    ),
    (Family("deepseek_v4", ("<think>", "</think>")), dsml_outputs("tool_calls")),
    (Family("deepseek_v4"), [*dsml_outputs("toolcalls")[:3], "a <think>b</think> c"]),
    (Family("deepseek_v41"), dsml_outputs("calls", " ")),
]


@pytest.mark.parametrize(
    ("family", "text"),
    [(f, t) for f, texts in DSML_CASES for t in texts],
    ids=lambda x: getattr(x, "parser", None) or str(len(x)),
)
def test_dsml_families_match_vllm(family: Family, text: str) -> None:
    check_all(family, text)


@_SETTINGS
@given(
    st.sampled_from(range(len(DSML_CASES))),
    st.integers(0, 7),
    st.lists(st.integers(0, 90), max_size=12),
    st.sampled_from(range(len(requests()))),
)
def test_dsml_streaming_matches_vllm_for_any_cut(
    case: int, which_text: int, cuts: list[int], which: int
) -> None:
    family, texts = DSML_CASES[case]
    family.check_stream(texts[which_text % len(texts)], cuts, requests()[which])


# -- granite (JSON array) ----------------------------------------------------------------------

GRANITE = Family("granite", special=("<|tool_call|>",))
GRANITE_OUTPUTS = [
    '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "SF"}}]',
    '<tool_call> [{"name": "get_weather", "arguments": {"city": "Zürich", "unit": "c"}},'
    ' {"name": "get_time", "arguments": {}}] and after',
    'Sure. <|tool_call|>[{"arguments": {"q": "a}b\\"c"}, "name": "get_weather"}]',
    '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "S',
    '<|tool_call|>{"name": "get_time"}',
    '<|tool_call|>[{"name": "get_time", "arguments": "x"}]',
    '<|tool_call|>[{"name": "plan_trip", "arguments": {"days": 2, "opts": {"n": [1]}}}]',
    "no calls",
]


@pytest.mark.parametrize("text", GRANITE_OUTPUTS)
def test_granite_matches_vllm(text: str) -> None:
    check_all(GRANITE, text)


@_SETTINGS
@given(
    st.sampled_from(GRANITE_OUTPUTS),
    st.lists(st.integers(0, 50), max_size=12),
    st.sampled_from(range(len(requests()))),
)
def test_granite_streaming_matches_vllm_for_any_cut(text: str, cuts: list[int], which: int) -> None:
    GRANITE.check_stream(text, cuts, requests()[which])


# -- through the chat route ----------------------------------------------------------------------


def _route_parsers(name: str) -> Any:
    from tests.support.shared_tokenizer import shared_tokenizer
    from tests.support.tiny_model import tiny_model_dir
    from vllm_frontend.chat.output_parser import OutputParsers

    tok = shared_tokenizer(tiny_model_dir())
    parsers = OutputParsers.for_tokenizer(
        tok.token_to_id,
        tool_call_parser=name,
        enable_auto_tool_choice=True,
        special_tokens=tok.all_special_tokens,
    )
    return tok, parsers


@pytest.mark.parametrize("stream", [False, True])
def test_glm47_required_choice_is_read_in_its_format_without_a_json_constraint(
    stream: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM's GLM parser reads "required" in its own format: no JSON schema reaches the engine,
    special tokens are kept, and the call comes back (``tool_calls`` finish, ``""`` content).
    With ``VLLM_ENFORCE_STRICT_TOOL_CALLING`` on, vLLM constrains it with its GLM structural
    tag instead, and so does this frontend (tests/chat/test_tool_structural_tags.py)."""
    import json

    monkeypatch.setenv("VLLM_ENFORCE_STRICT_TOOL_CALLING", "0")
    from tests.chat.test_tool_parsers import CHAT, _chat_app, _post, _ScriptedEngine

    tok, parsers = _route_parsers("glm47")
    text = GLM_OUTPUTS[0]
    engine = _ScriptedEngine(tok.encode(text, add_special_tokens=False))
    body = {**CHAT, "tools": TOOLS, "tool_choice": "required", "stream": stream}
    status, raw = _post(_chat_app(engine, parsers), body)
    assert status == 200, raw
    params = engine.requests[0].sampling_params
    assert params.structured_outputs is None
    assert params.skip_special_tokens is False
    if not stream:
        choice = json.loads(raw)["choices"][0]
        assert choice["finish_reason"] == "tool_calls"
        assert choice["message"]["content"] == ""
        call = choice["message"]["tool_calls"][0]["function"]
        assert (call["name"], call["arguments"]) == ("get_weather", '{"city": "Paris"}')
        return
    chunks = [
        json.loads(line[6:]) for line in raw.decode().splitlines() if line.startswith("data: {")
    ]
    pieces = [tc for c in chunks for tc in (c["choices"][0]["delta"].get("tool_calls") or [])]
    assert pieces[0]["function"]["name"] == "get_weather"
    assert "".join(p["function"].get("arguments") or "" for p in pieces) == '{"city": "Paris"}'
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


# -- ernie45 -------------------------------------------------------------------------------------

ERNIE = Family(
    "ernie45", ("<tool_call>", "</tool_call>", "<response>", "</response>", "<think>", "</think>")
)
ERNIE_OUTPUTS = [
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n',
    'Checking.\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich"}}\n'
    '</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>',
    "<response>\nJust an answer.\n</response>",
    "\n\nplain",
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa',
    "<tool_call>not json</tool_call>",
    '<tool_call>\n["x"]\n</tool_call> after',
    '<tool_call>{"arguments": {"a": 1}}</tool_call>',
]


@pytest.mark.parametrize("reasoning", [None, "ernie45"])
@pytest.mark.parametrize("text", ERNIE_OUTPUTS)
def test_ernie45_matches_vllm(reasoning: str | None, text: str) -> None:
    family = Family(ERNIE.parser, ERNIE.markers, reasoning)
    check_all(family, text)
    if reasoning:
        family.check("thinking\n</think>\n\n" + text)


# -- the engine's helpers ------------------------------------------------------------------------

_JSONISH = st.text(st.sampled_from(list('{}[]:,"\\ab \n1x')), max_size=16)


@settings(max_examples=400, deadline=None)
@given(_JSONISH, st.sampled_from([None, {"a", "b"}, set()]))
def test_safe_arg_prefix_matches_vllms(text: str, keys: set[str] | None) -> None:
    from vllm.parser.engine.parser_engine import ParserEngine

    from vllm_frontend.chat.engine.calls import safe_arg_prefix

    assert safe_arg_prefix(text, keys) == ParserEngine._safe_arg_prefix(text, keys)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.sampled_from(["1", "-2", "1.5", "1e999", "nan", "true", "0", "null", "[1]", '{"a":1}']),
        st.text(max_size=6),
    ),
    st.lists(
        st.sampled_from(["string", "integer", "number", "boolean", "null", "object", "array",
                         "int", "float", "bool", "list", "dict", "str", " Integer "]),
        min_size=1,
        max_size=3,
    ),
)  # fmt: skip
def test_schema_coercion_matches_vllms(value: str, types: list[str]) -> None:
    from vllm.tool_parsers.utils import coerce_to_schema_type

    from vllm_frontend.chat.engine.coerce import coerce_text

    ours, theirs = coerce_text(value, types), coerce_to_schema_type(value, types)
    assert type(ours) is type(theirs) and repr(ours) == repr(theirs)


@pytest.mark.parametrize("kwargs", [{}, {"enable_thinking": False}, {"thinking": False}])
def test_startup_looks_up_every_token_a_grammar_reads_by_id(kwargs: dict[str, Any]) -> None:
    """``OutputParsers.for_tokenizer`` gives parsers only the ids of their declared tokens."""
    from vllm_frontend.chat.engine.calls import EngineToolParser
    from vllm_frontend.chat.tool_parsers import TOOL_PARSERS

    engine = [c for c in TOOL_PARSERS.values() if issubclass(c, EngineToolParser)]
    assert len(engine) >= 14
    for cls in engine:
        wanted = set(cls.grammar_for(kwargs).token_terminals.values())
        assert wanted <= set(cls.optional_tokens), cls.name


# -- plamo3 ------------------------------------------------------------------------------------
# PLaMo 3's markers are three tokens each: "<|plamo:begin_" / "<|plamo:end_" (special), the
# word in ordinary pieces, ":plamo|>" (special); only the end of turn is one token.

PLAMO_SPECIAL = ("<|plamo:begin_", "<|plamo:end_", ":plamo|>", "<|plamo:tag|>", "<|plamo:bos|>")
PLAMO_MARKERS = ("<|plamo:constrain|>", "<|plamo:msg|>")
_P_THINK = ("<|plamo:begin_think:plamo|>", "<|plamo:end_think:plamo|>")
_P_CALLS = ("<|plamo:begin_tool_requests:plamo|>", "<|plamo:end_tool_requests:plamo|>")
_P_ARGS_END = "<|plamo:end_tool_arguments:plamo|>"
_P_EOT = "<|plamo:tag|>"


def _plamo_head(name: str) -> str:
    return (
        "<|plamo:begin_tool_request:plamo|><|plamo:begin_tool_name:plamo|>"
        f"{name}<|plamo:end_tool_name:plamo|><|plamo:begin_tool_arguments:plamo|>"
        "<|plamo:constrain|>json<|plamo:msg|>"
    )


def _plamo(name: str, args: str) -> str:
    return _plamo_head(name) + args + _P_ARGS_END + "<|plamo:end_tool_request:plamo|>"


def _plamo_block(*calls: str) -> str:
    return _P_CALLS[0] + "".join(calls) + _P_CALLS[1]


PLAMO_OUTPUTS = [
    _P_THINK[0] + "Reasoning." + _P_THINK[1] + "Answer.",
    "Plain answer without markers.",
    _P_THINK[1] + "Before tools. " + _plamo_block(_plamo("get_weather", '{"city": "東京"}')),
    _P_THINK[1]
    + _plamo_block(_plamo("get_weather", '{"city":"Paris"}'), _plamo("get_time", "{}"))
    + _P_EOT,
    "reasoning" + _plamo_block(_plamo("get_time", "{}")),
    _P_THINK[1] + _P_CALLS[0] + _plamo_head("get_weather") + '{"city":"東京"}',
    _P_THINK[1] + _P_CALLS[0] + _plamo_head("get_weather") + '{"city":"東京"}<|plamo:end_tool_',
    _P_THINK[1] + _P_CALLS[0] + _plamo_head("get_weather") + '{"city":"東京"}<|plamo:end_',
    _P_THINK[1] + _P_CALLS[0] + _plamo_head("get_weather") + '{"text":"literal <|plamo:end_',
    _P_THINK[1]
    + _P_CALLS[0]
    + _plamo("get_weather", '{"city":"x"}')
    + "<|plamo:begin_tool_request:plamo|><|plamo:begin_tool_name:plamo|>get_ti",
    _P_THINK[1] + _P_CALLS[0] + "<|plamo:begin_tool_request:plamo|><|plamo:begin_tool_name:pla",
    _P_THINK[1]
    + _P_CALLS[0]
    + _plamo_head("plan_trip")
    + '{"city": "Rome", "days": "3", "stops": [1, 2], "opts": {"n": 4}, "q": "say \\"hi\\""}',
    _P_THINK[1] + _plamo_block(_plamo("get_weather", "")),
    _P_THINK[1] + "a < b and literal <|plamo:unknown" + _P_EOT,
    "visible<|plamo:end_",
    "visible<|plamo:end_think",
    _P_THINK[0] + "x" + _P_THINK[1] + "  \n" + _plamo_block(_plamo("get_time", "{ }")) + " after",
    _P_THINK[1] + "text" + _P_EOT + "after the turn" + _P_CALLS[0],
    _P_THINK[1] + _plamo_block(_plamo("unknown_tool", '{"name":"Alice","arguments":{"x":1}}')),
]
PLAMO = Family("plamo3", PLAMO_MARKERS, "plamo3", PLAMO_SPECIAL)
PLAMO_FAMILIES = [PLAMO, Family("plamo3", PLAMO_MARKERS, None, PLAMO_SPECIAL)]


def plamo_requests() -> list[Any]:
    """:func:`requests` and thinking switched off."""
    return [*requests(), vllm_request(TOOLS, chat_template_kwargs={"enable_thinking": False})]


@pytest.mark.parametrize("family", PLAMO_FAMILIES, ids=lambda f: f"reasoning={f.reasoning}")
@pytest.mark.parametrize("text", PLAMO_OUTPUTS)
def test_plamo3_matches_vllm(family: Family, text: str) -> None:
    for req in plamo_requests():
        family.check(text, req)


@_SETTINGS
@given(
    st.sampled_from(PLAMO_OUTPUTS),
    st.lists(st.integers(0, 90), max_size=14),
    st.sampled_from(range(7)),
)
def test_plamo3_streaming_matches_vllm_for_any_cut(text: str, cuts: list[int], which: int) -> None:
    PLAMO.check_stream(text, cuts, plamo_requests()[which])


_WRITTEN_KEYS = [
    *[(family, QWEN3_OUTPUTS[:4]) for family in QWEN3_FAMILIES],
    *[(family, GLM_OUTPUTS[:4]) for family in GLM_FAMILIES],
    (KIMI, KIMI_OUTPUTS[:4]),
    (MINIMAX, MINIMAX_OUTPUTS[:4]),
    (GRANITE, GRANITE_OUTPUTS[:4]),
    (ERNIE, ERNIE_OUTPUTS),
    *[(family, PLAMO_OUTPUTS) for family in PLAMO_FAMILIES],
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
    ``exclude_unset``): every ernie45 delta says ``"content": null`` when it has none, and
    plamo3's last delta sets both fields; ours write the same keys, token by token and whole."""
    for text in outputs:
        family.check_written_keys(text)

"""Pythonic, DeepSeek and JSON-list tool-call parsers match vLLM 0.32's, delta for delta."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.chat.tool_family_harness import TOOLS, Family, vllm_request

pytestmark = pytest.mark.oracle  # imports vLLM as the reference

pytest.importorskip("vllm")

_SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])

PYTHONIC = Family("pythonic")
LLAMA4 = Family("llama4_pythonic", ("<|python_start|>", "<|python_end|>"))

PYTHONIC_OUTPUTS = [
    "[get_weather(city='Paris')]",
    "[get_weather(city=\"Paris\", unit='celsius'), get_time()]",
    "[get_time()]",
    "[get_weather(city='Zürich 日本', days=[1, 2.5, -3], opts={'a': None, 'b': true})]",
    "Sure, no tools are needed here.",
    "[get_weather(city='Pa",
    "[get_weather(city='it\\'s \"quoted\"')]",
    "[tools.clock.get_time(tz='UTC'), get_weather(city='x')]",
    "[get_weather('Paris')]",
    "[get_weather(city=f'x'), get_time(n=-2, t=(1, 2), s={3})]",
    "text first [get_time()]",
    "[get_weather(city='Paris') ]",
    "[get_weather(city='Paris')] and some trailing text",
    "[get_time(), get_time() ]",
    "[get_time() get_weather(city='a')]",
    "[get_weather(city='a]b(c')]",
    "[get_weather(q={'k': 'v', 'n': [1, {'x': 'y'}]}, n=None)]",
    "[get_weather(city='Paris'), ",
    "[]",
    "[get_weather(city=1e400, x=b'raw')]",
    "[get_weather(city='line\\nbreak', e='')]",
    "[get_time(), get_weather(city='Paris', unit='c'), get_time()]",
]


@pytest.mark.parametrize("text", PYTHONIC_OUTPUTS)
def test_pythonic_matches_vllm(text: str) -> None:
    PYTHONIC.check(text)


LLAMA4_OUTPUTS = [
    "<|python_start|>[get_weather(city='Paris')]<|python_end|>",
    "<|python_start|>[get_weather(city='Paris'), get_time()]<|python_end|> after",
    "<|python_start|>[get_time()]",
    "[get_weather(city='Paris')]",
    "Plain <|python_start|> text",
]


@pytest.mark.parametrize("text", LLAMA4_OUTPUTS + PYTHONIC_OUTPUTS[:6])
def test_llama4_pythonic_matches_vllm(text: str) -> None:
    LLAMA4.check(text)


@_SETTINGS
@given(st.sampled_from(PYTHONIC_OUTPUTS), st.lists(st.integers(0, 70), max_size=12))
def test_pythonic_streaming_matches_vllm_for_any_cut(text: str, cuts: list[int]) -> None:
    PYTHONIC.check_stream(text, cuts)


def test_pythonic_call_list_pattern_matches_vllms_regex() -> None:
    import regex
    from vllm.tool_parsers.pythonic_tool_parser import PythonicToolParser

    from vllm_frontend.chat.tools.pythonic import looks_like_call_list

    texts = [
        *PYTHONIC_OUTPUTS,
        "[a() , b()]",
        "[a()x)]",
        "[a(1)]",
        "[a(),b()]",
        "[a() b() ,c()]",
        "[a(), b() c()]",
        "[a( )]",
        "[a(x=1)",
        "[a(x=1) junk )  ]",
        "[_a()]",
        "[1a()]",
        "[ab9_(q=)]",
        "[a()\n]",
        "[a(),\n\tb(c=2)]",
    ]
    pattern = regex.compile(PythonicToolParser.TOOL_CALL_REGEX.pattern, regex.DOTALL)
    for text in texts:
        assert looks_like_call_list(text) == (pattern.match(text) is not None), text


DEEPSEEK_MARKERS = (
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁calls▁end｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁call▁end｜>",
    "<｜tool▁sep｜>",
)
DEEPSEEK_V3 = Family("deepseek_v3", DEEPSEEK_MARKERS)
DEEPSEEK_V31 = Family("deepseek_v31", DEEPSEEK_MARKERS)


def _v3(name: str, args: str, kind: str = "function") -> str:
    return (
        f"<｜tool▁call▁begin｜>{kind}<｜tool▁sep｜>{name}\n```json\n{args}\n```<｜tool▁call▁end｜>"
    )


def _v31(name: str, args: str) -> str:
    return f"<｜tool▁call▁begin｜>{name}<｜tool▁sep｜>{args}<｜tool▁call▁end｜>"


BEGIN, END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
V3_OUTPUTS = [
    BEGIN + _v3("get_weather", '{"city": "Paris"}') + END,
    "Let me check." + BEGIN + _v3("get_weather", '{"city": "Paris", "unit": "c"}') + END,
    BEGIN + _v3("get_weather", '{"city": "Zürich 日本"}') + _v3("get_time", "{}") + END,
    BEGIN + _v3("get_weather", '{"city": "Paris"}')[:-32],
    BEGIN + _v3("get_time", '{\n  "tz": "UTC"\n}') + END,
    BEGIN + _v3("get_weather", '{"q": "say \\"hi\\""}', kind="custom") + END,
    "No tools at all.",
    BEGIN + _v3("get_weather", '{"city": "Paris"}') + END + " trailing",
    BEGIN + "garbage" + END,
    BEGIN + _v3("get_weather", '{"n": 5}') + _v3("get_time", '{"tz": "CET"}') + END,
]
V31_OUTPUTS = [
    BEGIN + _v31("get_weather", '{"city": "Paris"}') + END,
    "Checking." + BEGIN + _v31("get_weather", '{"city": "Zürich"}') + _v31("get_time", "{}") + END,
    BEGIN + _v31("get_weather", '{"city": "Paris"}')[:-24],
    BEGIN + _v31("get_time", '{\n"tz": "UTC"}') + END,
    BEGIN + _v31("get_weather", '{"q": "a \\"quoted\\" 日本"}') + END + "after",
    "Nothing to call.",
    BEGIN + _v31("get_weather", '{"n": 5}') + _v31("get_time", '{"tz": "CET"}') + END,
]


@pytest.mark.parametrize("text", V3_OUTPUTS)
def test_deepseek_v3_matches_vllm(text: str) -> None:
    DEEPSEEK_V3.check(text)


@pytest.mark.parametrize("text", V31_OUTPUTS)
def test_deepseek_v31_matches_vllm(text: str) -> None:
    DEEPSEEK_V31.check(text)


@_SETTINGS
@given(
    st.sampled_from(
        [(DEEPSEEK_V3, t) for t in V3_OUTPUTS] + [(DEEPSEEK_V31, t) for t in V31_OUTPUTS]
    ),
    st.lists(st.integers(0, 50), max_size=10),
)
def test_deepseek_streaming_matches_vllm_for_any_cut(
    case: tuple[Family, str], cuts: list[int]
) -> None:
    family, text = case
    family.check_stream(text, cuts)


@pytest.mark.parametrize("family", [PYTHONIC, DEEPSEEK_V3])
def test_tool_choice_none_and_no_tools_match_vllm(family: Family) -> None:
    text = (PYTHONIC_OUTPUTS if family is PYTHONIC else V3_OUTPUTS)[1]
    family.check(text, vllm_request(tool_choice="none"))
    family.check(text, vllm_request(None))


PHI4 = Family("phi4_mini_json")
PHI4_OUTPUTS = [
    'functools[{"name": "get_weather", "arguments": {"city": "Paris"}}]',
    'Sure. functools[{"name": "get_weather", "parameters": {"city": "Zürich"}}, '
    '{"name": "get_time", "arguments": {}}] done',
    "functools[not json]",
    'functools[{"name": 5, "arguments": {}}]',
    'functools[{"name": "get_time"}]',
    'functools["get_time"]',
    'functools[{"name": "get_weather", "arguments": {"list": [1, 2]}}]',
    "No tools.",
    'functools[{"name": "get_weather", "arguments": {"city": "Pa',
]


@pytest.mark.parametrize("text", PHI4_OUTPUTS)
def test_phi4_mini_json_matches_vllm(text: str) -> None:
    PHI4.check(text)


JAMBA = Family("jamba", ("<tool_calls>", "</tool_calls>"))
JAMBA_OUTPUTS = [
    '<tool_calls>[{"name": "get_weather", "arguments": {"city": "Paris"}}]</tool_calls>',
    'Let me look. <tool_calls>[{"name": "get_weather", "arguments": {"city": "Zürich 日本", '
    '"unit": "c"}}, {"name": "get_time", "arguments": {}}]</tool_calls>',
    ' <tool_calls>[{"name": "get_time", "arguments": {"tz": "UTC", "n": [1, {"a": null}]}}]'
    "</tool_calls>",
    '<tool_calls>[{"name": "get_weather", "arguments": {"city": "Pa',
    "<tool_calls>not json</tool_calls>",
    '<tool_calls>{"name": "get_weather", "arguments": {}}</tool_calls>',
    '<tool_calls>[{"name": "get_weather", "arguments": {"q": "it\'s \\"x\\""}}]</tool_calls>',
    "Just text, no calls.",
    '<tool_calls>[{"name": "get_weather", "arguments": {"city": "Paris"}}] extra</tool_calls>',
    '<tool_calls>[{"name": "get_time", "arguments": {}}, {"name": "get_weather", '
    '"arguments": {"city": "Rome"}}, {"name": "get_time", "arguments": {"tz": "CET"}}]'
    "</tool_calls>",
]


@pytest.mark.parametrize("text", JAMBA_OUTPUTS)
def test_jamba_matches_vllm(text: str) -> None:
    JAMBA.check(text)


@_SETTINGS
@given(
    st.sampled_from([(JAMBA, t) for t in JAMBA_OUTPUTS] + [(PHI4, t) for t in PHI4_OUTPUTS]),
    st.lists(st.integers(0, 60), max_size=10),
)
def test_json_list_streaming_matches_vllm_for_any_cut(
    case: tuple[Family, str], cuts: list[int]
) -> None:
    family, text = case
    family.check_stream(text, cuts)


@_SETTINGS
@given(
    st.dictionaries(
        st.text(st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), max_size=6),
        st.one_of(st.integers(-5000, 5000), st.text(max_size=8), st.booleans(), st.none()),
        max_size=3,
    ),
    st.lists(st.integers(0, 60), max_size=10),
)
def test_jamba_generated_arguments_match_vllm(arguments: dict[str, Any], cuts: list[int]) -> None:
    call = json.dumps([{"name": "get_weather", "arguments": arguments}], ensure_ascii=False)
    text = f"<tool_calls>{call}</tool_calls>"
    tok = JAMBA.tok
    if tok.decode(tok.encode(text, add_special_tokens=False)) != text:
        return
    req = vllm_request()
    assert JAMBA.ours_full(text, req) == JAMBA.vllm_full(text, req)
    JAMBA.check_stream(text, cuts)


LONGCAT = Family("longcat", ("<longcat_tool_call>", "</longcat_tool_call>"))
QWEN3_JSON = Family("qwen3_json", ("<tool_call>", "</tool_call>"))
HERMES_LIKE = [
    "I will check.\n<tool_call>\n"
    '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich", "unit": "c"}}\n'
    '</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>',
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa',
    "<tool_call>not json</tool_call> trailing",
    "No call, < and > used.",
]


@pytest.mark.parametrize("text", HERMES_LIKE)
def test_qwen3_json_is_hermes_like_vllm(text: str) -> None:
    QWEN3_JSON.check(text)


@pytest.mark.parametrize("text", HERMES_LIKE)
def test_longcat_matches_vllm(text: str) -> None:
    LONGCAT.check(text.replace("tool_call>", "longcat_tool_call>"))


STEP3 = Family(
    "step3",
    (
        "<｜tool_calls_begin｜>",
        "<｜tool_calls_end｜>",
        "<｜tool_call_begin｜>",
        "<｜tool_call_end｜>",
        "<｜tool_sep｜>",
    ),
)
TYPED_TOOL = {
    "type": "function",
    "function": {
        "name": "book",
        "parameters": {
            "type": "object",
            "properties": {
                "n": {"type": "integer"},
                "x": {"type": "number"},
                "ok": {"type": "boolean"},
                "none": {"type": "null"},
                "s": {"type": "string"},
            },
        },
    },
}


def _step3(name: str, params: dict[str, str], kind: str = "function") -> str:
    body = "".join(
        f'<steptml:parameter name="{k}">{v}</steptml:parameter>' for k, v in params.items()
    )
    return (
        f'<｜tool_call_begin｜>{kind}<｜tool_sep｜><steptml:invoke name="{name}">{body}'
        "</steptml:invoke><｜tool_call_end｜>"
    )


S_BEGIN, S_END = "<｜tool_calls_begin｜>", "<｜tool_calls_end｜>"
STEP3_OUTPUTS = [
    S_BEGIN + _step3("get_weather", {"city": "Paris"}) + S_END,
    "Let me see. "
    + S_BEGIN
    + _step3("get_weather", {"city": " Zürich 日本 "})
    + "\n"
    + _step3("get_time", {})
    + S_END
    + " done",
    S_BEGIN
    + _step3("book", {"n": "12", "x": "2.5", "ok": "True", "none": "null", "s": " a "})
    + S_END,
    S_BEGIN + _step3("book", {"n": "twelve", "x": "nan", "ok": "yes", "none": "x"}) + S_END,
    S_BEGIN + _step3("get_weather", {"city": "Paris"}, kind="other") + S_END,
    S_BEGIN + _step3("get_weather", {"city": "Paris"}),
    S_BEGIN + _step3("get_weather", {"city": "Paris"})[:60],
    "Plain answer.",
    "   ",
    S_BEGIN + "junk" + S_END,
]


@pytest.mark.parametrize("text", STEP3_OUTPUTS)
def test_step3_matches_vllm(text: str) -> None:
    STEP3.check(text, vllm_request([*TOOLS, TYPED_TOOL]))


@_SETTINGS
@given(st.sampled_from(STEP3_OUTPUTS), st.lists(st.integers(0, 80), max_size=12))
def test_step3_streaming_matches_vllm_for_any_cut(text: str, cuts: list[int]) -> None:
    STEP3.check_stream(text, cuts, vllm_request([*TOOLS, TYPED_TOOL]))


OLMO3 = Family("olmo3", ("<function_calls>", "</function_calls>"))
OLMO3_OUTPUTS = [
    "<function_calls>get_weather(city='Paris')</function_calls>",
    '<function_calls>\nget_weather(city="Zürich 日本", unit=null)\nget_time()\n</function_calls>',
    "get_weather(city='Paris')",
    "<function_calls>get_weather(city='Pa",
    "<function_calls>get_weather(city='a', ok=true)\n\nget_time(tz='UTC')</function_calls> after",
    "<b>not a call</b>",
    "Plain text.",
    "<function_calls>get_weather('positional')</function_calls>",
]


@pytest.mark.parametrize("text", OLMO3_OUTPUTS)
def test_olmo3_matches_vllm(text: str) -> None:
    OLMO3.check(text)


@_SETTINGS
@given(st.sampled_from(OLMO3_OUTPUTS), st.lists(st.integers(0, 60), max_size=12))
def test_olmo3_streaming_matches_vllm_for_any_cut(text: str, cuts: list[int]) -> None:
    OLMO3.check_stream(text, cuts)


THINK = ("<think>", "</think>")


@pytest.mark.parametrize(
    ("family", "outputs"),
    [
        (Family("deepseek_v3", DEEPSEEK_MARKERS + THINK, "deepseek_r1"), V3_OUTPUTS[:4]),
        (Family("deepseek_v31", DEEPSEEK_MARKERS + THINK, "deepseek_r1"), V31_OUTPUTS[:3]),
        (Family("pythonic", THINK, "qwen3"), PYTHONIC_OUTPUTS[:3]),
        (Family("jamba", ("<tool_calls>", "</tool_calls>", *THINK), "qwen3"), JAMBA_OUTPUTS[:3]),
        (Family("step3", STEP3.markers + THINK, "deepseek_r1"), STEP3_OUTPUTS[:3]),
    ],
    ids=["deepseek_v3", "deepseek_v31", "pythonic", "jamba", "step3"],
)
@pytest.mark.parametrize("include_reasoning", [True, False])
def test_reasoning_then_tool_calls_match_vllm(
    family: Family, outputs: list[str], include_reasoning: bool
) -> None:
    req = vllm_request(include_reasoning=include_reasoning)
    for body in outputs:
        for text in (f"<think>Let me think.</think>{body}", f"plan first</think>\n\n{body}"):
            family.check(text, req, [3, 9, 17])


_VALUES = st.recursive(
    st.one_of(
        st.integers(-5000, 5000),
        st.floats(allow_nan=False, width=32),
        st.text(st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), max_size=6),
        st.booleans(),
        st.none(),
    ),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=2)
    ),
    max_leaves=6,
)


@_SETTINGS
@given(
    st.dictionaries(st.from_regex(r"[a-z][a-z0-9_]{0,5}", fullmatch=True), _VALUES, max_size=3),
    st.sampled_from([PYTHONIC, DEEPSEEK_V31, DEEPSEEK_V3, JAMBA]),
    st.lists(st.integers(0, 80), max_size=10),
)
def test_generated_arguments_match_vllm(
    arguments: dict[str, Any], family: Family, cuts: list[int]
) -> None:
    import keyword

    if any(keyword.iskeyword(k) for k in arguments):
        return
    dumped = json.dumps(arguments, ensure_ascii=False)
    if family is PYTHONIC:
        text = "[get_weather(" + ", ".join(f"{k}={v!r}" for k, v in arguments.items()) + ")]"
    elif family is JAMBA:
        text = f'<tool_calls>[{{"name": "get_weather", "arguments": {dumped}}}]</tool_calls>'
    elif family is DEEPSEEK_V3:
        text = BEGIN + _v3("get_weather", dumped) + END
    else:
        text = BEGIN + _v31("get_weather", dumped) + END
    tok = family.tok
    if tok.decode(tok.encode(text, add_special_tokens=False)) != text:
        return
    req = vllm_request()
    assert family.ours_full(text, req) == family.vllm_full(text, req)
    family.check_stream(text, cuts, req)


def test_chat_route_types_step3_arguments_by_the_request_tools() -> None:
    from tests.chat.test_tool_parsers import CHAT, _chat_app, _post, _ScriptedEngine
    from tests.support.shared_tokenizer import shared_tokenizer
    from tests.support.tiny_model import tiny_model_dir
    from vllm_frontend.chat.output_parser import OutputParsers

    text = STEP3_OUTPUTS[2]
    tok = shared_tokenizer(tiny_model_dir())
    ids = tok.encode(text, add_special_tokens=False)
    parsers = OutputParsers.for_tokenizer(
        tok.token_to_id, tool_call_parser="step3", enable_auto_tool_choice=True
    )
    tools = [*TOOLS, TYPED_TOOL]
    expected = STEP3.vllm_full(text, vllm_request(tools))
    status, raw = _post(_chat_app(_ScriptedEngine(ids), parsers), {**CHAT, "tools": tools})
    assert status == 200, raw
    message = json.loads(raw)["choices"][0]["message"]
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]]
    assert calls == [(n, a) for n, a, _ in expected.calls]
    assert calls == [("book", '{"n": 12, "x": 2.5, "ok": true, "none": null, "s": "a"}')]


INTERNLM = Family("internlm", ("<|action_start|>", "<|action_end|>", "<|plugin|>"))
INTERNLM_OUTPUTS = [
    '<|action_start|><|plugin|>\n{"name": "get_weather", "parameters": {"city": "Paris"}}'
    "<|action_end|>",
    'Let me check.<|action_start|><|plugin|>{"name": "get_weather", "arguments": '
    '{"city": "Zürich 日本", "unit": "c"}}<|action_end|>',
    '<|action_start|><|plugin|>{"name": "get_time"}<|action_end|>',
    '<|action_start|><|plugin|>{"name": "get_weather", "parameters": {"city": "Pa',
    "<|action_start|><|plugin|>not json<|action_end|>",
    "No tools here.",
    "Code: <|action_start|><|interpreter|>print(1)<|action_end|>",
    '<|action_start|><|plugin|>{"name": "get_time", "parameters": {}}<|action_end|>'
    '<|action_start|><|plugin|>{"name": "get_time", "parameters": {}}<|action_end|>',
    '<|action_start|><|plugin|>{"name": "get_weather", "parameters": {"q": "a \\"b\\"", '
    '"n": [1, 2.5, null]}}<|action_end|>',
]


@pytest.mark.parametrize("text", INTERNLM_OUTPUTS[:-2] + INTERNLM_OUTPUTS[-1:])
def test_internlm_matches_vllm(text: str) -> None:
    INTERNLM.check(text)


def test_internlm_two_actions_fail_like_vllm() -> None:
    text = INTERNLM_OUTPUTS[-2]
    INTERNLM.check(text.replace("<|plugin|>", "", 1))  # one plugin action, one other action
    req = vllm_request()
    with pytest.raises(ValueError, match="too many values to unpack") as vllm_error:
        INTERNLM.vllm_full(text, req)
    with pytest.raises(ValueError) as ours:
        INTERNLM.ours_full(text, req)
    assert str(ours.value) == str(vllm_error.value)


@_SETTINGS
@given(st.sampled_from(INTERNLM_OUTPUTS[:-2]), st.lists(st.integers(0, 60), max_size=12))
def test_internlm_streaming_matches_vllm_for_any_cut(text: str, cuts: list[int]) -> None:
    INTERNLM.check_stream(text, cuts)


XLAM = Family("xlam", ("<tool_call>", "</tool_call>", "</think>", "[TOOL_CALLS]"))
_XCALL = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
_XTIME = '{"name": "get_time", "arguments": {}}'
XLAM_OUTPUTS = [
    f"[{_XCALL}]",
    f"[{_XCALL}, {_XTIME}]",
    f"[{_XTIME}, {_XCALL}]",
    f"```json\n[{_XCALL}]\n```",
    f"Sure, calling now.\n```json\n[{_XCALL}, {_XTIME}]\n```\nDone.",
    f"[TOOL_CALLS][{_XCALL}]",
    f"<tool_call>[{_XCALL}]</tool_call>",
    f"I thought about it.</think>[{_XCALL}]",
    f"plan</think>\n```json\n[{_XTIME}]\n```",
    '[{"name": "get_weather", "arguments": {"city": "Zürich 日本", "n": {"a": [1, 2]}}}]',
    '[{"name": "get_weather", "arguments": "{\\"city\\": \\"Rome\\"}"}]',
    '[{"name": "get_weather", "arguments": {"city": "Pa',
    '{"name": "get_weather", "arguments": {"city": "Paris"}}',
    '[{"name": "get_weather"}, ' + _XTIME + "]",
    '[{"name": "get_weather", "arguments": [1]}]',
    "No tools needed, the answer is 42.",
    "[not json at all]",
]


@pytest.mark.parametrize("text", XLAM_OUTPUTS)
def test_xlam_matches_vllm(text: str) -> None:
    XLAM.check(text)


@_SETTINGS
@given(st.sampled_from(XLAM_OUTPUTS), st.lists(st.integers(0, 60), max_size=12))
def test_xlam_streaming_matches_vllm_for_any_cut(text: str, cuts: list[int]) -> None:
    XLAM.check_stream(text, cuts)


GRANITE4 = Family("granite4", ("<tool_call>", "</tool_call>"))
GRANITE4_OUTPUTS = [
    '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
    'Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich 日本"}}\n'
    '</tool_call>\n<tool_call>{"name": "get_time", "arguments": {}}</tool_call> done',
    '<tool_call>{"name": "get_weather", "arguments": "raw text args"}</tool_call>',
    '<tool_call>{"name": "get_weather", "arguments": null}</tool_call>',
    '<tool_call>{"name": "get_weather", "arguments": {"city": "Pa',
    "<tool_call>not json</tool_call> then text",
    "</tool_call> stray closer",
    "<tool_call></tool_call>",
    "Use <tool wisely, and <tool_call",
    "Plain text only.",
    '<tool_call>{"name": "get_time", "arguments": {}}</tool_call><tool_call>{"name": '
    '"get_weather", "arguments": {"q": "it\'s \\"x\\""}}</tool_call>',
    '<tool_call>["not", "an", "object"]</tool_call>'
    '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>',
]


@pytest.mark.parametrize("text", GRANITE4_OUTPUTS)
def test_granite4_matches_vllm(text: str) -> None:
    GRANITE4.check(text)


@_SETTINGS
@given(st.sampled_from(GRANITE4_OUTPUTS), st.lists(st.integers(0, 60), max_size=12))
def test_granite4_streaming_matches_vllm_for_any_cut(text: str, cuts: list[int]) -> None:
    GRANITE4.check_stream(text, cuts)


GIGACHAT3 = Family("gigachat3", ("<|function_call|>", "<|message_sep|>", "<|role_sep|>", "</s>"))
GIGACHAT3_OUTPUTS = [
    '<|function_call|>{"name": "get_weather", "arguments": {"city": "Paris"}}',
    'Let me check.<|function_call|>{"name": "get_weather", "arguments": {"city": "Zürich 日本", '
    '"unit": "c"}}</s>',
    'function call<|role_sep|>\n{"name": "get_time", "arguments": {}}',
    '<|function_call|>{"name": "get_weather", "arguments": "text"}',
    '<|function_call|>{"name": "get_weather", "arguments": {"city": "Pa',
    "<|function_call|>not json",
    "Answer<|message_sep|>more",
    "Plain text.",
    '<|function_call|>{"name": "get_weather", "arguments": {"q": "a \\"b\\"\tc", "n": [1, {}]}}',
]


@pytest.mark.parametrize("text", GIGACHAT3_OUTPUTS)
def test_gigachat3_matches_vllm(text: str) -> None:
    GIGACHAT3.check(text)


@_SETTINGS
@given(st.sampled_from(GIGACHAT3_OUTPUTS), st.lists(st.integers(0, 60), max_size=12))
def test_gigachat3_streaming_matches_vllm_for_any_cut(text: str, cuts: list[int]) -> None:
    GIGACHAT3.check_stream(text, cuts)


GRANITE_20B = Family("granite-20b-fc", ("<function_call>",))
GRANITE_20B_OUTPUTS = [
    '<function_call> {"name": "get_weather", "arguments": {"city": "Paris"}}',
    '<function_call> {"name": "get_weather", "arguments": {"city": "Zürich 日本", "unit": "c"}} '
    '<function_call> {"name": "get_time", "arguments": {}}',
    '<function_call>{"name": "get_weather", "arguments": {"city": "Pa',
    "<function_call> not json",
    'Before <function_call> {"name": "get_time", "arguments": {}}',
    "Plain text only.",
    '<function_call> {"name": "get_weather", "arguments": {"q": "a \\"b\\"", "n": [1, 2.5]}}\n'
    '<function_call> {"name": "get_time", "arguments": {"tz": "UTC"}}',
    '<function_call> {"name": 5, "arguments": {}}',
]


@pytest.mark.parametrize("text", GRANITE_20B_OUTPUTS)
def test_granite_20b_fc_matches_vllm(text: str) -> None:
    GRANITE_20B.check(text)


@_SETTINGS
@given(st.sampled_from(GRANITE_20B_OUTPUTS), st.lists(st.integers(0, 60), max_size=12))
def test_granite_20b_fc_streaming_matches_vllm_for_any_cut(text: str, cuts: list[int]) -> None:
    GRANITE_20B.check_stream(text, cuts)


FUNCTIONGEMMA = Family(
    "functiongemma", ("<start_function_call>", "<end_function_call>", "<escape>")
)
FUNCTIONGEMMA_OUTPUTS = [
    "<start_function_call>call:get_weather{city:<escape>Paris<escape>}<end_function_call>",
    "Sure. <start_function_call>call:get_weather{city:<escape>Zürich 日本<escape>,"
    "unit:<escape>c<escape>}<end_function_call><start_function_call>call:get_time{}"
    "<end_function_call>",
    "<start_function_call>call:get_weather{n:<escape>12<escape>,ok:<escape>true<escape>,"
    "l:<escape>[1, 2]<escape>}<end_function_call> after",
    "<start_function_call>call:get_weather{city:<escape>Pa",
    "<start_function_call>garbage<end_function_call>",
    "Text with a < sign and <start",
    "Plain text.",
]


@pytest.mark.parametrize("text", FUNCTIONGEMMA_OUTPUTS)
def test_functiongemma_matches_vllm(text: str) -> None:
    FUNCTIONGEMMA.check(text)


@_SETTINGS
@given(st.sampled_from(FUNCTIONGEMMA_OUTPUTS), st.lists(st.integers(0, 60), max_size=12))
def test_functiongemma_streaming_matches_vllm_for_any_cut(text: str, cuts: list[int]) -> None:
    FUNCTIONGEMMA.check_stream(text, cuts)


HUNYUAN = Family("hunyuan_a13b", ("<tool_calls>", "</tool_calls>", "<think>", "</think>"))
HUNYUAN_OUTPUTS = [
    f"<tool_calls>[{_XCALL}]</tool_calls>",
    f"<tool_calls>[{_XCALL},{_XTIME}]</tool_calls>",
    f"<tool_calls>[{_XTIME}, {_XCALL}]</tool_calls>",
    f"[{_XCALL}]",
    f"Let me check. <tool_calls>[{_XCALL}]</tool_calls>",
    f"<think>maybe <tool_calls>[{_XTIME}]</tool_calls></think> answer",
    '<tool_calls>[{"name": "get_weather", "arguments": {"city": "Zürich 日本", "d": {"a": 1}}}]'
    "</tool_calls>",
    '<tool_calls>[{"name": "get_weather", "arguments": "raw"}]</tool_calls>',
    '<tool_calls>[{"name": "get_weather", "arguments": {"city": "Pa',
    "<tool_calls>not json</tool_calls>",
    "No tools needed.",
]


@pytest.mark.parametrize("text", HUNYUAN_OUTPUTS)
def test_hunyuan_a13b_matches_vllm(text: str) -> None:
    HUNYUAN.check(text)


@_SETTINGS
@given(st.sampled_from(HUNYUAN_OUTPUTS), st.lists(st.integers(0, 60), max_size=12))
def test_hunyuan_a13b_streaming_matches_vllm_for_any_cut(text: str, cuts: list[int]) -> None:
    HUNYUAN.check_stream(text, cuts)


APERTUS = Family("apertus", ("<|tools_prefix|>", "<|tools_suffix|>"))
APERTUS_OUTPUTS = [
    '<|tools_prefix|>[{"get_weather": {"city": "Paris"}}]<|tools_suffix|>',
    'I will check. <|tools_prefix|>[{"get_weather": {"city": "Zürich 日本", "unit": "c"}}, '
    '{"get_time": {}}]<|tools_suffix|> Done.',
    '<|tools_prefix|>[{"get_weather": {"city": "Pa',
    '<|tools_prefix|>{"get_time": {"tz": "UTC"}}<|tools_suffix|>',
    '<|tools_prefix|>[{"get_weather": {"q": "a \\"b\\"", "l": [1, 2]}}] trailing<|tools_suffix|>',
    "<|tools_prefix|>not json<|tools_suffix|>",
    "Plain text with <|tools_ nothing.",
    '<|tools_prefix|>[{"get_weather": null}, {"get_time": {"n": 1}}]<|tools_suffix|>\n',
]


@pytest.mark.parametrize("text", APERTUS_OUTPUTS)
def test_apertus_matches_vllm(text: str) -> None:
    APERTUS.check(text)


@_SETTINGS
@given(st.sampled_from(APERTUS_OUTPUTS), st.lists(st.integers(0, 60), max_size=12))
def test_apertus_streaming_matches_vllm_for_any_cut(text: str, cuts: list[int]) -> None:
    APERTUS.check_stream(text, cuts)


_WRITTEN_KEYS = [
    (PYTHONIC, PYTHONIC_OUTPUTS[:6]),
    (LLAMA4, LLAMA4_OUTPUTS),
    (DEEPSEEK_V3, V3_OUTPUTS),
    (DEEPSEEK_V31, V31_OUTPUTS),
    (PHI4, PHI4_OUTPUTS),
    (JAMBA, JAMBA_OUTPUTS),
    (LONGCAT, HERMES_LIKE),
    (QWEN3_JSON, HERMES_LIKE),
    (STEP3, STEP3_OUTPUTS),
    (OLMO3, OLMO3_OUTPUTS),
    (INTERNLM, INTERNLM_OUTPUTS),
    (XLAM, XLAM_OUTPUTS),
    (GRANITE4, GRANITE4_OUTPUTS),
    (GIGACHAT3, GIGACHAT3_OUTPUTS),
    (GRANITE_20B, GRANITE_20B_OUTPUTS),
    (FUNCTIONGEMMA, FUNCTIONGEMMA_OUTPUTS),
    (HUNYUAN, HUNYUAN_OUTPUTS),
    (APERTUS, APERTUS_OUTPUTS),
] + [
    (family, [f"<think>Let me think.</think>{body}" for body in outputs[:2]])
    for family, outputs in [
        (Family("deepseek_v3", DEEPSEEK_MARKERS + THINK, "deepseek_r1"), V3_OUTPUTS),
        (Family("pythonic", THINK, "qwen3"), PYTHONIC_OUTPUTS),
        (Family("jamba", ("<tool_calls>", "</tool_calls>", *THINK), "qwen3"), JAMBA_OUTPUTS),
        (Family("step3", STEP3.markers + THINK, "deepseek_r1"), STEP3_OUTPUTS),
    ]
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
    ``exclude_unset``): granite4's and apertus' tool-call deltas say ``"content": null``;
    ours write the same keys, token by token and whole, with ``include_reasoning`` on and off."""
    for text in outputs:
        family.check_written_keys(text)

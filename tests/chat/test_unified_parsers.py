"""Parsers vLLM 0.32 composes as model-specific unified parsers (``vllm/parser/``: Kimi K3, …)
match vLLM's, delta for delta.

Each family's outputs (reasoning, content channels, several calls, typed and malformed
arguments, truncation, unicode) go through the tiny tokenizer with the family's special tokens
under their real names, cut into engine updates every which way, and through the parser class
vLLM's ``ParserManager`` composes and ours (``tests/chat/tool_family_harness.py``), under every
request shape; the request adjustments (special tokens kept, no spaces between them, refused
tool choices) are vLLM's ``adjust_request``'s.
"""

from __future__ import annotations

import functools
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
                "metric": {"type": "boolean"},
                "stops": {"type": "array", "items": {"type": "integer"}},
                "opts": {"type": "object"},
            },
        },
    },
}
TOOLS = [WEATHER_TOOL, TIME_TOOL, TYPED_TOOL]


def requests(forced: bool = True) -> list[Any]:
    """The request shapes a family is checked under (``forced``: with the tool choices that
    need a tool parser)."""
    shapes = [
        vllm_request(TOOLS),
        vllm_request(TOOLS, tool_choice="none"),
        vllm_request(None),
        vllm_request(TOOLS, include_reasoning=False),
        vllm_request(TOOLS, chat_template_kwargs={"thinking": False}),
        vllm_request(None, chat_template_kwargs={"enable_thinking": False}),
    ]
    if forced:
        shapes += [
            vllm_request(TOOLS, tool_choice="required"),
            vllm_request(TOOLS, tool_choice={"type": "function", "function": {"name": "get_time"}}),
        ]
    return shapes


class PromptFamily(Family):
    """A family whose prompt is a text (ending the way the family's chat template ends)."""

    def __init__(self, *args: Any, prompt: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.prompt = prompt

    @property
    def prompt_ids(self) -> list[int]:
        """The prompt's token ids."""
        return [1, *self.tok.encode(self.prompt, add_special_tokens=False)]


# -- kimi_k3 -----------------------------------------------------------------------------------

OPEN, C, S = "<|open|>", "<|close|>", "<|sep|>"
K3_SPECIAL = (OPEN, C, S, "<|end_of_msg|>")
MSG = f"{C}message{S}"


def think(text: str) -> str:
    """A think channel."""
    return f"{OPEN}think{S}{text}{C}think{S}"


def response(text: str) -> str:
    """A response channel."""
    return f"{OPEN}response{S}{text}{C}response{S}"


def call(name: str, *args: tuple[str, str, str], index: int = 1) -> str:
    """A ``call`` block with ``(key, type, value)`` arguments."""
    body = "".join(f'{OPEN}argument key="{k}" type="{t}"{S}{v}{C}argument{S}' for k, t, v in args)
    return f'{OPEN}call tool="{name}" index="{index}"{S}{body}{C}call{S}'


def tools(*calls: str) -> str:
    """A tools channel."""
    return f"{OPEN}tools{S}{''.join(calls)}{C}tools{S}"


WEATHER = call("get_weather", ("city", "string", "Paris"))
TRIP = call(
    "plan_trip",
    ("city", "string", 'Zürich "日本" <b>'),
    ("days", "number", "3"),
    ("metric", "boolean", "true"),
    ("stops", "array", "[1, 2]"),
    ("opts", "object", '{"n": {"m": null}}'),
    index=2,
)
K3_OUTPUTS = [
    think("Need the weather.") + response("Let me check.") + tools(WEATHER) + MSG,
    "plan</b>" + f"{C}think{S}" + response("") + tools(WEATHER, TRIP) + MSG,
    think("x") + response("Just text 日本, a < b and <| not a marker") + MSG,
    think("only thoughts, truncated"),
    think("x") + f"{OPEN}response{S}partial answer",
    think("x") + tools(call("get_time")),
    response("No thinking at all.") + MSG,
    think("x")
    + response("")
    + tools(call("get_weather", ("city", "object", "{bad")))
    + tools(call("", ("k", "string", "v"))),
    think("x") + response("") + tools(call("ns&quot;x&amp;y", ("a&quot;b", "string", "v"))),
    think("x") + response("cut") + f"{OPEN}tools{S}" + WEATHER[:-12],
    think("x") + "Sure." + tools(WEATHER, call("get_time", index=2)) + MSG,
    "no markers at all",
    f"a{C}think{S}b" + response("c") + f"{OPEN}think{S}again",
    think("x") + response("y") + tools(WEATHER) + "after the tools" + MSG + "<|end_of_msg|>",
    f"{OPEN} think {S}spaced{C} think {S}{OPEN} response {S}ok{C} response {S}",
]
K3 = PromptFamily("kimi_k3", (), "kimi_k3", K3_SPECIAL, prompt=f"{OPEN}assistant{S}")
K3_TOOLS_ONLY = PromptFamily("kimi_k3", (), None, K3_SPECIAL, prompt=f"{OPEN}assistant{S}")
K3_REASONING_ONLY = PromptFamily(None, (), "kimi_k3", K3_SPECIAL, prompt=f"{OPEN}assistant{S}")  # type: ignore[arg-type]
K3_FAMILIES = [K3, K3_TOOLS_ONLY, K3_REASONING_ONLY]


def _shapes(family: Family) -> list[Any]:
    return requests(forced=family.parser is not None)


@pytest.mark.parametrize("family", K3_FAMILIES, ids=["both", "tools", "reasoning"])
@pytest.mark.parametrize("text", K3_OUTPUTS)
def test_kimi_k3_matches_vllm(family: Family, text: str) -> None:
    for req in _shapes(family):
        family.check(text, req, [2, 5, 9])


@pytest.mark.parametrize("family", K3_FAMILIES, ids=["both", "tools", "reasoning"])
def test_kimi_k3_after_a_closed_think_prompt_matches_vllm(family: Family) -> None:
    # The prompt's newest think marker is a close: generation starts after the reasoning.
    closed = PromptFamily(
        family.parser, (), family.reasoning, K3_SPECIAL, prompt=think("earlier") + OPEN
    )
    for text in (K3_OUTPUTS[0], K3_OUTPUTS[6], K3_OUTPUTS[10]):
        for req in _shapes(family)[:4]:
            closed.check(text, req)


@_SETTINGS
@given(
    st.sampled_from(range(len(K3_FAMILIES))),
    st.sampled_from(K3_OUTPUTS),
    st.lists(st.integers(0, 120), max_size=16),
    st.integers(0, 7),
)
def test_kimi_k3_streaming_matches_vllm_for_any_cut(
    family: int, text: str, cuts: list[int], which: int
) -> None:
    fam = K3_FAMILIES[family]
    shapes = _shapes(fam)
    fam.check_stream(text, cuts, shapes[which % len(shapes)])


@pytest.mark.parametrize(
    ("tool", "reasoning", "markers"),
    [
        ("hermes", "kimi_k3", ("<tool_call>", "</tool_call>")),
        ("kimi_k3", "deepseek_r1", ("<think>", "</think>")),
    ],
)
def test_kimi_k3_composed_with_another_parser_matches_vllm(
    tool: str, reasoning: str, markers: tuple[str, ...]
) -> None:
    # vLLM composes its Kimi K3 unified parser whenever either name is kimi_k3.
    family = PromptFamily(tool, markers, reasoning, K3_SPECIAL, prompt=f"{OPEN}assistant{S}")
    hermes_call = '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>'
    texts = [
        think("x") + response("y") + tools(WEATHER) + MSG,
        "<think>x</think>" + response("y") + tools(WEATHER),
        think("x") + "Sure." + hermes_call,
    ]
    for text in texts:
        for req in requests()[:4]:
            family.check(text, req, [3, 6])


# -- request adjustments -----------------------------------------------------------------------


@functools.cache
def _k3_tokenizer() -> Any:
    return K3.tok


def _vllm_adjusted(tool: str | None, reasoning: str | None, body: dict[str, Any]) -> Any:
    from vllm.parser import ParserManager

    cls = ParserManager.get_parser(
        tool_parser_name=tool,
        reasoning_parser_name=reasoning,
        enable_auto_tools=tool is not None,
        tokenizer=_k3_tokenizer(),
    )
    req = vllm_request(body.pop("tools", None), **body)
    return cls(_k3_tokenizer(), req.tools, chat_template_kwargs={}).adjust_request(req)


@pytest.mark.parametrize(
    ("tool", "reasoning"), [("kimi_k3", "kimi_k3"), ("kimi_k3", None), (None, "kimi_k3")]
)
@pytest.mark.parametrize(
    "body",
    [
        {"tools": TOOLS},
        {"tools": TOOLS, "tool_choice": "none"},
        {},
        {"tools": TOOLS, "tool_choice": "required"},
    ],
)
def test_kimi_k3_keeps_special_tokens_unspaced_as_vllm(
    tool: str | None, reasoning: str | None, body: dict[str, Any]
) -> None:
    from tests.chat.tool_family_harness import options_of
    from vllm_frontend.chat.output_parser import OutputParsers

    req = vllm_request(body.get("tools"), **{k: v for k, v in body.items() if k != "tools"})
    # (vLLM's serving runs adjust_request with a reasoning parser or a tool choice not none)
    runs = reasoning is not None or req.tool_choice != "none"
    expected = _vllm_adjusted(tool, reasoning, dict(body)) if runs else req
    tok = _k3_tokenizer()
    ours = OutputParsers(
        tok.get_vocab(),
        tool_call_parser=tool,
        reasoning_parser=reasoning,
        enable_auto_tool_choice=tool is not None,
    )
    options = options_of(req)
    assert ours.needs_special_tokens(options) == (not expected.skip_special_tokens)
    assert ours.joins_special_tokens(options) == (not expected.spaces_between_special_tokens)


# -- cohere_command3 / cohere_command4 ---------------------------------------------------------

COHERE_SPECIAL = (
    "<|START_THINKING|>", "<|END_THINKING|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>",
    "<|START_ACTION|>", "<|END_ACTION|>", "<|START_TEXT|>", "<|END_TEXT|>",
    "<|CHATBOT_TOKEN|>", "<|START_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>",
)  # fmt: skip


def action(*calls: tuple[str, str, str]) -> str:
    """An action block of ``(id, name, parameters JSON)`` calls."""
    body = ", ".join(
        f'{{"tool_call_id": "{i}", "tool_name": "{n}", "parameters": {p}}}' for i, n, p in calls
    )
    return f"<|START_ACTION|>[{body}]<|END_ACTION|>"


COHERE_OUTPUTS = [
    "<|START_THINKING|>I should look it up.<|END_THINKING|>"
    + action(("0", "get_weather", '{"city": "Paris"}')),
    "<|START_THINKING|>two calls<|END_THINKING|>"
    + action(("0", "get_weather", '{"city": "Zürich 日本"}'), ("1", "get_time", "{}")),
    "<|START_RESPONSE|>It is <co>sunny</co: 0:[0]> in Paris.<|END_RESPONSE|>",
    "<|START_THINKING|>think <co>a</co: 0:[1]><|END_THINKING|><|START_RESPONSE|>Answer "
    'with a quote: "x" and {braces}.<|END_RESPONSE|>',
    "<|START_THINKING|>truncated reasoning",
    "<|START_RESPONSE|>truncated answer",
    action(("0", "plan_trip", '{"days": 3, "stops": [1, 2], "opts": {"n": null}}')),
    action(("0", "get_weather", '{"city": "Pa'))[:-20],
    "<|START_ACTION|>[not json]<|END_ACTION|>",
    "plain text without any markers",
    '<|START_ACTION|>[{"tool_name": "get_time", "parameters": {}}]<|END_ACTION|>',
    "<|START_RESPONSE|><|END_RESPONSE|>",
]
COHERE_FAMILIES = [
    Family(name, (), reasoning, COHERE_SPECIAL)
    for name in ("cohere_command3", "cohere_command4")
    for reasoning in (name, None)
] + [Family(None, (), "cohere_command4", COHERE_SPECIAL)]  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "family", COHERE_FAMILIES, ids=["c3", "c3-tools", "c4", "c4-tools", "c4-r"]
)
@pytest.mark.parametrize("text", COHERE_OUTPUTS)
def test_cohere_command_matches_vllm(family: Family, text: str) -> None:
    for req in _shapes(family):
        family.check(text, req, [2, 5, 9])


def _citations_stream(family: Family, text: str, cuts: list[int], req: Any) -> tuple[Any, Any]:
    from tests.chat.tool_family_harness import options_of

    deltas = family.deltas(text, cuts)
    vllm_parser, ours = family.vllm_parser(req), family.ours.for_request(options_of(req))
    theirs, mine = [], []
    for k, (chunk, ids) in enumerate(deltas):
        done = k == len(deltas) - 1
        msg = vllm_parser.parse_delta(chunk, list(ids), req, prompt_token_ids=[1], finished=done)
        if msg is not None and getattr(msg, "citations", None):
            theirs.append([c.model_dump(exclude_unset=True) for c in msg.citations])
        got = ours.feed(chunk, ids, [1], finished=done)
        if got is not None and got.citations:
            mine.append(got.citations)
    return mine, theirs


@_SETTINGS
@given(
    st.sampled_from(range(len(COHERE_FAMILIES))),
    st.sampled_from(COHERE_OUTPUTS),
    st.lists(st.integers(0, 80), max_size=14),
    st.integers(0, 7),
)
def test_cohere_command_streaming_matches_vllm_for_any_cut(
    family: int, text: str, cuts: list[int], which: int
) -> None:
    fam = COHERE_FAMILIES[family]
    shapes = _shapes(fam)
    req = shapes[which % len(shapes)]
    fam.check_stream(text, cuts, req)
    mine, theirs = _citations_stream(fam, text, cuts, req)
    assert mine == theirs


def test_cohere_command_streams_vllms_citations() -> None:
    for text in (COHERE_OUTPUTS[2], COHERE_OUTPUTS[3]):
        for cuts in ([], [3, 4, 5, 6, 7, 8, 9, 10]):
            mine, theirs = _citations_stream(COHERE_FAMILIES[0], text, cuts, vllm_request(TOOLS))
            assert mine == theirs and mine, (text, cuts)


def test_cohere_command_delta_json_is_vllms() -> None:
    # A streamed delta with citations and tool-call pieces, as vLLM's chat stream writes it.
    import json

    import msgspec

    from tests.chat.tool_family_harness import options_of
    from vllm_frontend.server.chat import _delta_json

    family, req = COHERE_FAMILIES[0], vllm_request(TOOLS)
    text = COHERE_OUTPUTS[3] + COHERE_OUTPUTS[1] + COHERE_OUTPUTS[2]
    deltas = family.deltas(text, list(range(0, 80, 3)))
    theirs = family.vllm_parser(req)
    ours = family.ours.for_request(options_of(req))
    for k, (chunk, ids) in enumerate(deltas):
        done = k == len(deltas) - 1
        expected = theirs.parse_delta(chunk, list(ids), req, prompt_token_ids=[1], finished=done)
        got = ours.feed(chunk, ids, [1], finished=done)
        if expected is None:
            assert got is None
            continue
        assert got is not None
        dumped = json.loads(expected.model_dump_json(exclude_unset=True))
        for call in dumped.get("tool_calls", []):
            if "id" in call:
                call["id"] = "#"
        mine = json.loads(msgspec.json.encode(_delta_json(got)))
        for call in mine.get("tool_calls", []):
            if "id" in call:
                call["id"] = "#"
        assert mine == dumped, chunk


@pytest.mark.parametrize("stream", [False, True])
def test_kimi_k3_chat_route_reads_the_detokenized_output_as_vllm(
    stream: bool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # The whole path: engine token ids through our detokenizer (special tokens kept, unspaced)
    # and the parsers, with the engine request's reasoning fields as vLLM sets them.
    import json

    from tests.chat.test_tool_parsers import _chat_app, _post, _ScriptedEngine
    from vllm_frontend.chat.output_parser import OutputParsers
    from vllm_frontend.text.tokenizer import Tokenizer

    path = tmp_path_factory.mktemp("k3-tokenizer")
    K3.tok.save_pretrained(path)
    tok = Tokenizer.from_dir(str(path), use_fastokens=False)
    parsers = OutputParsers.for_tokenizer(
        tok.token_to_id,
        tool_call_parser="kimi_k3",
        reasoning_parser="kimi_k3",
        enable_auto_tool_choice=True,
        decode=lambda ids: tok.decode(ids, skip_special_tokens=False),
        encode=lambda text: tok.encode(text, add_special_tokens=False),
    )
    text = K3_OUTPUTS[0]
    engine = _ScriptedEngine(tok.encode(text, add_special_tokens=False))
    app = _chat_app(engine, parsers, str(path), tok=tok)
    body = {"model": "m", "messages": [{"role": "user", "content": "Weather?"}], "tools": TOOLS,
            "stream": stream}  # fmt: skip
    status, raw = _post(app, body)
    assert status == 200, raw
    sent = engine.requests[-1]
    assert not sent.sampling_params.skip_special_tokens
    assert not sent.sampling_params.spaces_between_special_tokens
    theirs = K3.vllm_parser(vllm_request(TOOLS))
    assert sent.reasoning_ended == theirs.is_reasoning_end(list(sent.prompt_token_ids))
    reasoning, content, calls = K3.vllm_parser(vllm_request(TOOLS)).parse(
        text, vllm_request(TOOLS), enable_auto_tools=True
    )
    if stream:
        got_r, got_c, got_calls = "", "", []
        for line in raw.decode().splitlines():
            if not line.startswith("data: {"):
                continue
            delta = json.loads(line[6:])["choices"][0]["delta"]
            got_r += delta.get("reasoning") or ""
            got_c += delta.get("content") or ""
            got_calls += [(c["function"]["name"], c["function"]["arguments"])
                          for c in delta.get("tool_calls") or []]  # fmt: skip
        assert (got_r, got_c or None) == (reasoning, content)
    else:
        message = json.loads(raw)["choices"][0]["message"]
        assert (message["reasoning"], message["content"]) == (reasoning, content)
        got_calls = [(c["function"]["name"], c["function"]["arguments"])
                     for c in message["tool_calls"]]  # fmt: skip
    assert got_calls == [(c.name, c.arguments) for c in calls or ()]


# -- minicpmv ----------------------------------------------------------------------------------

MINICPMV_OUTPUTS = [
    "<think>plan\\nstep</think>Let me check.\\n<tool_call>\n<function=get_weather>\n"
    "<parameter=city>\nPa\\nris\n</parameter>\n</function>\n</tool_call><|im_end|>",
    "<think>a</think>`x\\n` then $y\\n$ and \\\\n kept, \\r\\n\\n done\\",
    "answer\\n<|reserved_12|>more\\n<reserved_13>",
    "<think>only reasoning\\n with a tail \\",
]
MINICPMV_MARKERS = ("<think>", "</think>", "<tool_call>", "</tool_call>", "<reserved_13>")
MINICPMV_SPECIAL = ("<|im_start|>", "<|im_end|>", "<|reserved_12|>")
MINICPMV = [
    Family("qwen3_coder", MINICPMV_MARKERS, "minicpmv", MINICPMV_SPECIAL),
    Family(None, MINICPMV_MARKERS, "minicpmv", MINICPMV_SPECIAL),  # type: ignore[arg-type]
]


@pytest.mark.parametrize("family", MINICPMV, ids=["qwen3_coder", "alone"])
@pytest.mark.parametrize("text", MINICPMV_OUTPUTS)
def test_minicpmv_recovers_newlines_as_vllm(family: Family, text: str) -> None:
    for req in _shapes(family):
        family.check(text, req, [2, 5, 9])


@_SETTINGS
@given(
    st.sampled_from(range(len(MINICPMV))),
    st.sampled_from(MINICPMV_OUTPUTS),
    st.lists(st.integers(0, 70), max_size=14),
    st.integers(0, 7),
)
def test_minicpmv_streaming_matches_vllm_for_any_cut(
    family: int, text: str, cuts: list[int], which: int
) -> None:
    fam = MINICPMV[family]
    shapes = _shapes(fam)
    fam.check_stream(text, cuts, shapes[which % len(shapes)])


_WRITTEN_KEYS = [
    *[(family, K3_OUTPUTS) for family in K3_FAMILIES],
    *[(family, COHERE_OUTPUTS) for family in COHERE_FAMILIES],
    *[(family, MINICPMV_OUTPUTS) for family in MINICPMV],
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
    ``exclude_unset``): kimi_k3's tool-call deltas say ``"content": null`` and its reasoning
    parser sets both fields where reasoning ends; ours write the same keys."""
    for text in outputs:
        family.check_written_keys(text)

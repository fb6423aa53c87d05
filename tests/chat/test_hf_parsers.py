"""``--reasoning-parser hf`` and ``--tool-call-parser hf`` read a model's output with its
``response_template`` exactly as vLLM 0.32's ``ResponseTemplateParser`` does.

Reference: vLLM's own parser class, composed by ``ParserManager.get_parser`` as its chat serving
does, on the tiny Llama 3 tokenizer with each template's markers added as special tokens and the
template set on it (as ``tokenizer_config.json`` carries it). Templates: the checkpoints'
metadata in ``tests/fixtures/response-templates/`` (Qwen3/Qwen3.5 XML calls, Gemma 4,
gpt-oss channels, SmolLM3's JSON calls, Cohere Command, ERNIE). For each, a corpus of outputs
(well-formed, several calls, reasoning and content mixed, malformed and cut-off calls, unicode,
empty arguments) is compared whole and streamed (whole, token by token, in random chunkings
through the detokenizer's deltas), field by field, with the prompt the chat template ends with
(some open the reasoning region there), under every request shape; then the engine's
``reasoning_ended``, the request refusals and the startup checks.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.chat.tool_family_harness import (
    WEATHER_TOOL,
    Family,
    Message,
    _id_shape,
    options_of,
    vllm_request,
)
from tests.support.hf_tokenizer import fresh_tokenizer
from tests.support.tiny_model import tiny_model_dir
from vllm_frontend.chat.errors import ChatError
from vllm_frontend.chat.output_parser import OutputParsers, ParserConfigError
from vllm_frontend.chat.reasoning_parsers import ModelFacts
from vllm_frontend.chat.reasoning_request import engine_reasoning_fields

pytestmark = pytest.mark.oracle  # imports vLLM as the reference

pytest.importorskip("vllm")

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "response-templates"


def template(name: str) -> dict[str, Any]:
    """A fixture template."""
    return json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))


TYPED_TOOL = {
    "type": "function",
    "function": {
        "name": "plan_trip",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "days": {"type": "integer"},
                "ratio": {"type": ["number", "null"]},
                "metric": {"type": "boolean"},
                "stops": {"type": "array", "items": {"type": "integer"}},
                "opts": {"anyOf": [{"type": "object"}, {"type": "null"}]},
            },
        },
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}},
}
TOOLS = [WEATHER_TOOL, TIME_TOOL, TYPED_TOOL]


@functools.cache
def shapes() -> list[Any]:
    """The request shapes every output is checked under (not mutated by the parsers)."""
    return [
        vllm_request(TOOLS),
        vllm_request(TOOLS, tool_choice="none"),
        vllm_request(None),
        vllm_request(TOOLS, include_reasoning=False),
        vllm_request(TOOLS, chat_template_kwargs={"enable_thinking": False}),
    ]


@functools.cache
def _tokenizer(name: str, special: tuple[str, ...]) -> Any:
    tok = fresh_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": list(special)})
    tok.response_template = template(name)  # what tokenizer_config.json gives transformers
    vocab = tok.get_vocab()
    tok.get_vocab = lambda: vocab
    return tok


class TemplateFamily(Family):
    """A template, the parsers configured with it, and the prompt its chat template ends with."""

    model_types: tuple[str, ...] = ()
    """The checkpoint's model type, told to both sides when set (vLLM's model config)."""

    def __init__(
        self, name: str, special: tuple[str, ...], prompt: str, *, tools: bool, reasoning: bool
    ) -> None:
        super().__init__("hf" if tools else None, (), "hf" if reasoning else None, special)  # type: ignore[arg-type]
        self.name = name
        self.prompt = prompt

    @property
    def tok(self) -> Any:
        """The tiny tokenizer with the template's markers and the template itself."""
        return _tokenizer(self.name, self.special)

    @property
    def prompt_ids(self) -> list[int]:
        """The prompt's token ids."""
        return [*self.tok.encode(self.prompt, add_special_tokens=False)]

    @functools.cached_property
    def ours(self) -> OutputParsers:
        """Our parsers configured with the template (read from the tokenizer config)."""
        tok = self.tok
        return OutputParsers(
            tok.get_vocab(),
            tool_call_parser=self.parser,
            reasoning_parser=self.reasoning,
            enable_auto_tool_choice=True,
            model=ModelFacts(
                tokenizer_config={"response_template": template(self.name)},
                model_types=self.model_types,
            ),
            special_tokens=dict(zip(tok.all_special_tokens, tok.all_special_ids, strict=True)),
            decode=functools.partial(tok.decode, skip_special_tokens=False),
            prompt_decode=functools.partial(
                tok.decode, skip_special_tokens=False, clean_up_tokenization_spaces=False
            ),
        )

    def vllm_parser(self, req: Any) -> Any:
        """vLLM's parser for one choice, with the model config its chat serving passes (when
        the model type is set), told the prompt as its chat serving tells it."""
        kwargs: dict[str, Any] = {}
        if self.model_types:
            from types import SimpleNamespace

            kwargs["model_config"] = SimpleNamespace(
                hf_config=SimpleNamespace(model_type=self.model_types[0]),
                hf_text_config=None,
                hf_overrides={},
            )
        parser = self.vllm_cls(
            self.tok, req.tools, chat_template_kwargs=req.chat_template_kwargs or {}, **kwargs
        )
        parser.set_prompt_token_ids(self.prompt_ids)
        return parser

    def ours_full(self, text: str, req: Any) -> Message:
        """Our message for a finished ``text``, the prompt told first (as our chat route
        does)."""
        parser = self.ours.for_request(options_of(req))
        parser.set_prompt_token_ids(self.prompt_ids)  # type: ignore[union-attr]
        parsed = parser.parse(text)
        calls = [(c.name, c.arguments, _id_shape(c.id)) for c in parsed.tool_calls]
        reasoning = parsed.reasoning if req.include_reasoning else None
        return Message(parsed.content, calls, parsed.tools_called, reasoning)

    def vllm_full(self, text: str, req: Any) -> Message:
        """vLLM's message (its chat serving's branches for the tool choices served here)."""
        ids = self.tok.encode(text, add_special_tokens=False)
        reasoning, content, calls = self.vllm_parser(req).parse(
            text, req, enable_auto_tools=True, model_output_token_ids=ids
        )
        if not req.include_reasoning:
            reasoning = None
        if self.parser and req.tools and req.tool_choice == "auto" and calls:
            out = [(c.name, c.arguments, _id_shape(c.id)) for c in calls]
            return Message(content, out, True, reasoning)
        return Message(content, reasoning=reasoning)


# -- the corpora ----------------------------------------------------------------------------------

QWEN_SPECIAL = ("<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>")
QWEN_PROMPT = "<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n"


def qcall(name: str, **params: str) -> str:
    """A Qwen3.5 XML tool call."""
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


QWEN_OUTPUTS = [
    "<think>\nThe user wants weather.\n</think>\n\nIt is sunny.<|im_end|>",
    "<think>\nLook it up.\n</think>\n\n" + qcall("get_weather", city="Paris") + "<|im_end|>",
    "Checking both."
    + qcall("get_weather", city="Zürich 日本", unit="c")
    + "\n"
    + qcall("get_time"),
    qcall(
        "plan_trip",
        city='"Rome"',
        days="3",
        ratio="0.5",
        metric="true",
        stops="[1, 2]",
        opts='{"n": null}',
    ),
    qcall("plan_trip", days="three", ratio="null", metric="maybe", opts="None"),
    "reasoning only, the opener was in the prompt</think>answer",
    "<think>cut off reasoning",
    "<think>ok</think>" + qcall("get_weather", city="Pa")[:-14],
    "<tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>",
    "<tool_call>no function tag</tool_call> then text",
    "plain answer with <b>markup</b> and {braces} and 'quotes'",
    "<think></think>" + qcall("get_time") + qcall("get_time"),
    "",
]
QWEN_FAMILIES = [
    TemplateFamily("qwen3", QWEN_SPECIAL, QWEN_PROMPT, tools=True, reasoning=True),
    TemplateFamily("qwen3", QWEN_SPECIAL, QWEN_PROMPT + "<think>\n", tools=True, reasoning=True),
    TemplateFamily("qwen3", QWEN_SPECIAL, QWEN_PROMPT, tools=True, reasoning=False),
    TemplateFamily("qwen3", QWEN_SPECIAL, QWEN_PROMPT + "<think>\n", tools=False, reasoning=True),
]

GEMMA_SPECIAL = (
    "<|turn>", "<turn|>", "<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", '<|"|>',
    "<|tool_response>", "<tool_response|>", "<eos>",
)  # fmt: skip
GEMMA_PROMPT = "<bos><|turn>user\nAlarm?<turn|>\n<|turn>model\n"
Q = '<|"|>'


def gcall(name: str, body: str) -> str:
    """A Gemma 4 tool call."""
    return f"<|tool_call>call:{name}{{{body}}}<tool_call|>"


GEMMA_OUTPUTS = [
    "Hello<turn|>",
    "<|channel>thought\nplan<channel|>The answer is 42.<turn|>",
    "<|channel>thought\nplan<channel|>" + gcall("get_weather", f"city:{Q}Paris{Q}"),
    "Let me check."
    + gcall("get_weather", f"city:{Q}Zürich 日本{Q},unit:{Q}c{Q}")
    + gcall("get_time", ""),
    gcall("plan_trip", f"days:3,ratio:null,metric:true,stops:[1,2],opts:{{n:{Q}x{Q}}}"),
    gcall("plan_trip", f"days:{Q}7{Q},ratio:{Q}0.25{Q},metric:{Q}false{Q}"),
    gcall("get_weather", f"city:{Q}Pa"),
    "<|tool_call>call:get_weather{not json}<tool_call|>after",
    "<|channel>thought\nstill thinking",
    "text<|tool_response>",
    "plan<channel|>answer<eos>",
]
GEMMA_FAMILIES = [
    TemplateFamily("gemma4", GEMMA_SPECIAL, GEMMA_PROMPT, tools=True, reasoning=True),
    TemplateFamily(
        "gemma4", GEMMA_SPECIAL, GEMMA_PROMPT + "<|channel>thought\n", tools=True, reasoning=True
    ),
    TemplateFamily("gemma4", GEMMA_SPECIAL, GEMMA_PROMPT, tools=False, reasoning=True),
    TemplateFamily(
        "gemma4",
        GEMMA_SPECIAL,
        GEMMA_PROMPT + gcall("get_time", "") + "<|tool_response>response:get_time{t:1}"
        "<tool_response|>",
        tools=True,
        reasoning=False,
    ),
]

OSS_SPECIAL = ("<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|call|>", "<|return|>")
OSS_PROMPT = "<|start|>user<|message|>Weather?<|end|><|start|>assistant"
OSS_OUTPUTS = [
    "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant"
    '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}'
    "<|call|>",
    "<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final<|message|>"
    "Sunny in 日本.<|return|>",
    "<|channel|>commentary to=functions.get_time<|message|>{}<|call|>"
    '<|channel|>commentary to=functions.plan_trip<|message|>{"days": 2, "stops": []}<|call|>',
    '<|channel|>commentary to=functions.get_weather<|message|>{"city": "Pa',
    "<|channel|>commentary to=functions.get_weather<|message|>not json<|call|>",
    "stray text<|channel|>final<|message|>answer<|end|>",
]
OSS_FAMILIES = [
    TemplateFamily("gpt-oss", OSS_SPECIAL, OSS_PROMPT, tools=True, reasoning=True),
    TemplateFamily("gpt-oss", OSS_SPECIAL, OSS_PROMPT, tools=False, reasoning=True),
]

SMOL_OUTPUTS = [
    "<think>\nweather\n</think>\n"
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich"}}\n</tool_call>'
    "<|im_end|>",
    '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>'
    '<tool_call>{"name": "plan_trip", "arguments": {"days": "4", "metric": "1"}}</tool_call>',
    '<tool_call>{"name": "get_time"}</tool_call>',
    '<tool_call>{"name": "get_weather", "arguments": {"city": ',
    "an answer<|im_end|>and more after the end",
    "<think>open",
]
SMOL_FAMILIES = [
    TemplateFamily("smollm3", QWEN_SPECIAL, QWEN_PROMPT, tools=True, reasoning=True),
    TemplateFamily("smollm3", QWEN_SPECIAL, QWEN_PROMPT, tools=True, reasoning=False),
]

COHERE_SPECIAL = (
    "<|START_THINKING|>", "<|END_THINKING|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>",
    "<|START_ACTION|>", "<|END_ACTION|>", "<|CHATBOT_TOKEN|>", "<|START_OF_TURN_TOKEN|>",
    "<|END_OF_TURN_TOKEN|>",
)  # fmt: skip
COHERE_PROMPT = "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>hi<|END_OF_TURN_TOKEN|>" + (
    "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"
)
COHERE_OUTPUTS = [
    "<|START_THINKING|>I should call a tool.<|END_THINKING|>"
    '<|START_ACTION|>[\n {"tool_call_id": "0", "tool_name": "get_weather", '
    '"parameters": {"city": "Paris"}},\n {"tool_call_id": "1", "tool_name": "get_time", '
    '"parameters": {}}\n]<|END_ACTION|><|END_OF_TURN_TOKEN|>',
    "<|START_RESPONSE|>It is sunny.<|END_RESPONSE|><|END_OF_TURN_TOKEN|>",
    '<|START_ACTION|>[{"tool_name": "get_time"}]<|END_ACTION|>',
    "<|START_ACTION|>{}<|END_ACTION|>",
]
COHERE_FAMILIES = [
    TemplateFamily("cohere", COHERE_SPECIAL, COHERE_PROMPT, tools=True, reasoning=True),
]

ERNIE_SPECIAL = ("<think>", "</think>", "<response>", "</response>", "<tool_call>",
                 "</tool_call>", "</s>")  # fmt: skip
ERNIE_PROMPT = "User: hi\nAssistant:"
ERNIE_OUTPUTS = [
    "The user asks. Let me think.\n</think>\n\n"
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n</s>',
    "short\n</think>\n\n<response>\nThe answer.\n</response>",
    "<response>\nno thinking\n</response>",
]
ERNIE_FAMILIES = [
    TemplateFamily("ernie", ERNIE_SPECIAL, ERNIE_PROMPT, tools=True, reasoning=True),
]

CORPUS = (
    [(f, t) for f in QWEN_FAMILIES for t in QWEN_OUTPUTS]
    + [(f, t) for f in GEMMA_FAMILIES for t in GEMMA_OUTPUTS]
    + [(f, t) for f in OSS_FAMILIES for t in OSS_OUTPUTS]
    + [(f, t) for f in SMOL_FAMILIES for t in SMOL_OUTPUTS]
    + [(f, t) for f in COHERE_FAMILIES for t in COHERE_OUTPUTS]
    + [(f, t) for f in ERNIE_FAMILIES for t in ERNIE_OUTPUTS]
)


def _id(case: tuple[TemplateFamily, str]) -> str:
    family, text = case
    flags = ("t" if family.parser else "") + ("r" if family.reasoning else "")
    return f"{family.name}-{flags}-{len(family.prompt)}-{text[:12]!r}"


@pytest.mark.parametrize("case", CORPUS, ids=[_id(c) for c in CORPUS])
def test_output_matches_vllm_whole_and_streamed(case: tuple[TemplateFamily, str]) -> None:
    family, text = case
    for req in shapes():
        family.check(text, req, [1, 3, 4, 8])


_SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(
    st.sampled_from(range(len(CORPUS))),
    st.lists(st.integers(0, 60), max_size=12),
    st.sampled_from(range(5)),
)
def test_streaming_matches_vllm_for_any_chunking(case: int, cuts: list[int], shape: int) -> None:
    family, text = CORPUS[case]
    family.check_stream(text, cuts, shapes()[shape])


def test_calls_are_typed_by_the_tools_schemas_as_vllm_types_them() -> None:
    # The XML parameters are text: the tool's schema makes numbers, booleans, nulls, objects.
    family = QWEN_FAMILIES[2]
    text = qcall("plan_trip", days="3", ratio="null", metric="true", stops="[1, 2]", opts="{}")
    got = family.ours_full(text, vllm_request(TOOLS))
    assert got == family.vllm_full(text, vllm_request(TOOLS))
    assert json.loads(got.calls[0][1]) == {
        "days": 3, "ratio": None, "metric": True, "stops": [1, 2], "opts": {}
    }  # fmt: skip


# -- the engine's reasoning_ended -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "special", "prompt"),
    [
        ("qwen3", QWEN_SPECIAL, QWEN_PROMPT),
        ("qwen3", QWEN_SPECIAL, QWEN_PROMPT + "<think>\n"),
        ("qwen3", QWEN_SPECIAL, QWEN_PROMPT + "<think>\n\n</think>\n\n"),
        ("qwen3", QWEN_SPECIAL, QWEN_PROMPT + "<thi"),
        ("qwen3", QWEN_SPECIAL, "no anchor at all"),
        ("gemma4", GEMMA_SPECIAL, GEMMA_PROMPT),
        ("gemma4", GEMMA_SPECIAL, GEMMA_PROMPT + "<|channel>thought\n"),
        ("gemma4", GEMMA_SPECIAL, GEMMA_PROMPT + "<|channel>thought\nx<channel|>"),
        ("gemma4", GEMMA_SPECIAL, GEMMA_PROMPT + "already answering"),
        ("gpt-oss", OSS_SPECIAL, OSS_PROMPT),
        ("gpt-oss", OSS_SPECIAL, OSS_PROMPT + "<|channel|>final<|message|>"),
        ("cohere", COHERE_SPECIAL, COHERE_PROMPT + "<|START_THINKING|>"),
        ("ernie", ERNIE_SPECIAL, ERNIE_PROMPT),
    ],
)
@pytest.mark.parametrize("kwargs", [{}, {"enable_thinking": False}])
def test_reasoning_ended_is_vllms(
    name: str, special: tuple[str, ...], prompt: str, kwargs: dict[str, Any]
) -> None:
    family = TemplateFamily(name, special, prompt, tools=True, reasoning=True)
    req = vllm_request(TOOLS, chat_template_kwargs=kwargs)
    expected = req.resolve_reasoning_ended(family.vllm_parser(req), family.prompt_ids)
    ours = family.ours
    ended, _ = engine_reasoning_fields(
        include_reasoning=True,
        has_parser=True,
        reasoning_cls=ours.reasoning_cls,
        vocab=ours.vocab,
        chat_template_kwargs=kwargs,
        prompt_token_ids=family.prompt_ids,
    )
    assert ended == expected


# -- request adjustments and refusals -------------------------------------------------------------

STRICT_TOOL = {**TIME_TOOL, "function": {**TIME_TOOL["function"], "strict": True}}


@pytest.mark.parametrize(
    "fields",
    [
        {"tool_choice": "required"},
        {"tool_choice": {"type": "function", "function": {"name": "get_time"}}},
        {"parallel_tool_calls": False},
        {"tools": [STRICT_TOOL]},
        {"tools": [STRICT_TOOL], "tool_choice": "none"},
        {},
    ],
)
def test_request_refusals_and_special_tokens_are_vllms(fields: dict[str, Any]) -> None:
    from vllm.exceptions import VLLMValidationError

    family = QWEN_FAMILIES[0]
    body = {"tools": TOOLS, **fields}
    req = vllm_request(**body)
    ours = family.ours
    options = options_of(req)
    options = type(options)(**{
        **{f: getattr(options, f) for f in options.__struct_fields__},
        "parallel_tool_calls": req.parallel_tool_calls,
    })  # fmt: skip
    try:
        adjusted = family.vllm_parser(req).adjust_request(req)
    except VLLMValidationError as e:
        with pytest.raises(ChatError) as got:
            ours.check_adjusted(options)
        assert got.value.message == e.message if hasattr(e, "message") else str(e)
        assert got.value.param == e.parameter
        return
    ours.check_adjusted(options)
    assert ours.needs_special_tokens(options) == (not adjusted.skip_special_tokens)
    assert ours.joins_special_tokens(options) == (not adjusted.spaces_between_special_tokens)


# -- startup --------------------------------------------------------------------------------------


def _vllm_startup_error(spec: dict[str, Any] | None, **names: Any) -> str:
    from vllm.parser import ParserManager

    tok = _tokenizer("qwen3", ())  # this test's own tokenizer: its template is set per case
    tok.response_template = spec
    try:
        ParserManager.get_parser(enable_auto_tools=True, tokenizer=tok, **names)
    except TypeError as e:
        return str(e)
    return ""


def _our_startup_error(spec: dict[str, Any] | None, **names: Any) -> str:
    config = {"response_template": spec} if spec is not None else {}
    try:
        OutputParsers(
            {},
            enable_auto_tool_choice=True,
            model=ModelFacts(tokenizer_config=config),
            decode=lambda ids: "",
            **names,
        )
    except ParserConfigError as e:
        return str(e)
    return ""


def _without(name: str, field: str) -> dict[str, Any]:
    spec = template(name)
    del spec["fields"][field]
    return spec


@pytest.mark.parametrize(
    ("spec", "names"),
    [
        (None, {"reasoning_parser": "hf"}),
        (None, {"tool_call_parser": "hf"}),
        (template("inkling"), {"reasoning_parser": "hf"}),  # joined regions cannot stream
        (_without("qwen3", "tool_calls"), {"tool_call_parser": "hf"}),
        (_without("qwen3", "tool_calls"), {"reasoning_parser": "hf"}),
        (_without("gemma4", "thinking"), {"reasoning_parser": "hf", "tool_call_parser": "hf"}),
        ({"fields": {}}, {"reasoning_parser": "hf"}),
        ({**template("qwen3"), "extra": 1}, {"reasoning_parser": "hf"}),
        (template("qwen3"), {"reasoning_parser": "hf", "tool_call_parser": "hermes"}),
        (template("qwen3"), {"reasoning_parser": "qwen3", "tool_call_parser": "hf"}),
        (template("gemma4"), {"reasoning_parser": "hf", "tool_call_parser": "hf"}),
    ],
)
def test_startup_accepts_and_refuses_templates_as_vllm(
    spec: dict[str, Any] | None, names: dict[str, str]
) -> None:
    vllm_names = {
        "reasoning_parser_name": names.get("reasoning_parser"),
        "tool_parser_name": names.get("tool_call_parser"),
    }
    expected = _vllm_startup_error(spec, **vllm_names)
    got = _our_startup_error(spec, **names)
    assert bool(got) == bool(expected), (got, expected)
    if expected:
        # Ours names the flags first; the reason is vLLM's.
        assert got.endswith(expected) or expected.endswith(got.split(": ", 1)[-1]), (got, expected)


# -- over HTTP: the chat route with a scripted engine ---------------------------------------------

LLAMA_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|start_header_id|>assistant<|end_header_id|>\n\n",
    "fields": {
        "thinking": {"open": "<think>", "close": "</think>"},
        "tool_calls": {
            "open": "<tool_call>",
            "close": "</tool_call>",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {"close": "<|eot_id|>"},
    },
}
"""A template for the tiny Llama 3 model (its chat template ends with the assistant header)."""

HTTP_OUTPUT = (
    "<think>Need the weather.</think>Let me check."
    '<tool_call>{"name": "get_weather", "arguments": {"city": "Zürich"}}</tool_call>'
)


def _hf_app(engine: Any) -> Any:
    from tests.chat.test_tool_parsers import _chat_app
    from tests.support.shared_tokenizer import shared_tokenizer

    tok = shared_tokenizer(tiny_model_dir(), use_fastokens=False)
    parsers = OutputParsers.for_tokenizer(
        tok.token_to_id,
        tool_call_parser="hf",
        reasoning_parser="hf",
        enable_auto_tool_choice=True,
        model=ModelFacts(tokenizer_config={"response_template": LLAMA_TEMPLATE}),
        decode=functools.partial(tok.decode, skip_special_tokens=False),
        prompt_decode=tok.decode_verbatim,
    )
    return _chat_app(engine, parsers, tok=tok)


def test_chat_route_serves_the_hf_parsers() -> None:
    from tests.chat.test_tool_parsers import _post, _ScriptedEngine
    from tests.support.shared_tokenizer import shared_tokenizer

    tok = shared_tokenizer(tiny_model_dir(), use_fastokens=False)
    ids = tok.encode(HTTP_OUTPUT, add_special_tokens=False)
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "Weather?"}],
        "tools": [WEATHER_TOOL],
    }
    engine = _ScriptedEngine(ids)
    status, raw = _post(_hf_app(engine), body)
    assert status == 200, raw
    choice = json.loads(raw)["choices"][0]
    message = choice["message"]
    assert (message["reasoning"], message["content"]) == ("Need the weather.", "Let me check.")
    [call] = message["tool_calls"]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Zürich"}'}
    assert choice["finish_reason"] == "tool_calls"
    # adjust_request: special tokens kept, no spaces between them
    params = engine.requests[0].sampling_params
    assert params.skip_special_tokens is False
    assert params.spaces_between_special_tokens is False

    status, raw = _post(_hf_app(_ScriptedEngine(ids)), {**body, "stream": True})
    assert status == 200
    chunks = [
        json.loads(line.removeprefix("data: "))
        for line in raw.decode().split("\n\n")
        if line.startswith("data: {")
    ]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert "".join(d.get("reasoning") or "" for d in deltas) == "Need the weather."
    assert "".join(d.get("content") or "" for d in deltas) == "Let me check."
    calls = [tc for d in deltas for tc in d.get("tool_calls", [])]
    assert [(tc["index"], tc["type"], tc["function"]) for tc in calls] == [
        (0, "function", {"name": "get_weather", "arguments": '{"city": "Zürich"}'})
    ]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"

    # What the template cannot guarantee is vLLM's 400.
    status, raw = _post(_hf_app(_ScriptedEngine(ids)), {**body, "tool_choice": "required"})
    assert status == 400
    assert json.loads(raw)["error"]["message"].startswith(
        "response_template parsing cannot guarantee required tool choice"
    )


# -- tool-call ids on a Kimi model ----------------------------------------------------------------


class KimiTemplateFamily(TemplateFamily):
    """A template on a Kimi K2 checkpoint: vLLM's ids are ``functions.NAME:N``."""

    model_types = ("kimi_k2",)


HISTORY = [
    {"role": "user", "content": "hi"},
    {
        "role": "assistant",
        "tool_calls": [
            {"id": "functions.get_time:0", "type": "function",
             "function": {"name": "get_time", "arguments": "{}"}},
            {"id": "functions.get_time:1", "type": "function",
             "function": {"name": "get_time", "arguments": "{}"}},
        ],
    },
    {"role": "tool", "tool_call_id": "functions.get_time:1", "content": "noon"},
]  # fmt: skip


@pytest.mark.parametrize("messages", [None, HISTORY])
def test_kimi_models_get_vllms_indexed_tool_call_ids(messages: Any) -> None:
    from vllm_frontend.chat.output_parser import count_history_tool_calls

    family = KimiTemplateFamily("qwen3", QWEN_SPECIAL, QWEN_PROMPT, tools=True, reasoning=True)
    text = QWEN_OUTPUTS[2]  # two calls
    extra = {"messages": messages} if messages else {}
    req = vllm_request(TOOLS, **extra)
    options = options_of(req)
    options = type(options)(**{
        **{f: getattr(options, f) for f in options.__struct_fields__},
        "history_tool_calls": count_history_tool_calls(messages),
    })  # fmt: skip
    ids = family.tok.encode(text, add_special_tokens=False)
    _, _, calls = family.vllm_parser(req).parse(
        text, req, enable_auto_tools=True, model_output_token_ids=ids
    )
    parser = family.ours.for_request(options)
    parser.set_prompt_token_ids(family.prompt_ids)  # type: ignore[union-attr]
    assert [c.id for c in parser.parse(text).tool_calls] == [c.id for c in calls]
    streamed = []
    vllm_streamed = []
    vllm_parser, ours = family.vllm_parser(req), family.ours.for_request(options)
    deltas = family.deltas(text, list(range(len(ids))))
    for k, (chunk, chunk_ids) in enumerate(deltas):
        done = k == len(deltas) - 1
        msg = vllm_parser.parse_delta(chunk, chunk_ids, req, family.prompt_ids, finished=done)
        vllm_streamed += [tc.id for tc in msg.tool_calls] if msg is not None else []
        got = ours.feed(chunk, chunk_ids, family.prompt_ids, finished=done)
        streamed += [tc.id for tc in got.tool_calls] if got is not None else []
    assert streamed == vllm_streamed and len(streamed) == 2


def test_startup_without_the_regex_package_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    from vllm_frontend.chat.response_template import regex_module

    monkeypatch.setitem(sys.modules, "regex", None)  # import regex now fails
    regex_module.cache_clear()
    try:
        with pytest.raises(ParserConfigError, match=r"(?s)`regex` package.*hf-parser"):
            OutputParsers(
                {},
                reasoning_parser="hf",
                model=ModelFacts(tokenizer_config={"response_template": template("qwen3")}),
                decode=lambda ids: "",
            )
    finally:
        regex_module.cache_clear()

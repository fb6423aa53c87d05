"""Tool-call structural tags: for every tool parser vLLM 0.32 constrains with a structural tag,
our chat route sends the engine the ``structured_outputs`` vLLM's ``Parser.adjust_request``
produces for the same request (its ``_apply_structural_tag``, then the tool parser's JSON-schema
fallback), over tool sets, tool choices, per-tool ``strict``, ``parallel_tool_calls``,
``--tool-strict-level`` and structured-output constraints. The reference is vLLM's own parser
classes in the test process; ours is the whole chat route in front of a scripted engine that
records the engine requests. Structural-tag models not built here must answer 501, exactly where
vLLM would send a tag.
"""

from __future__ import annotations

import copy
import functools
import itertools
import json
import re
from typing import Any

import pytest

from tests.chat.test_tool_parsers import (
    _chat_app,
    _post,
    _ScriptedEngine,
    vllm_request,
)
from tests.support.tiny_model import tiny_model_dir
from vllm_frontend.chat.output_parser import OutputParsers
from vllm_frontend.chat.tool_parsers import TOOL_PARSERS
from vllm_frontend.chat.tool_tags import STRUCTURAL_TAG_MODELS

pytestmark = pytest.mark.oracle  # imports vLLM or transformers as the reference

pytest.importorskip("vllm")

DEEPSEEK_MARKERS = ["<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>",
                    "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"]  # fmt: skip


@functools.cache
def tokenizer() -> Any:
    """The ChatML test tokenizer, with the DeepSeek tool-call markers the ``deepseek_v3`` and
    ``deepseek_v31`` parsers (vLLM's and ours) need in the vocabulary, and HY V4's block
    markers (``hy_v4``)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir())
    tok.add_tokens(["<think>", "</think>", "<tool_call>", "</tool_call>", *DEEPSEEK_MARKERS,
                    "<tool_calls>", "</tool_calls>"])  # fmt: skip
    tok.add_tokens(["<|im_start|>", "<|im_end|>"], special_tokens=True)
    vocab = tok.get_vocab()  # read once: every parser reads it per instance
    tok.get_vocab = lambda: vocab  # type: ignore[method-assign]
    return tok


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """:func:`tokenizer` saved for our own Tokenizer."""
    path = tmp_path_factory.mktemp("tag-tokenizer")
    tokenizer().save_pretrained(path)
    return str(path)


WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}}  # fmt: skip
STRICT_TIME = {"type": "function", "function": {"name": "get_time", "strict": True,
               "parameters": {"type": "object", "properties": {"utc": {"type": "boolean"}}},
               }}  # fmt: skip
NO_PARAMS = {"type": "function", "function": {"name": "ping", "strict": False}}
DEFS = {"type": "function", "function": {"name": "book", "strict": True, "parameters": {
    "type": "object", "properties": {"where": {"$ref": "#/$defs/p"}},
    "$defs": {"p": {"type": "string"}}}}}  # fmt: skip
# Value kinds GLM's tag pins one by one for a non-strict tool: enums of strings and of other JSON
# values, a one-value enum, type lists with and without "string", untyped and nested values.
KINDS = {"type": "function", "function": {"name": "set_kinds", "parameters": {
    "type": "object", "required": ["mode"], "properties": {
        "mode": {"type": "string", "enum": ["fast", "slow"]},
        "level": {"enum": [1, 2.5, None, True, "x", {"k": "v"}, ["é"]]}, "only": {"enum": ["one"]},
        "n": {"type": "integer", "minimum": 0}, "ratio": {"type": "number"},
        "maybe": {"type": ["integer", "null"]}, "text": {"type": ["string", "boolean"]},
        "any": {"description": "untyped"}, "tags": {"type": "array", "items": {"type": "string"}},
        "opts": {"type": "object", "properties": {"deep": {"type": "boolean"}}},
        "note": {"type": "string", "default": None, "description": "quotes \" and <tags>"},
        "code": {"type": "string", "maxLength": 8, "minLength": 2},
        "fixed": {"type": "string", "const": "x"},
    }}}}  # fmt: skip
# Schemas GLM's tag leaves free (combinators, open objects, no or empty properties), a name
# with a dot and unicode, and a strict tool with no parameters at all.
LOOSE = [
    {"type": "function", "function": {"name": "any_of", "parameters": {
        "anyOf": [{"type": "object"}], "properties": {"a": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "open", "parameters": {"type": "object",
        "properties": {"a": {"type": "integer"}}, "additionalProperties": True}}},
    {"type": "function", "function": {"name": "empty", "parameters": {"type": "object",
                                                                      "properties": {}}}},
    {"type": "function", "function": {"name": "ns.wetter_日本"}},
    {"type": "function", "function": {"name": "bare", "strict": True}},
]  # fmt: skip
TOOL_SETS = [[WEATHER], [WEATHER, STRICT_TIME], [NO_PARAMS, DEFS], [STRICT_TIME], [KINDS],
             [*LOOSE, STRICT_TIME], [DEFS, STRICT_TIME]]  # fmt: skip
CHOICES: list[Any] = [
    "auto", "required", {"type": "function", "function": {"name": "get_time"}},
    {"type": "function", "function": {"name": "get_weather"}}, "none",
    {"type": "function", "function": {"name": "set_kinds"}},
    {"type": "function", "function": {"name": "ns.wetter_日本"}},
    {"type": "function", "function": {"name": "book"}},
]  # fmt: skip
CONSTRAINTS: list[dict[str, Any]] = [
    {},
    {
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "x", "schema": {"type": "object"}},
        }
    },
    {"structured_outputs": {"regex": "[a-z]+"}},
    {"structured_outputs": {"choice": ["yes", "no"]}},
    {"response_format": {"type": "json_object"}},
]
UNBUILT: set[str] = set()
"""Served parsers whose tag is not built (their forced or strict requests would answer 501)."""
TAGGED = sorted(
    n for n in STRUCTURAL_TAG_MODELS if n in TOOL_PARSERS and n != "openai" and n not in UNBUILT
)
"""Every served parser vLLM constrains with a structural tag (gpt-oss's ``openai``: in
tests/chat/test_harmony_serving.py, with the Harmony renderer)."""
ALIASES = {"qwen3_json": "hermes", "llama4_json": "llama3_json", "glm45": "glm47",
           "qwen3_xml": "qwen3_coder"}  # fmt: skip
"""vLLM's alias names, on the same parser class (tested at one strict level)."""
SERVERS = [
    (tool, level)
    for tool in TAGGED
    for level in (("function",) if tool in ALIASES else ("auto", "function", "parameter"))
]
"""``--tool-call-parser`` x ``--tool-strict-level``."""


def vllm_parser_cls(tool: str) -> Any:
    """vLLM's composed parser class for ``--tool-call-parser tool``."""
    from vllm.parser import ParserManager

    return ParserManager.get_parser(
        tool_parser_name=tool, reasoning_parser_name=None, enable_auto_tools=True,
        tokenizer=tokenizer(),
    )  # fmt: skip


def _vllm_parser(tool: str, level: str) -> Any:
    """vLLM's parser for ``--tool-call-parser tool --tool-strict-level level`` (its
    ``adjust_request`` reads the tools of the request it is given)."""
    from vllm.tool_parsers.tool_strict_level import ToolStrictLevel

    parser = vllm_parser_cls(tool)(tokenizer(), None, chat_template_kwargs={})
    parser.tool_strict_level = ToolStrictLevel.from_name(level)
    return parser


def _vllm_structured_outputs(parser: Any, body: dict[str, Any]) -> dict[str, Any] | None:
    fields = {k: v for k, v in copy.deepcopy(body).items() if k not in ("tools", "model")}
    req = vllm_request(copy.deepcopy(body["tools"]), **fields)
    req = parser.adjust_request(req)
    so = req.extract_structured_outputs()
    if so is None:
        return None
    out = {k: v for k in ("json", "regex", "choice", "grammar", "json_object", "structural_tag")
           if (v := getattr(so, k)) is not None}  # fmt: skip
    if "choice" in out:  # the input processor's rewrite for xgrammar
        from vllm.v1.structured_output.utils import choice_as_grammar

        out["grammar"] = choice_as_grammar(out.pop("choice"))
    return out


def _vllm_refusal(constraint: dict[str, Any] | None) -> str | None:
    """The error message vLLM answers when its input processor refuses the adjusted
    ``constraint`` (the "auto" backend: xgrammar's check, then guidance's where xgrammar
    refuses), xgrammar's time stamp removed; ``None`` where it passes."""
    from types import SimpleNamespace

    from vllm.config.structured_outputs import StructuredOutputsConfig
    from vllm.sampling_params import SamplingParams, StructuredOutputsParams

    if constraint is None:
        return None
    params = SamplingParams(structured_outputs=StructuredOutputsParams(**constraint))
    try:
        params._validate_structured_outputs(
            SimpleNamespace(is_diffusion=False), StructuredOutputsConfig(), tokenizer()
        )
    except Exception as e:
        from vllm.entrypoints.serve.exception_handling.error_response import (
            create_error_response,
        )

        return _unstamped(create_error_response(e).model_dump()["error"]["message"])
    return None


def _unstamped(message: str) -> str:
    return re.sub(r"\[\d\d:\d\d:\d\d\] ", "", message)


def _cases() -> list[tuple[Any, ...]]:
    out = []
    for tools, choice, parallel, constraint in itertools.product(
        range(len(TOOL_SETS)), range(len(CHOICES)), (None, False), range(len(CONSTRAINTS))
    ):
        names = {t["function"]["name"] for t in TOOL_SETS[tools]}
        named = CHOICES[choice]
        if isinstance(named, dict) and named["function"]["name"] not in names:
            continue
        if isinstance(named, dict) and "structured_outputs" in CONSTRAINTS[constraint]:
            continue  # vLLM refuses structured outputs with a named tool (tested elsewhere)
        if named != "auto" and constraint > 1:
            continue  # only "auto" combines a constraint with the calls; the others drop it
        if named == "none" and parallel is not None:
            continue  # no tag, whatever the flag
        out.append((tools, choice, parallel, constraint))
    return out


@functools.cache
def _our_tokenizer(tok_dir: str) -> Any:
    from vllm_frontend.text.tokenizer import Tokenizer

    return Tokenizer.from_dir(tok_dir)


def _ours(tool: str, level: str, tok_dir: str) -> tuple[Any, _ScriptedEngine]:
    tok = _our_tokenizer(tok_dir)
    parsers = OutputParsers.for_tokenizer(
        tok.token_to_id, tool_call_parser=tool, enable_auto_tool_choice=True,
        tool_strict_level=level,
    )  # fmt: skip
    engine = _ScriptedEngine([tok.encode("ok", add_special_tokens=False)[0]])
    return _chat_app(engine, parsers, tok_dir, tok=tok), engine


def _our_structured_outputs(engine: _ScriptedEngine) -> dict[str, Any] | None:
    so = engine.requests[-1].sampling_params.structured_outputs
    if so is None:
        return None
    return {k: v for k in ("json", "regex", "choice", "grammar", "json_object", "structural_tag")
            if (v := getattr(so, k)) is not None}  # fmt: skip


@pytest.mark.parametrize(("tool", "level"), SERVERS)
def test_engine_gets_vllms_tool_constraint(tool: str, level: str, tokenizer_dir: str) -> None:
    app, engine = _ours(tool, level, tokenizer_dir)
    parser = _vllm_parser(tool, level)
    tags = 0
    for tools, choice, parallel, constraint in _cases():
        body: dict[str, Any] = {
            "model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": "Weather?"}],
            "tools": TOOL_SETS[tools], "tool_choice": CHOICES[choice], **CONSTRAINTS[constraint],
        }  # fmt: skip
        if parallel is not None:
            body["parallel_tool_calls"] = parallel
        expected = _vllm_structured_outputs(parser, body)
        status, raw = _post(app, body)
        assert status == 200, (body, raw)
        got = _our_structured_outputs(engine)
        assert (got or None) == (expected or None), body
        tags += expected is not None and "structural_tag" in expected
    assert tags > 0


@pytest.mark.parametrize("tools", [[WEATHER], [WEATHER, WEATHER]], ids=["unknown", "twice"])
def test_a_named_choice_matching_no_tool_or_two_is_refused_as_xgrammar_refuses_it(
    tools: list[dict[str, Any]],
) -> None:
    # Messages and Responses reach the tag builder with such a choice (chat refuses it earlier)
    from xgrammar import get_builtin_structural_tag

    from vllm_frontend.chat.errors import ChatError
    from vllm_frontend.chat.tool_tags import tool_structural_tag

    name = "nope" if len(tools) == 1 else "get_weather"
    choice = {"type": "function", "function": {"name": name}}
    with pytest.raises(ValueError) as theirs:
        get_builtin_structural_tag("llama", tools, choice)
    with pytest.raises(ChatError) as mine:
        tool_structural_tag("llama", tools, choice, parallel_tool_calls=None,
                            structured_outputs=None, strict_level=0)  # fmt: skip
    assert str(mine.value) == str(theirs.value)


FLAT_WEATHER = {"type": "function", "name": "get_weather", "description": "Weather",
                "parameters": WEATHER["function"]["parameters"]}  # fmt: skip


@pytest.mark.parametrize(
    "choice",
    [
        {"type": "allowed_tools", "mode": "required",
         "tools": [{"type": "function", "name": "get_weather"}]},
        {"type": "allowed_tools", "mode": "auto", "tools": []},
        {"type": "web_search_preview"},
        {"type": "mcp", "server_label": "s"},
        {"type": "function", "name": "get_weather"},
        "required",
    ],
    ids=["allowed-required", "allowed-auto", "built-in", "mcp", "named", "required"],
)  # fmt: skip
def test_a_responses_tool_choice_gets_vllms_tag_or_none(choice: Any) -> None:
    # vLLM's _apply_structural_tag asks for tool calls only for auto, required and a named
    # function: the other choices of a Responses request leave it as it is
    from vllm.entrypoints.openai.responses.protocol import ResponsesRequest

    from vllm_frontend.chat.tool_tags import tool_structural_tag
    from vllm_frontend.server.responses_input import chat_tool_choice, chat_tools

    request = ResponsesRequest.model_validate(
        {"model": "m", "input": "hi", "tools": [FLAT_WEATHER], "tool_choice": choice}
    )
    so = _vllm_parser("llama3_json", "auto").adjust_request(request).extract_structured_outputs()
    mine = tool_structural_tag("llama", chat_tools([FLAT_WEATHER], choice),
                               chat_tool_choice(choice), parallel_tool_calls=None,
                               structured_outputs=None, strict_level=0)  # fmt: skip
    assert mine == (so.structural_tag if so is not None else None)


def test_aliases_are_vllms() -> None:
    for alias, name in ALIASES.items():
        assert vllm_parser_cls(alias).tool_parser_cls is vllm_parser_cls(name).tool_parser_cls
        assert TOOL_PARSERS[alias] is TOOL_PARSERS[name]


def test_every_served_parsers_structural_tag_is_built() -> None:
    # Only the parsers in UNBUILT answer 501 for want of their tag: the other models not built
    # here belong to parsers refused at startup.
    from vllm_frontend.chat.tags import BUILDERS
    from vllm_frontend.chat.tools.refused import REFUSED_TOOL_PARSERS

    unbuilt = {name for name, model in STRUCTURAL_TAG_MODELS.items() if model not in BUILDERS}
    assert unbuilt <= set(REFUSED_TOOL_PARSERS) | UNBUILT
    assert {
        STRUCTURAL_TAG_MODELS[name]
        for name in TOOL_PARSERS
        if name in STRUCTURAL_TAG_MODELS and name not in UNBUILT
    } <= set(BUILDERS)


def test_structural_tag_models_and_default_levels_are_vllms() -> None:
    from vllm.tool_parsers import ToolParserManager

    from vllm_frontend.chat.tool_parsers import TOOL_PARSERS
    from vllm_frontend.chat.tool_tags import DEFAULT_STRICT_LEVELS

    names = set(ToolParserManager.lazy_parsers) | set(ToolParserManager.tool_parsers)
    assert set(TOOL_PARSERS) <= names
    for name in sorted(names):
        cls = ToolParserManager.get_tool_parser(name)
        assert STRUCTURAL_TAG_MODELS.get(name) == cls.structural_tag_model, name
        level = cls.default_tool_strict_level
        assert DEFAULT_STRICT_LEVELS.get(name) == (None if level is None else int(level)), name


@pytest.mark.parametrize(
    "prop", [True, {"enum": []}, {"type": []}, "text", {"type": ["string"]}, {"enum": [None]}]
)
def test_glm_value_schemas_vllm_fails_on_fail_the_same_way(prop: Any, tokenizer_dir: str) -> None:
    # vLLM's GLM builder reads a non-strict tool's property schemas as they come: a schema it
    # cannot read fails the request with vLLM's status and message (400 for a TypeError, 500
    # otherwise), the others are served.
    from vllm.entrypoints.serve.exception_handling.error_response import create_error_response

    tool = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"p": prop}}}}  # fmt: skip
    body = {"model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": "x"}],
            "tools": [tool], "tool_choice": "required"}  # fmt: skip
    app, engine = _ours("glm47", "auto", tokenizer_dir)
    status, raw = _post(app, body)
    try:
        expected = _vllm_structured_outputs(_vllm_parser("glm47", "auto"), body)
    except Exception as exc:  # vLLM's exception handlers take any
        expected_error = create_error_response(exc).model_dump()["error"]
        assert (status, json.loads(raw)["error"]) == (expected_error["code"], expected_error)
        return
    assert status == 200, raw
    assert _our_structured_outputs(engine) == expected


USER_TAGS: list[dict[str, Any]] = [
    {"type": "any_text"},
    {"value": "x", "type": "const_string"},
    {"type": "sequence", "elements": [
        {"pattern": "[a-z]+", "type": "regex"},
        {"type": "optional", "content": {"type": "any_text", "excludes": ["<x>"]}},
        {"type": "star", "content": {"type": "const_string", "value": "a"}},
        {"type": "plus", "content": {"type": "grammar", "grammar": 'root ::= "b"'}},
        {"type": "repeat", "content": {"type": "const_string", "value": "c"}, "max": 3, "min": 1},
    ]},
    {"type": "triggered_tags", "triggers": ["<f"], "excludes": ["<g"], "tags": [
        {"end": "</f>", "begin": "<f>", "content": {"json_schema": {"type": "object"},
                                                    "type": "json_schema"}},
    ]},
    {"type": "or", "elements": [
        {"type": "tags_with_separator", "separator": ",", "tags": [
            {"type": "tag", "begin": "<a>", "end": ["</a>", "</A>"],
             "content": {"type": "qwen_xml_parameter", "json_schema": {"type": "object"}}}]},
        {"type": "dispatch", "rules": [["<d>", {"type": "const_string", "value": "d"}]]},
        {"type": "json_schema", "json_schema": True, "style": "qwen_xml", "any_order": True},
    ]},
]  # fmt: skip


@pytest.mark.parametrize("user_tag", USER_TAGS)
def test_a_structural_tag_constraint_goes_in_as_vllm_dumps_it(
    user_tag: dict[str, Any], tokenizer_dir: str
) -> None:
    # "auto" with strict tools and a structural-tag constraint: vLLM reads the request's tag into
    # xgrammar's models and dumps it (defaults filled in, fields in declaration order).
    app, engine = _ours("hermes", "auto", tokenizer_dir)
    parser = _vllm_parser("hermes", "auto")
    for rf in (
        {"type": "structural_tag", "format": user_tag},
        {"structured_outputs": {"structural_tag": json.dumps({"type": "structural_tag",
                                                              "format": user_tag})}},
    ):  # fmt: skip
        body: dict[str, Any] = {
            "model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": "x"}],
            "tools": [STRICT_TIME], "tool_choice": "auto",
        }  # fmt: skip
        if "structured_outputs" in rf:
            body.update(rf)
        else:
            body["response_format"] = rf
        expected = _vllm_structured_outputs(parser, body)
        status, raw = _post(app, body)
        assert status == 200, raw
        assert _our_structured_outputs(engine) == expected
        assert expected is not None and "structural_tag" in expected


BUILT_CONSTRAINTS: list[tuple[dict[str, Any], bool]] = [
    ({"grammar": 'start: "yes" | "no"'}, True),
    ({"grammar": 'start: WORD ("," WORD)*\n%import common.WORD'}, True),
    ({"grammar": "start: ("}, False),
    ({"grammar": 'root ::= "a" | b'}, False),
    ({"regex": "(a|b"}, False),
    ({"regex": "[a-z]{2,3}"}, True),
    ({"json": {"type": "object", "properties": {"x": {"$ref": "#/$defs/nope"}}}}, False),
    ({"json": '{"type": "array", "items": {"type": "integer"}}'}, True),
]
"""Constraints joined with the calls ("auto", strict tools), as xgrammar builds them: vLLM
converts a Lark grammar to EBNF; one xgrammar cannot build (False) is left alone, untagged."""


@pytest.mark.parametrize("tool", ["hermes", "qwen3_coder", "glm47"])
def test_a_constraint_joins_the_calls_as_xgrammar_builds_it(tool: str, tokenizer_dir: str) -> None:
    app, engine = _ours(tool, "auto", tokenizer_dir)
    parser = _vllm_parser(tool, "auto")
    for constraint, builds in BUILT_CONSTRAINTS:
        for choice in ("auto", "required"):
            body: dict[str, Any] = {
                "model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": "x"}],
                "tools": [WEATHER, STRICT_TIME], "tool_choice": choice,
                "structured_outputs": constraint,
            }  # fmt: skip
            expected = _vllm_structured_outputs(parser, body)
            status, raw = _post(app, body)
            refusal = _vllm_refusal(expected)
            if refusal is not None:  # left alone, then refused by guidance's check too
                assert (status, _unstamped(json.loads(raw)["error"]["message"])) == (400, refusal)
                assert not builds
                continue
            assert status == 200, raw
            assert _our_structured_outputs(engine) == expected, body
            assert expected is not None
            if choice == "auto":  # ("required" drops the constraint)
                assert ("structural_tag" in expected) == builds, body


FORCED_CHOICES: list[Any] = ["required", {"type": "function", "function": {"name": "get_weather"}}]
KEPT_TAGS: list[dict[str, Any]] = [
    {"type": "structural_tag", "format": {"type": "const_string", "value": "x"}},
    {"type": "structural_tag", "triggers": ["<w>"],
     "structures": [{"begin": "<w>", "schema": {"type": "object"}, "end": "</w>"}]},
]  # fmt: skip


@pytest.mark.parametrize(("tool", "enforce"), [("hermes", "0"), ("pythonic", "0"),
                                               ("pythonic", "1")])  # fmt: skip
def test_forcing_with_json_keeps_a_structured_outputs_tag_as_vllm_does(
    monkeypatch: pytest.MonkeyPatch, tool: str, enforce: str, tokenizer_dir: str
) -> None:
    # Where "required" or a named function is forced with the tools' JSON schema (no
    # structural-tag model, or VLLM_ENFORCE_STRICT_TOOL_CALLING=0), vLLM's
    # ToolParser.adjust_request leaves a request whose structured_outputs holds a structural tag
    # as it is, while a response_format tag (or any other constraint) gives way to the schema.
    import inspect

    monkeypatch.setenv("VLLM_ENFORCE_STRICT_TOOL_CALLING", enforce)
    cls = vllm_parser_cls(tool).tool_parser_cls
    # The class attribute vLLM derives from the variable once, at import (it was on then): off,
    # the class keeps ToolParser's True (it sets none of its own).
    assert "supports_required_and_named" not in inspect.getsource(cls)
    monkeypatch.setattr(cls, "supports_required_and_named", enforce == "0" or
                        cls.structural_tag_model is None)  # fmt: skip
    app, engine = _ours(tool, "auto", tokenizer_dir)
    parser = _vllm_parser(tool, "auto")
    kept = 0
    for choice, user_tag in itertools.product(FORCED_CHOICES, KEPT_TAGS):
        for fields in (
            {"response_format": user_tag},
            {"structured_outputs": {"structural_tag": json.dumps(user_tag)}},
            {"response_format": {"type": "json_object"}},
        ):
            body: dict[str, Any] = {
                "model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": "x"}],
                "tools": [WEATHER, STRICT_TIME], "tool_choice": choice, **fields,
            }  # fmt: skip
            expected = _vllm_structured_outputs(parser, body)
            status, raw = _post(app, body)
            assert status == 200, raw
            assert _our_structured_outputs(engine) == expected, body
            kept += expected is not None and "structural_tag" in expected
    assert kept == len(FORCED_CHOICES) * len(KEPT_TAGS)


@pytest.mark.parametrize("enforce", ["0", "1"])
def test_kimi_k3_forced_choices_as_vllm(
    monkeypatch: pytest.MonkeyPatch, enforce: str, tokenizer_dir: str
) -> None:
    # Kimi K3 forces calls with its XTML tag only: without strict tool calling a named choice is
    # refused (unless the request brings a structural tag), "required" goes unconstrained, and
    # every request it adjusts keeps its special tokens, unspaced.
    from vllm.entrypoints.serve.exception_handling.error_response import create_error_response

    monkeypatch.setenv("VLLM_ENFORCE_STRICT_TOOL_CALLING", enforce)
    app, engine = _ours("kimi_k3", "auto", tokenizer_dir)
    parser = _vllm_parser("kimi_k3", "auto")
    if enforce == "0":
        parser.tool_parser.structural_tag_model = None  # (vLLM reads the variable at import)
    user_tag = {"structural_tag": json.dumps(KEPT_TAGS[0])}
    for choice, fields in itertools.product(
        [*FORCED_CHOICES, "auto", "none"], [{}, {"structured_outputs": user_tag}]
    ):
        body: dict[str, Any] = {
            "model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": "x"}],
            "tools": [WEATHER, STRICT_TIME], "tool_choice": choice, **fields,
        }  # fmt: skip
        status, raw = _post(app, body)
        try:
            expected = _vllm_structured_outputs(parser, body)
        except Exception as exc:
            error = create_error_response(exc).model_dump()["error"]
            assert (status, json.loads(raw)["error"]) == (error["code"], error), body
            continue
        assert status == 200, raw
        assert _our_structured_outputs(engine) == expected, body
        sent = engine.requests[-1].sampling_params
        assert (sent.skip_special_tokens, sent.spaces_between_special_tokens) == (
            (True, True) if choice == "none" else (False, False)
        )


NESTED = {
    "type": "function",
    "function": {
        "name": "plan_trip",
        "parameters": {
            "type": "object",
            "required": ["legs"],
            "properties": {
                "legs": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "properties": {
                            "from": {"$ref": "#/definitions/place"},
                            "to": {"$ref": "#/definitions/place"},
                            "mode": {"enum": ["train", "bus"]},
                            "root": {"type": "string"},
                        },
                    },
                },
                "budget": {"anyOf": [{"type": "number", "minimum": 0}, {"type": "null"}]},
                "notes": {"type": "object", "additionalProperties": {"type": "string"}},
            },
            "definitions": {
                "place": {
                    "type": "object",
                    "properties": {
                        "city": {"type": "string", "maxLength": 20},
                        "code": {"pattern": "^[A-Z]{3}$"},
                    },
                }
            },
        },
    },
}
COHERE_TOOLS = [WEATHER, STRICT_TIME, NO_PARAMS, DEFS, NESTED, KINDS]
COHERE_BODIES: list[dict[str, Any]] = [
    {"tools": [WEATHER]},
    {"tools": [WEATHER, STRICT_TIME], "tool_choice": "required"},
    {"tools": COHERE_TOOLS, "tool_choice": "required"},
    {"tools": COHERE_TOOLS, "tool_choice": {"type": "function", "function": {"name": "book"}}},
    {"tools": [NESTED, STRICT_TIME], "tool_choice": {"type": "function",
                                                      "function": {"name": "plan_trip"}}},
    {"tools": [STRICT_TIME, DEFS], "parallel_tool_calls": False},
    {"tools": [WEATHER, NESTED], "response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}}},
    {"tools": [{"type": "function", "function": {"name": "get_weather"}}, WEATHER]},
    {"tools": [WEATHER], "tool_choice": "none"},
    {"response_format": {"type": "json_object"}},
    {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"a": {"type": "integer"}}}}}},
    {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "schema": {"type": "string"}}}}},
    {"structured_outputs": {"json": {"type": "array"}}},
    {"structured_outputs": {"json": '{"type": "object", "required": ["k"]}'}},
    {"structured_outputs": {"json": "[1]"}},
    {"structured_outputs": {"json_object": True}},
    {"structured_outputs": {"regex": "[a-z]+"}},
    {"structured_outputs": {"structural_tag": json.dumps(KEPT_TAGS[0])}, "tools": [WEATHER]},
    {"response_format": KEPT_TAGS[0]},
    {"response_format": {"type": "text"}},
    {},
]  # fmt: skip


@pytest.mark.parametrize(
    "arch", [None, "Cohere2ForCausalLM", "Cohere2MoeForCausalLM", "LlamaForCausalLM"]
)
@pytest.mark.parametrize(
    ("tool", "reasoning"),
    [("cohere_command3", None), ("cohere_command4", "cohere_command4"), (None, "cohere_command3")],
)
def test_cohere_command_request_constraints_as_vllm(
    arch: str | None, tool: str | None, reasoning: str | None, tokenizer_dir: str
) -> None:
    # vLLM's Cohere parser folds the request's JSON schema and tools into a structural tag for
    # Command A architectures (400 for others), the tools as a grammar xgrammar converts.
    from types import SimpleNamespace

    from vllm.entrypoints.serve.exception_handling.error_response import create_error_response
    from vllm.parser import ParserManager

    from tests.chat.test_tool_parsers import _chat_app
    from vllm_frontend.chat.reasoning_parsers import ModelFacts

    tok = _our_tokenizer(tokenizer_dir)
    parsers = OutputParsers.for_tokenizer(
        tok.token_to_id, tool_call_parser=tool, reasoning_parser=reasoning,
        enable_auto_tool_choice=tool is not None, model=ModelFacts(architecture=arch),
    )  # fmt: skip
    engine = _ScriptedEngine([tok.encode("ok", add_special_tokens=False)[0]])
    app = _chat_app(engine, parsers, tokenizer_dir, tok=tok)
    cls = ParserManager.get_parser(
        tool_parser_name=tool, reasoning_parser_name=reasoning,
        enable_auto_tools=tool is not None, tokenizer=tokenizer(),
    )  # fmt: skip
    parser = cls(tokenizer(), None, model_config=SimpleNamespace(architecture=arch))
    grammars = 0
    for fields in COHERE_BODIES:
        if tool is None and "tools" in fields:
            continue
        body: dict[str, Any] = {"model": "m", "max_tokens": 2,
                                "messages": [{"role": "user", "content": "x"}],
                                **copy.deepcopy(fields)}  # fmt: skip
        status, raw = _post(app, body)
        rest = {k: copy.deepcopy(v) for k, v in body.items() if k not in ("tools", "model")}
        req = vllm_request(copy.deepcopy(body.get("tools")), **rest)
        if reasoning is None and req.tool_choice == "none":
            adjusted = req  # (vLLM's serving does not adjust the request then)
        else:
            try:
                adjusted = parser.adjust_request(req)
            except Exception as exc:
                error = create_error_response(exc).model_dump()["error"]
                assert (status, json.loads(raw)["error"]) == (error["code"], error), body
                continue
        so = adjusted.extract_structured_outputs()
        tag = so.structural_tag if so is not None else None
        grammars += tag is not None and '"grammar"' in tag
        expected = None
        if so is not None:
            fields = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")
            expected = {k: v for k in fields if (v := getattr(so, k)) is not None}
        refusal = _vllm_refusal(copy.deepcopy(expected))
        if refusal is not None:  # the input processor's check (xgrammar's, then guidance's)
            assert (status, _unstamped(json.loads(raw)["error"]["message"])) == (400, refusal)
            continue
        assert status == 200, (body, raw)
        assert (_our_structured_outputs(engine) or None) == (expected or None), body
        sent = engine.requests[-1].sampling_params
        assert sent.skip_special_tokens == adjusted.skip_special_tokens, body
    # The bodies with tools went through the tool grammar on a Command A architecture.
    command_a = tool is not None and arch in ("Cohere2ForCausalLM", "Cohere2MoeForCausalLM")
    assert grammars >= 8 if command_a else grammars == 0

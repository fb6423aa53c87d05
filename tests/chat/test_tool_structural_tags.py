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
import itertools
import json
from typing import Any

import pytest

from tests.chat.test_engine_reasoning_fields import tokenizer_dir as _tokenizer_dir
from tests.chat.test_tool_parsers import (
    _chat_app,
    _post,
    _ScriptedEngine,
    tokenizer,
    vllm_parser_cls,
    vllm_request,
)
from vllm_frontend.chat.output_parser import OutputParsers
from vllm_frontend.chat.tool_tags import STRUCTURAL_TAG_MODELS

pytestmark = pytest.mark.oracle  # imports vLLM or transformers as the reference

pytest.importorskip("vllm")

tokenizer_dir = _tokenizer_dir  # the fixture

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
TOOL_SETS = [[WEATHER], [WEATHER, STRICT_TIME], [NO_PARAMS, DEFS], [STRICT_TIME]]
CHOICES: list[Any] = [
    "auto", "required", {"type": "function", "function": {"name": "get_time"}},
    {"type": "function", "function": {"name": "get_weather"}}, "none",
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
BUILT = ["hermes", "qwen3_json", "longcat", "llama3_json", "llama4_json"]
NOT_BUILT = ["qwen3_coder", "kimi_k2", "glm47"]


def _vllm_structured_outputs(tool: str, level: str, body: dict[str, Any]) -> dict[str, Any] | None:
    from vllm.tool_parsers.tool_strict_level import ToolStrictLevel

    fields = {k: v for k, v in copy.deepcopy(body).items() if k not in ("tools", "model")}
    req = vllm_request(copy.deepcopy(body["tools"]), **fields)
    parser = vllm_parser_cls(tool, None)(tokenizer(), req.tools, chat_template_kwargs={})
    parser.tool_strict_level = ToolStrictLevel.from_name(level)
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
        out.append((tools, choice, parallel, constraint))
    return out


def _ours(tool: str, level: str, tok_dir: str) -> tuple[Any, _ScriptedEngine]:
    from vllm_frontend.text.tokenizer import Tokenizer

    tok = Tokenizer.from_dir(tok_dir)
    parsers = OutputParsers.for_tokenizer(
        tok.token_to_id, tool_call_parser=tool, enable_auto_tool_choice=True,
        tool_strict_level=level,
    )  # fmt: skip
    engine = _ScriptedEngine([tok.encode("ok", add_special_tokens=False)[0]])
    return _chat_app(engine, parsers, tok_dir), engine


def _our_structured_outputs(engine: _ScriptedEngine) -> dict[str, Any] | None:
    so = engine.requests[-1].sampling_params.structured_outputs
    if so is None:
        return None
    return {k: v for k in ("json", "regex", "choice", "grammar", "json_object", "structural_tag")
            if (v := getattr(so, k)) is not None}  # fmt: skip


@pytest.mark.parametrize("tool", BUILT + NOT_BUILT)
@pytest.mark.parametrize("level", ["auto", "function", "parameter"])
def test_engine_gets_vllms_tool_constraint(tool: str, level: str, tokenizer_dir: str) -> None:
    app, engine = _ours(tool, level, tokenizer_dir)
    tags = 0
    for tools, choice, parallel, constraint in _cases():
        body: dict[str, Any] = {
            "model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": "Weather?"}],
            "tools": TOOL_SETS[tools], "tool_choice": CHOICES[choice], **CONSTRAINTS[constraint],
        }  # fmt: skip
        if parallel is not None:
            body["parallel_tool_calls"] = parallel
        expected = _vllm_structured_outputs(tool, level, body)
        status, raw = _post(app, body)
        vllm_tag = expected is not None and "structural_tag" in expected
        if tool in NOT_BUILT and vllm_tag:
            assert status == 501, raw
            assert STRUCTURAL_TAG_MODELS[tool] in json.loads(raw)["error"]["message"]
            continue
        assert status == 200, (body, raw)
        got = _our_structured_outputs(engine)
        assert (got or None) == (expected or None), body
        tags += vllm_tag
    assert tags > 0 or tool in NOT_BUILT


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

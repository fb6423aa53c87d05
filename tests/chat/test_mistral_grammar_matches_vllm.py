"""With ``--tokenizer-mode mistral`` and a tekken tokenizer of version 11 on, the Mistral
parsers constrain a chat request with mistral_common's Lark grammar as vLLM 0.32's
``MistralParser.adjust_request`` does: the same grammar, the same dropped response format, or
the same 400 message (mistral_common 1.13 changed ``get_lark_from_jinja``'s signature, so vLLM
0.32 answers most such requests with a ``TypeError`` message); requests with constraints
mistral_common cannot take keep vLLM's other branch. Compared with vLLM's own parser on vLLM's
``MistralTokenizer``."""

from __future__ import annotations

import copy
import functools
from typing import Any

import pytest

from tests.support.tiny_mistral import tiny_mistral_dir
from vllm_frontend.chat import ChatError
from vllm_frontend.chat.messages import normalize_tools
from vllm_frontend.chat.mistral_grammar import grammar_applies, mistral_grammar_constraint
from vllm_frontend.text.structured_outputs import grammar_is_likely_lark
from vllm_frontend.text.tokenizer_mistral import MistralTokenizer

pytestmark = pytest.mark.oracle

pytest.importorskip("vllm")
pytest.importorskip("mistral_common")

TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
NAMED = {"type": "function", "function": {"name": "get_weather"}}

CASES: dict[str, dict[str, Any]] = {
    "no_tools": {},
    "tools_auto": {"tools": [TOOL]},
    "tools_required": {"tools": [TOOL], "tool_choice": "required"},
    "tools_named": {"tools": [TOOL], "tool_choice": NAMED},
    "tools_none": {"tools": [TOOL], "tool_choice": "none"},
    "none_json_schema": {
        "tools": [TOOL],
        "tool_choice": "none",
        "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}},
    },
    "none_json_object": {
        "tools": [TOOL],
        "tool_choice": "none",
        "response_format": {"type": "json_object"},
    },
    "none_so_json": {
        "tools": [TOOL],
        "tool_choice": "none",
        "structured_outputs": {"json": SCHEMA},
    },
    "none_so_json_object": {
        "tools": [TOOL],
        "tool_choice": "none",
        "structured_outputs": {"json_object": True},
    },
    "so_regex_keeps_legacy": {"tools": [TOOL], "structured_outputs": {"regex": "a+"}},
    "structural_tag_format": {
        "tools": [TOOL],
        "response_format": {
            "type": "structural_tag",
            "format": {"type": "const_string", "value": "x"},
        },
    },
}


@functools.cache
def _vllm_parts(version: str, reasoning: str | None, tool: str | None) -> tuple[Any, Any]:
    from vllm.parser import ParserManager
    from vllm.tokenizers.mistral import MistralTokenizer as VllmMistralTokenizer

    tok = VllmMistralTokenizer.from_pretrained(str(tiny_mistral_dir(version)))
    cls = ParserManager.get_parser(
        tool_parser_name=tool,
        reasoning_parser_name=reasoning,
        enable_auto_tools=True,
        tokenizer=tok,
    )
    return tok, cls


def _vllm(version: str, reasoning: str | None, tool: str | None, body: dict[str, Any]) -> Any:
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    tok, cls = _vllm_parts(version, reasoning, tool)
    request = ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], **copy.deepcopy(body)}
    )
    try:
        request = cls(tok, request.tools).adjust_request(request)
    except (ValueError, TypeError) as e:
        return ("error", str(e))
    so = request.structured_outputs
    grammar = so.grammar if so is not None else None
    if grammar is None or not request._grammar_from_parser:
        return ("legacy",)
    return ("grammar", grammar, request.response_format is None, request.skip_special_tokens)


def _ours(version: str, body: dict[str, Any]) -> Any:
    tok = MistralTokenizer.from_dir(tiny_mistral_dir(version))
    so, rf = body.get("structured_outputs"), body.get("response_format")
    if not grammar_applies(tok, so, rf):
        return ("legacy",)
    try:
        grammar, dropped = mistral_grammar_constraint(
            tok,
            tools=normalize_tools(body.get("tools")),
            tool_choice=body.get("tool_choice"),
            parallel_tool_calls=body.get("parallel_tool_calls"),
            structured_outputs=so,
            response_format=rf,
        )
    except ChatError as e:
        return ("error", str(e))
    return ("grammar", grammar, dropped or rf is None, True)


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("version", ["v11", "v13"])
@pytest.mark.parametrize(("reasoning", "tool"), [("mistral", "mistral"), (None, "mistral")])
def test_grammar_branch_matches_vllm(
    version: str, reasoning: str | None, tool: str | None, case: str
) -> None:
    body = CASES[case]
    assert _ours(version, body) == _vllm(version, reasoning, tool, body)


def test_the_grammar_goes_to_guidance() -> None:
    """vLLM sends Lark grammars of tekken tokenizers to the guidance backend."""
    _, grammar, _, _ = _ours("v13", CASES["none_json_schema"])
    assert grammar_is_likely_lark(grammar)
    from vllm.v1.structured_output.utils import grammar_is_likely_lark as theirs

    for text in (grammar, "root ::= 'a'", "start: 'a' // x ::= y", "", "# c\nroot ::= x"):
        assert grammar_is_likely_lark(text) == theirs(text)


def _mistral_app(version: str) -> tuple[Any, Any]:
    from tests.chat.test_tool_parsers import _ScriptedEngine
    from vllm_frontend.chat.mistral_renderer import MistralChatRenderer
    from vllm_frontend.chat.output_parser import OutputParsers
    from vllm_frontend.chat.reasoning.base import ModelFacts
    from vllm_frontend.engine.protocol import EngineCoreRequest
    from vllm_frontend.llm import LLM
    from vllm_frontend.server.app import App, ServerSettings
    from vllm_frontend.server.chat import ChatHandler
    from vllm_frontend.server.generation import ServingContext
    from vllm_frontend.server.protocol import parse_chat_request
    from vllm_frontend.text.sampling import ModelSamplingInfo

    tok = MistralTokenizer.from_dir(tiny_mistral_dir(version))
    engine = _ScriptedEngine(tok.encode("ok", add_special_tokens=False))
    engine.token_ids[-1] = tok.eos_token_id
    parsers = OutputParsers.for_tokenizer(
        tok.token_to_id,
        tool_call_parser="mistral",
        reasoning_parser="mistral",
        enable_auto_tool_choice=True,
        model=ModelFacts(mistral_version=tok.version, mistral_grammar=tok.supports_grammar),
        special_tokens=tok.all_special_tokens,
    )
    sampling = ModelSamplingInfo(
        max_model_len=2048, eos_token_id=tok.eos_token_id, mistral_tokenizer="tekken"
    )
    ctx = ServingContext(
        llm=LLM(engine, EngineCoreRequest),
        tokenizer=tok,
        served_model_names=["m"],
        max_model_len=2048,
        sampling=sampling,
        chat_renderer=None,
    )
    handler = ChatHandler(ctx, parse_chat_request, parsers, mistral=MistralChatRenderer(tok))
    app = App(ServerSettings(served_model_names=["m"], max_model_len=2048))
    app.route("POST", "/v1/chat/completions", handler)
    return engine, app


def test_chat_route_sends_vllms_grammar_to_guidance_or_its_400() -> None:
    import json

    from tests.chat.test_tool_parsers import _post

    engine, app = _mistral_app("v13")
    messages = [{"role": "user", "content": "hi"}]
    body = {"model": "m", "messages": messages, **CASES["none_json_schema"]}
    status, raw = _post(app, body)
    assert status == 200, raw
    so = engine.requests[0].sampling_params.structured_outputs
    expected = _vllm("v13", "mistral", "mistral", CASES["none_json_schema"])
    assert (so.grammar, so.backend, so.backend_was_auto) == (expected[1], "guidance", True)
    assert engine.requests[0].sampling_params.skip_special_tokens is True

    status, raw = _post(app, {"model": "m", "messages": messages, **CASES["tools_auto"]})
    theirs = _vllm("v13", "mistral", "mistral", CASES["tools_auto"])
    assert (status, json.loads(raw)["error"]["message"]) == (400, theirs[1])

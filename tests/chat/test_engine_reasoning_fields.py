"""``reasoning_ended`` and ``reasoning_parser_kwargs``: the engine requests of a chat request
carry what vLLM 0.32's chat route passes to ``generate`` (``OpenAIServingChat
._engine_reasoning_kwargs`` over ``_effective_chat_template_kwargs``), run here in the test
process on the same request and on the prompt ids our route sent. The engine holds structured
outputs back until reasoning has ended, so these fields decide what a reasoning model's
constrained output looks like.
"""

from __future__ import annotations

import itertools
from types import SimpleNamespace
from typing import Any

import pytest

from tests.chat.test_tool_parsers import (
    _chat_app,
    _post,
    _ScriptedEngine,
    tokenizer,
    vllm_parser_cls,
    vllm_request,
)
from vllm_frontend.chat.output_parser import OutputParsers
from vllm_frontend.chat.renderer import ChatTemplateOptions

pytestmark = pytest.mark.oracle  # imports vLLM or transformers as the reference

pytest.importorskip("vllm")

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
USER = {"role": "user", "content": "Weather?"}
# A prefilled assistant turn ends the prompt inside or after the reasoning.
OPEN = [USER, {"role": "assistant", "content": "<think>\nLet me see"}]
CLOSED = [USER, {"role": "assistant", "content": "<think>\nSunny.\n</think>\n\nIt"}]
BODIES: list[dict[str, Any]] = [
    {"messages": [USER]},
    {"messages": [USER], "include_reasoning": False},
    {"messages": [USER], "reasoning_effort": "low"},
    {"messages": [USER], "reasoning_effort": "none"},
    {"messages": [USER], "chat_template_kwargs": {"enable_thinking": False}},
    {"messages": [USER], "chat_template_kwargs": {"enable_thinking": None, "x": "auto"}},
    {"messages": [USER], "chat_template_kwargs": {"thinking": True, "add_generation_prompt": 0}},
    {"messages": [USER], "documents": [{"title": "t", "text": "d"}]},
    {"messages": [USER], "tools": [WEATHER], "tool_choice": "auto"},
    {"messages": OPEN, "continue_final_message": True, "add_generation_prompt": False},
    {"messages": CLOSED, "continue_final_message": True, "add_generation_prompt": False},
    {
        "messages": CLOSED,
        "continue_final_message": True,
        "add_generation_prompt": False,
        "include_reasoning": False,
    },
]
CONFIGS = [(None, None), ("hermes", None), (None, "deepseek_r1"), ("hermes", "qwen3"),
           (None, "deepseek_v3"), (None, "qwen3")]  # fmt: skip
DEFAULTS: list[dict[str, Any]] = [{}, {"enable_thinking": False, "thinking": None}]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The test tokenizer (with ``<think>`` tokens) saved for our own Tokenizer."""
    path = tmp_path_factory.mktemp("think-tokenizer")
    tokenizer().save_pretrained(path)
    return str(path)


def _vllm_fields(
    body: dict[str, Any], tool: str | None, reasoning: str | None, defaults: dict[str, Any],
    prompt_ids: list[int],
) -> dict[str, Any]:  # fmt: skip
    from vllm.entrypoints.openai.chat_completion.serving import OpenAIServingChat

    serving = SimpleNamespace(
        chat_template=None,
        chat_template_content_format="auto",
        default_chat_template_kwargs=defaults or None,
    )
    serving._engine_chat_template_kwargs = lambda kwargs: kwargs
    req = vllm_request(body.get("tools"), **{k: v for k, v in body.items() if k != "tools"})
    kwargs = OpenAIServingChat._effective_chat_template_kwargs(serving, req)  # type: ignore[arg-type]
    parser = None
    if tool is not None or reasoning is not None:
        parser = vllm_parser_cls(tool, reasoning)(
            tokenizer(), req.tools, chat_template_kwargs=kwargs, model_config=None
        )
        req = parser.adjust_request(req)
    return OpenAIServingChat._engine_reasoning_kwargs(  # type: ignore[arg-type]
        serving, req, parser, kwargs, prompt_ids
    )


@pytest.mark.parametrize(("tool", "reasoning"), CONFIGS)
def test_engine_requests_carry_vllms_reasoning_fields(
    tokenizer_dir: str, tool: str | None, reasoning: str | None
) -> None:
    from tests.support.shared_tokenizer import shared_tokenizer

    tok = shared_tokenizer(tokenizer_dir)
    parsers = OutputParsers.for_tokenizer(
        tok.token_to_id,
        tool_call_parser=tool,
        reasoning_parser=reasoning,
        enable_auto_tool_choice=tool is not None,
    )
    seen = set()
    apps = {}
    for defaults, body in itertools.product(DEFAULTS, BODIES):
        if body.get("tools") and tool is None:
            continue
        if not (app_engine := apps.get(str(defaults))):
            engine = _ScriptedEngine([tok.encode("ok", add_special_tokens=False)[0]])
            options = ChatTemplateOptions(default_chat_template_kwargs=defaults)
            app_engine = apps[str(defaults)] = (
                _chat_app(engine, parsers, tokenizer_dir, options),
                engine,
            )
        app, engine = app_engine
        status, raw = _post(app, {"model": "m", "max_tokens": 4, **body})
        assert status == 200, raw
        sent = engine.requests[-1]
        expected = _vllm_fields(body, tool, reasoning, defaults, sent.prompt_token_ids)
        got = {
            "reasoning_ended": sent.reasoning_ended,
            "reasoning_parser_kwargs": sent.reasoning_parser_kwargs,
        }
        assert got == expected, (body, defaults)
        seen.add(sent.reasoning_ended)
    # The corpus reaches every value vLLM gives this configuration.
    assert seen == ({True, None} if reasoning is None else {True, False})

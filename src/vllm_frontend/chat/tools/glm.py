"""GLM-4.5/4.7's tool calls, shared by Ling 3 (vLLM 0.32's ``vllm/parser/glm47_moe.py`` and
``ling3.py``)::

    <tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>

The name runs up to the first ``<arg_key>`` (stripped); values are verbatim text, typed by the
tool's schema; calls to tools the request does not have are dropped. With thinking on, a
``<think>`` in the content opens reasoning again. ``required`` and named tool choices are read
from this format, not forced as JSON.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from typing import Any

import msgspec

from vllm_frontend.chat.engine.calls import EngineToolParser, Slot
from vllm_frontend.chat.engine.grammar import Event, Grammar, Kind, State, Step
from vllm_frontend.chat.parsed import ToolCallDelta
from vllm_frontend.chat.reasoning.base import ModelFacts

__all__ = ["Glm47ToolParser", "Ling3ToolParser", "glm53_always_thinks", "glm_thinking"]

_ARG = re.compile(
    r"<arg_key>(?P<key>.*?)</arg_key>\s*<arg_value>(?P<value>.*?)</arg_value>", re.DOTALL
)
_OPEN_ARG = re.compile(r"<arg_key>(?P<key>.*?)</arg_key>\s*<arg_value>(?P<value>.*)$", re.DOTALL)
GLM_BOUNDARIES = frozenset(("<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"))


def glm_arguments(raw: str, partial: bool) -> str:
    """``<arg_key>K</arg_key><arg_value>V</arg_value>`` pairs as a JSON object of strings."""
    params: dict[str, object] = {}
    for m in _ARG.finditer(raw):
        params[m.group("key").strip()] = m.group("value")
    if partial:
        last = _OPEN_ARG.search(_ARG.sub("", raw))
        if last and (key := last.group("key").strip()):
            params[key] = last.group("value")
    return json.dumps(params, ensure_ascii=False)


def glm53_always_thinks(template: object) -> bool:
    """Whether a chat template is GLM-5.3's (the GLM-4 format, always thinking, no switch), as
    vLLM recognises it."""
    return (
        isinstance(template, str)
        and all(
            needle in template
            for needle in ("[gMASK]<sop>", "Reasoning Effort:", "<tool_call>", "<arg_key>")
        )
        and "<arg_value>" in template
        and "enable_thinking" not in template
    )


def glm_thinking(kwargs: Mapping[str, Any]) -> bool:
    """Thinking unless ``thinking`` or ``enable_thinking`` is given and neither is true."""
    thinking, enable = kwargs.get("thinking"), kwargs.get("enable_thinking")
    return (thinking is None and enable is None) or bool(thinking) or bool(enable)


@functools.cache
def glm_grammar(thinking: bool, name: str = "glm47_moe") -> Grammar:
    """The GLM-4.7 grammar, with or without reasoning markers."""
    R, C, N, A = State.REASONING, State.CONTENT, State.TOOL_NAME, State.TOOL_ARGS
    think = {"THINK_START": "<think>", "THINK_END": "</think>"} if thinking else {}
    tool = {"TOOL_START": "<tool_call>", "TOOL_END": "</tool_call>"}
    steps: dict[tuple[State, str], Step] = {}
    if thinking:
        steps[(C, "THINK_START")] = Step(R, (Kind.REASONING_START,))
        steps[(R, "THINK_END")] = Step(C, (Kind.REASONING_END,))
        steps[(C, "THINK_END")] = Step(C)
    steps |= {
        (R, "THINK_START"): Step(R),
        (R, "TOOL_START"): Step(N, (Kind.REASONING_END, Kind.CALL_START)),
        (C, "TOOL_START"): Step(N, (Kind.CALL_START,)),
        (N, "ARG_KEY_START"): Step(A, (Kind.ARGS,)),
        (N, "TOOL_END"): Step(C, (Kind.CALL_END,)),
        (A, "TOOL_END"): Step(C, (Kind.CALL_END,)),
    }
    for tag in ("ARG_KEY_START", "ARG_KEY_END", "ARG_VALUE_START", "ARG_VALUE_END"):
        steps[(A, tag)] = Step(A, (Kind.ARGS,))
    return Grammar(
        name=name,
        initial=R if thinking else C,
        terminals={
            **think,
            **tool,
            "ARG_KEY_START": "<arg_key>",
            "ARG_KEY_END": "</arg_key>",
            "ARG_VALUE_START": "<arg_value>",
            "ARG_VALUE_END": "</arg_value>",
        },
        token_terminals={**think, **tool},
        steps=steps,
        turn_boundary_tokens=GLM_BOUNDARIES,
        arg_converter=glm_arguments,
        json_args=False,
        validate_tool_names=True,
    )


class Glm47ToolParser(EngineToolParser):
    """``glm45`` / ``glm47``."""

    name = "glm47"
    supports_required_and_named = False
    ALWAYS_THINKS = False
    """The model's template is GLM-5.3's: thinking cannot be switched off."""

    @classmethod
    def for_model(cls, model: ModelFacts) -> type[Glm47ToolParser]:
        """The parser for a GLM-5.3 template always thinks."""
        if not glm53_always_thinks(model.chat_template):
            return cls
        return type(cls.__name__, (cls,), {"ALWAYS_THINKS": True})

    @classmethod
    def grammar_for(cls, chat_template_kwargs: Mapping[str, Any]) -> Grammar:
        """With or without reasoning markers, by the thinking switch."""
        kwargs = chat_template_kwargs
        if cls.ALWAYS_THINKS and (
            kwargs.get("thinking") is False or kwargs.get("enable_thinking") is False
        ):
            kwargs = {}
        return glm_grammar(glm_thinking(kwargs))

    def emit_name(self, index: int, calls: list[ToolCallDelta], name: str | None) -> None:
        """The name without surrounding whitespace."""
        super().emit_name(index, calls, name.strip() if name is not None else None)

    def end_call(self, slot: Slot, event: Event) -> None:
        """The name without surrounding whitespace."""
        slot.name = slot.name.strip()


@functools.cache
def _ling3_grammar(thinking: bool) -> Grammar:
    return msgspec.structs.replace(glm_grammar(thinking), name="ling3")


class Ling3ToolParser(Glm47ToolParser):
    """``ling3``: the GLM grammar, whatever the template."""

    name = "ling3"

    @classmethod
    def for_model(cls, model: ModelFacts) -> type[Glm47ToolParser]:
        """No GLM-5.3 special case."""
        return cls

    @classmethod
    def grammar_for(cls, chat_template_kwargs: Mapping[str, Any]) -> Grammar:
        """With or without reasoning markers, by the thinking switch."""
        return _ling3_grammar(glm_thinking(chat_template_kwargs))

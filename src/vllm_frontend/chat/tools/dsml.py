"""DeepSeek's DSML tool calls: V3.2, V4 and V4.1 (vLLM 0.32's ``vllm/parser/deepseek_v32.py``,
``deepseek_v4.py``, ``deepseek_v41.py``)::

    <｜DSML｜function_calls>
    <｜DSML｜invoke name="get_weather">
    <｜DSML｜parameter name="city" string="true">杭州</｜DSML｜parameter>
    <｜DSML｜parameter name="days" string="false">5</｜DSML｜parameter>
    </｜DSML｜invoke>
    </｜DSML｜function_calls>

V4 wraps calls in ``tool_calls`` (or ``toolcalls`` / ``tool``) and may reason in ``<think>``;
V4.1 spells the markers with a space (``<｜DSML｜ calls>``). ``string="false"`` values (and those
without the attribute) are read as JSON when they are JSON. Arguments wrapped in a single
``arguments`` / ``input`` key the tool does not have are unwrapped. Text after the calls is
dropped.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from vllm_frontend.chat.engine.calls import EngineToolParser
from vllm_frontend.chat.engine.coerce import tool_properties
from vllm_frontend.chat.engine.grammar import Grammar, Kind, State, Step

__all__ = ["DeepSeekV4ToolParser", "DeepSeekV32ToolParser", "DeepSeekV41ToolParser"]

_D = "｜DSML｜"


class _Dialect:
    """The marker spellings of one DSML version."""

    def __init__(self, sep: str, wrapper: str) -> None:
        self.tool_start = f"<{_D}{sep}{wrapper}>"
        self.tool_end = f"</{_D}{sep}{wrapper}>"
        self.invoke = f'<{_D}{sep}invoke name="'
        self.invoke_end = f"</{_D}{sep}invoke>"
        self.param = f"<{_D}{sep}parameter"
        self.param_close = f"</{_D}{sep}parameter>"
        start, close = re.escape(self.param), re.escape(self.param_close)
        head = rf'{start}\s+name="([^"]+)"(?:\s+string="([^"]*)")?\s*>'
        self.param_re = re.compile(rf"{head}(.*?)(?:{close}|(?={start}\s+name=))", re.DOTALL)
        self.open_param_re = re.compile(rf"{head}(.*)$", re.DOTALL)

    def arguments(self, raw: str, partial: bool) -> str:
        """The parameters as a JSON object (non-string values read as JSON when they are)."""
        params: dict[str, object] = {}
        end = 0
        for m in self.param_re.finditer(raw):
            name, is_str, value = m.group(1), m.group(2), m.group(3)
            params[name] = value if is_str == "true" else _json_or_text(value)
            end = m.end()
        if partial and (last := self.open_param_re.search(raw, end)):
            name, is_str, value = last.group(1), last.group(2), last.group(3)
            if is_str == "true":
                params[name] = value
            else:
                with contextlib.suppress(ValueError):
                    params[name] = json.loads(value)
        return json.dumps(params, ensure_ascii=False)


def _json_or_text(value: str) -> object:
    try:
        return json.loads(value)
    except ValueError:
        return value


V32 = _Dialect("", "function_calls")
V4 = _Dialect("", "tool_calls")
V41 = _Dialect(" ", "calls")


def unwrap_arguments(args_json: str, tools: Sequence[Mapping[str, Any]], name: str | None) -> str:
    """``{"arguments": {...}}`` / ``{"input": {...}}`` as its inner object, when the tool has no
    such parameter and has every inner one."""
    if not tools or not name:
        return args_json
    try:
        args = json.loads(args_json)
    except ValueError:
        return args_json
    if not isinstance(args, dict):
        return args_json
    properties = tool_properties(tools, name)
    if not properties:
        return args_json
    allowed = set(properties)
    for wrapper in ("arguments", "input"):
        if set(args) != {wrapper} or wrapper in allowed:
            continue
        inner = args[wrapper]
        if isinstance(inner, str):
            try:
                inner = json.loads(inner)
            except ValueError:
                return args_json
        if isinstance(inner, dict) and set(inner).issubset(allowed):
            return json.dumps(inner, ensure_ascii=False)
    return args_json


@functools.cache
def dsml_grammar(version: str) -> Grammar:
    """The DSML grammar of ``version`` (``v32``, ``v4``, ``v41``)."""
    dialect = {"v32": V32, "v4": V4, "v41": V41}[version]
    R, C, P, N, A, B = (
        State.REASONING,
        State.CONTENT,
        State.TOOL_PREAMBLE,
        State.TOOL_NAME,
        State.TOOL_ARGS,
        State.TOOL_BETWEEN,
    )
    thinks = version != "v32"
    tool_start: str | tuple[str, ...] = dialect.tool_start
    if version == "v4":
        tool_start = (dialect.tool_start, f"<{_D}toolcalls>", f"<{_D}tool>")
    think = {"THINK_START": "<think>", "THINK_END": "</think>"} if thinks else {}
    steps: dict[tuple[State, str], Step] = {}
    if thinks:
        steps |= {
            (C, "THINK_START"): Step(R, (Kind.REASONING_START,)),
            (C, "THINK_END"): Step(C),
            (R, "THINK_START"): Step(R),
            (R, "THINK_END"): Step(C, (Kind.REASONING_END,)),
            (R, "TOOL_START"): Step(P, (Kind.REASONING_END,)),
        }
    steps |= {
        (C, "TOOL_START"): Step(P),
        (P, "INVOKE_PREFIX"): Step(N, (Kind.CALL_START,)),
        (C, "INVOKE_PREFIX"): Step(N, (Kind.CALL_START,)),
        (N, "INVOKE_NAME_END"): Step(A),
        (A, "INVOKE_END"): Step(B, (Kind.CALL_END,)),
        (A, "TOOL_END"): Step(B, (Kind.CALL_END,)),
        (B, "INVOKE_PREFIX"): Step(N, (Kind.CALL_START,)),
        # The calls end the turn: text after them is dropped.
        (B, "TOOL_END"): Step(B),
        (B, "TOOL_START"): Step(P),
    }
    text_kinds = {C: Kind.TEXT, N: Kind.NAME, A: Kind.ARGS}
    if thinks:
        text_kinds[R] = Kind.REASONING
    return Grammar(
        name=f"deepseek_{version}",
        wait_for_reasoning=False,
        terminals={
            **think,
            "TOOL_START": tool_start,
            "TOOL_END": dialect.tool_end,
            "INVOKE_PREFIX": dialect.invoke,
            "INVOKE_NAME_END": '">',
            "INVOKE_END": dialect.invoke_end,
            "PARAM_START": dialect.param,
            "PARAM_CLOSE": dialect.param_close,
        },
        token_terminals={**think, "TOOL_START": dialect.tool_start, "TOOL_END": dialect.tool_end},
        steps=steps,
        text_kinds=text_kinds,
        arg_converter=dialect.arguments,
        arg_structural_chars=frozenset(">"),
        strip_content_with_tools=False,
        json_args=False,
    )


def dsml_thinking(chat_template_kwargs: Mapping[str, Any]) -> bool:
    """DeepSeek V4's thinking switch: ``thinking`` or ``enable_thinking`` (on when neither is
    given), off with ``reasoning_effort: none``."""
    kwargs = chat_template_kwargs
    if "thinking" not in kwargs and "enable_thinking" not in kwargs:
        thinking = True
    else:
        thinking = bool(kwargs.get("thinking") or kwargs.get("enable_thinking"))
    return thinking and kwargs.get("reasoning_effort") != "none"


@functools.cache
def _thinking_grammar(grammar: Grammar) -> Grammar:
    return msgspec.structs.replace(grammar, initial=State.REASONING, wait_for_reasoning=True)


class DeepSeekV32ToolParser(EngineToolParser):
    """``deepseek_v32``."""

    name = "deepseek_v32"
    GRAMMAR = dsml_grammar("v32")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """See :class:`EngineToolParser`; arguments are unwrapped by the called tool."""
        super().__init__(*args, **kwargs)
        self._dsml = self._converter
        self._converter = self._unwrapping_arguments

    def _unwrapping_arguments(self, raw: str, partial: bool) -> str:
        assert self._dsml is not None
        result = self._dsml(raw, partial)
        if not self.tools:
            return result
        name = next((s.name for s in self.slots if s.args == raw), None)
        return unwrap_arguments(result, self.tools, name)


class DeepSeekV4ToolParser(DeepSeekV32ToolParser):
    """``deepseek_v4``."""

    name = "deepseek_v4"
    GRAMMAR = dsml_grammar("v4")

    @classmethod
    def grammar_for(cls, chat_template_kwargs: Mapping[str, Any]) -> Grammar:
        """Starting in reasoning while thinking (:func:`dsml_thinking`)."""
        if not dsml_thinking(chat_template_kwargs):
            return cls.GRAMMAR
        return _thinking_grammar(cls.GRAMMAR)


class DeepSeekV41ToolParser(DeepSeekV4ToolParser):
    """``deepseek_v41``."""

    name = "deepseek_v41"
    GRAMMAR = dsml_grammar("v41")

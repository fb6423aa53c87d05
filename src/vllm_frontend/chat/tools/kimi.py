"""Kimi K2's tool calls (vLLM 0.32's ``vllm/parser/kimi_k2.py``)::

    <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0
    <|tool_call_argument_begin|>{"city": "Tokyo"}<|tool_call_end|><|tool_calls_section_end|>

The header before the arguments is the call's id (``functions.NAME:N``), kept as the id; the
arguments are the model's JSON, streamed as written. Text after a tools section is dropped.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

from vllm_frontend.chat.engine.calls import EngineToolParser, Slot
from vllm_frontend.chat.engine.grammar import Event, Grammar, Kind, State, Step
from vllm_frontend.chat.parsed import ToolCallDelta
from vllm_frontend.chat.tools.glm import glm_thinking

__all__ = ["KimiK2ToolParser", "kimi_k2_grammar"]

_ID = re.compile(r"(?P<id>.+:\d+)", re.DOTALL)


@functools.cache
def kimi_k2_grammar(thinking: bool) -> Grammar:
    """The Kimi K2 grammar, with or without reasoning markers."""
    R, C, P, N, A, B = (
        State.REASONING,
        State.CONTENT,
        State.TOOL_PREAMBLE,
        State.TOOL_NAME,
        State.TOOL_ARGS,
        State.TOOL_BETWEEN,
    )
    think = {"THINK_START": "<think>", "THINK_END": "</think>"} if thinking else {}
    markers = {
        **think,
        "TOOL_SECTION_START": "<|tool_calls_section_begin|>",
        "TOOL_SECTION_END": "<|tool_calls_section_end|>",
        "TOOL_START": "<|tool_call_begin|>",
        "TOOL_END": "<|tool_call_end|>",
        "ARG_START": "<|tool_call_argument_begin|>",
    }
    steps: dict[tuple[State, str], Step] = {}
    if thinking:
        steps[(R, "THINK_START")] = Step(R)
        steps[(R, "THINK_END")] = Step(C, (Kind.REASONING_END,))
        steps[(C, "THINK_END")] = Step(C)
    steps |= {
        (R, "TOOL_SECTION_START"): Step(P, (Kind.REASONING_END,)),
        (C, "TOOL_SECTION_START"): Step(P),
        (P, "TOOL_START"): Step(N, (Kind.CALL_START,)),
        (N, "ARG_START"): Step(A),
        (A, "TOOL_END"): Step(B, (Kind.CALL_END,)),
        (A, "TOOL_SECTION_END"): Step(P, (Kind.CALL_END,)),
        (B, "TOOL_START"): Step(N, (Kind.CALL_START,)),
        # The section's end keeps the reader in a tool state: later text is dropped.
        (P, "TOOL_SECTION_END"): Step(P),
        (B, "TOOL_SECTION_END"): Step(P),
    }
    return Grammar(
        name="kimi_k2",
        initial=R if thinking else C,
        wait_for_reasoning=thinking,
        terminals=markers,
        token_terminals=markers,
        steps=steps,
        strip_content_with_tools=False,
    )


def _id_and_name(header: str | None) -> tuple[str | None, str | None]:
    """``functions.NAME:N`` -> (that id, NAME)."""
    if header is None:
        return None, None
    m = _ID.match(header.strip())
    if not m:
        return None, None
    call_id = m.group("id").strip()
    return call_id, call_id.split(":")[0].removeprefix("functions.")


class KimiK2ToolParser(EngineToolParser):
    """``kimi_k2``."""

    name = "kimi_k2"

    @classmethod
    def grammar_for(cls, chat_template_kwargs: Mapping[str, Any]) -> Grammar:
        """With or without reasoning markers, by the thinking switch."""
        return kimi_k2_grammar(glm_thinking(chat_template_kwargs))

    def emit_name(self, index: int, calls: list[ToolCallDelta], name: str | None) -> None:
        """The header gives the id and the name; a header without them names nothing yet."""
        call_id, tool_name = _id_and_name(name)
        if not tool_name:
            if 0 <= index < len(self.slots):
                self.slots[index].name = ""
            return
        self.slots[index].id = call_id or ""
        super().emit_name(index, calls, tool_name)

    def end_call(self, slot: Slot, event: Event) -> None:
        """A call never named: its header, read now."""
        if not slot.name_sent:
            call_id, tool_name = _id_and_name(slot.name)
            if tool_name:
                slot.id = call_id or ""
                slot.name = tool_name

    def on_args(self, event: Event, calls: list[ToolCallDelta]) -> None:
        """The argument text that carried the name out is sent too."""
        index = event.call
        before = 0 <= index < len(self.slots) and self.slots[index].name_sent
        super().on_args(event, calls)
        if event.value and not before and self.slots[index].name_sent:
            calls.append(ToolCallDelta(index, arguments=event.value))

    def args_json(self, raw: str, name: str) -> str:
        """The raw arguments as written."""
        return raw.strip() or "{}"

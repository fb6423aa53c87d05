"""Inkling's typed content blocks (vLLM 0.32's ``vllm/parser/inkling.py``)::

    <|message_model|><|content_thinking|>…reasoning…<|end_message|>
    <|message_model|><|content_text|>…visible text…<|end_message|>
    <|message_model|><|content_invoke_tool_json|>{"name": "f", "args": {…}}<|end_message|>

Blocks repeat in any order; ``<|content_model_end_sampling|>`` may end one too. A tool block's
JSON names the call and its ``args`` object is the arguments, streamed as written. The text
between ``<|message_model|>`` and a block's kind (a header) is not content. Opening a visible
block or a tool block confirms that reasoning is over; a thinking block's end does not.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from vllm_frontend.chat.engine.calls import EngineToolParser
from vllm_frontend.chat.engine.grammar import Grammar, Kind, State, Step
from vllm_frontend.chat.tools.base import ExtractedToolCalls
from vllm_frontend.chat.tools.granite_array import member_object

__all__ = ["INKLING_TOKENS", "InklingToolParser", "inkling_grammar"]

MESSAGE_MODEL = "<|message_model|>"
CONTENT_TEXT = "<|content_text|>"
CONTENT_THINKING = "<|content_thinking|>"
CONTENT_TOOL_JSON = "<|content_invoke_tool_json|>"
CONTENT_TOOL_TEXT = "<|content_invoke_tool_text|>"
CONTENT_TOOL_ERROR = "<|content_tool_error|>"
END_SAMPLING = "<|content_model_end_sampling|>"
END_MESSAGE = "<|end_message|>"
INKLING_TOKENS = (
    MESSAGE_MODEL,
    CONTENT_TEXT,
    CONTENT_THINKING,
    CONTENT_TOOL_JSON,
    CONTENT_TOOL_TEXT,
    CONTENT_TOOL_ERROR,
    END_SAMPLING,
    END_MESSAGE,
)
"""Inkling's special tokens."""


def inkling_arguments(raw: str, partial: bool) -> str:
    """The ``args`` object of the tool block's JSON, as written (``""`` before it starts while
    streaming, ``{}`` if it never does)."""
    span = member_object(raw, "args")
    if span is None:
        return "" if partial else "{}"
    return span


@functools.cache
def inkling_grammar() -> Grammar:
    """The Inkling grammar (``<|end_message|>`` is the reasoning end marker by name, though it
    ends blocks of every kind)."""
    C, R, H, A = State.CONTENT, State.REASONING, State.MESSAGE_HEADER, State.TOOL_ARGS
    ends_reasoning = (Kind.REASONING_END,)
    opens_call = (Kind.REASONING_END, Kind.CALL_START)
    steps: dict[tuple[State, str], Step] = {
        (C, "MSG_MODEL"): Step(H),
        (H, "MSG_MODEL"): Step(H),
        (R, "THINK_START"): Step(R),
        (R, "TOOL_START"): Step(A, opens_call),
    }
    for state in (C, H):
        steps |= {
            (state, "TEXT_START"): Step(C, ends_reasoning),
            (state, "THINK_START"): Step(R, (Kind.REASONING_START,)),
            (state, "TOOL_START"): Step(A, opens_call),
            (state, "TOOL_TEXT"): Step(C, ends_reasoning),
            (state, "TOOL_ERROR"): Step(C, ends_reasoning),
        }
    for end in ("THINK_END", "END_SAMPLING"):
        steps |= {
            (C, end): Step(C),
            # A thinking block's end leaves the reasoning end to the next block's opener.
            (R, end): Step(C, () if end == "THINK_END" else ends_reasoning),
            (A, end): Step(C, (Kind.CALL_END,)),
            (H, end): Step(C, (Kind.TEXT,)),
        }
    return Grammar(
        name="inkling",
        initial=H,
        wait_for_reasoning=True,
        terminals={
            "MSG_MODEL": MESSAGE_MODEL,
            "TEXT_START": CONTENT_TEXT,
            "THINK_START": CONTENT_THINKING,
            "THINK_END": END_MESSAGE,
            "END_SAMPLING": END_SAMPLING,
            "TOOL_START": CONTENT_TOOL_JSON,
            "TOOL_TEXT": CONTENT_TOOL_TEXT,
            "TOOL_ERROR": CONTENT_TOOL_ERROR,
        },
        steps=steps,
        arg_converter=inkling_arguments,
        strip_content_with_tools=False,
    )


class InklingToolParser(EngineToolParser):
    """``inkling``."""

    name = "inkling"
    GRAMMAR = inkling_grammar()
    optional_tokens = INKLING_TOKENS
    supports_required_and_named = False

    def extract(self, text: str) -> ExtractedToolCalls:
        """See :class:`EngineToolParser`; text blocks after a tool block are content too."""
        found = super().extract(text)
        trailing, self._deferred_content = self._deferred_content, ""
        if trailing:
            found.content = self._strip_content(
                (found.content or "") + trailing, found.tools_called
            )
        return found

    def name_and_args(self, raw: str) -> tuple[Any, str]:
        """The name, and the ``args`` (else ``arguments``, ``parameters``) of the JSON."""
        raw = raw.strip()
        try:
            parsed = json.loads(raw)
        except ValueError:
            return "", raw
        if not isinstance(parsed, dict):
            return "", raw
        name = parsed.get("name", "")
        for key in ("args", "arguments", "parameters"):
            if key in parsed:
                value = parsed[key]
                return name, value if isinstance(value, str) else json.dumps(
                    value, ensure_ascii=False
                )
        rest = {k: v for k, v in parsed.items() if k != "name"}
        return name, json.dumps(rest, ensure_ascii=False)

    def args_json(self, raw: str, name: str) -> str:
        """See :class:`EngineToolParser`."""
        if not raw.strip():
            return "{}"
        return self.name_and_args(raw)[1]

    def start_in(self, state: State) -> None:
        """Read from ``state`` on (the prompt's last block decides it)."""
        self._streaming = True
        self._reset()
        self.machine.reset(state)

"""One choice's output read with the model's response template (``--reasoning-parser hf``,
``--tool-call-parser hf``): vLLM 0.32's ``ResponseTemplateParser``
(``vllm/parser/response_template.py``), with this frontend's output-parser interface.

The prompt (decoded with special tokens, no spaces added) is read first, so that a region the
chat template opened (``<think>``) is known. Then each delta's text goes through the
:class:`~vllm_frontend.chat.response_template.scanner.RegionScanner`:

- ``thinking`` text is reasoning (content when no reasoning parser is configured);
- ``content`` text is content;
- a ``tool_calls`` region is sent as whole calls when it closes and its value is calls with a
  name and arguments (a fresh ``chatcmpl-tool-`` id each, arguments as JSON text); a region
  that fails to parse, or holds an incomplete call, is dropped. A region cut off by the end of
  the output is parsed as it stands. With tool parsing off for the request (``tool_choice``
  ``none``, or no tool parser) the region, delimiters included, is content.

Delimiters themselves are never sent. A whole output is the same reader run at once.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

from vllm_frontend.chat.parsed import (
    OutputDelta,
    ParsedOutput,
    ToolCall,
    ToolCallDelta,
    new_tool_call_id,
)
from vllm_frontend.chat.response_template.scanner import Event, RegionScanner
from vllm_frontend.chat.response_template.serving import CONTENT, THINKING, TOOL_CALLS
from vllm_frontend.chat.response_template.template import ResponseTemplate

__all__ = ["ResponseTemplateOutputParser"]

logger = logging.getLogger(__name__)


def _calls(value: Any) -> list[tuple[str, str]]:
    """``(name, arguments JSON)`` of a tool region's value; nothing when any call is
    incomplete."""
    out: list[tuple[str, str]] = []
    for item in value if isinstance(value, list) else [value]:
        fn = item.get("function") if isinstance(item, dict) else None
        if not isinstance(fn, dict):
            return []
        name, arguments = fn.get("name"), fn.get("arguments")
        if not isinstance(name, str) or not name or arguments is None:
            return []
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        out.append((name, arguments))
    return out


class _Pieces:
    """What one feed adds (vLLM's ``DeltaMessage`` under construction)."""

    __slots__ = ("calls", "content", "reasoning")

    def __init__(self) -> None:
        self.reasoning: list[str] = []
        self.content: list[str] = []
        self.calls: list[ToolCallDelta] = []

    def delta(self) -> OutputDelta | None:
        reasoning, content = "".join(self.reasoning), "".join(self.content)
        if not (reasoning or content or self.calls):
            return None
        return OutputDelta(
            content=content or None, reasoning=reasoning or None, tool_calls=self.calls
        )


class ResponseTemplateOutputParser:
    """Parses one choice with a response template; the interface of
    ``chat.output_parser.OutputParser``."""

    null_later_names = False
    forced_choice = None
    """Forced tool choices are refused with tools (they are never parsed here)."""
    forced = None

    def __init__(
        self,
        template: ResponseTemplate,
        *,
        tools: Sequence[Any],
        parse_reasoning: bool,
        include_reasoning: bool,
        parse_tools: bool,
        tool_calls_in_message: bool,
        decode: Callable[[Sequence[int]], str],
        first_indexed_id: int | None = None,
    ) -> None:
        """``template``: the streaming form (``serving.serving_template``); ``tools``: the
        request's tool dicts (their schemas type string arguments); ``parse_reasoning``: a
        reasoning parser is configured; ``parse_tools``: tool calls are read for this request;
        ``tool_calls_in_message``: a whole output's calls go into the message (``auto``);
        ``decode``: token ids to text with special tokens, as vLLM decodes the prompt;
        ``first_indexed_id``: for a Kimi model, the conversation's tool calls so far (ids are
        then ``functions.NAME:N`` from there; else random ``chatcmpl-tool-`` ids)."""
        self._template = template
        self._tools = list(tools)
        self._parse_reasoning = parse_reasoning
        self._include_reasoning = include_reasoning
        self._parse_tools = parse_tools
        self._in_message = tool_calls_in_message
        self._decode = decode
        self._indexed_id = first_indexed_id
        self._prompt_ids: list[int] | None = None
        self._prefix = ""
        self._scanner: RegionScanner | None = None
        self._prefix_end = 0
        self._next_index = 0
        self._finished = False
        self.tool_calls_streamed = False
        """Whether any tool call has been streamed (finish reason ``tool_calls``)."""

    def set_prompt_token_ids(self, prompt_token_ids: Sequence[int]) -> None:
        """The prompt the output continues (read before the output)."""
        ids = list(prompt_token_ids)
        if ids == self._prompt_ids:
            return
        self._prompt_ids = ids
        self._prefix = self._decode(ids)
        self._scanner = None

    def _start(self) -> RegionScanner:
        scanner = RegionScanner(self._template, self._prefix, self._tools)
        self._prefix_end = len(scanner.input_text)
        self._next_index = 0
        self._finished = False
        return scanner

    def _read(self, scanner: RegionScanner, text: str, finished: bool, reasoning: bool) -> _Pieces:
        pieces = _Pieces()
        if self._finished:
            return pieces
        self._route(scanner, scanner.feed(text), pieces, reasoning)
        if finished:
            self._finished = True
            if len(scanner.input_text) > self._prefix_end:
                _, events = scanner.finalize()
                self._route(scanner, events, pieces, reasoning)
        return pieces

    def _route(
        self, scanner: RegionScanner, events: list[Event], pieces: _Pieces, reasoning: bool
    ) -> None:
        for event in events:
            field = event.get("field")
            if field == TOOL_CALLS:
                self._route_tool(scanner, event, pieces)
            elif event["type"] == "region_chunk":
                if field == THINKING and self._parse_reasoning:
                    if reasoning:
                        pieces.reasoning.append(event["text"])
                elif field in (THINKING, CONTENT):
                    pieces.content.append(event["text"])

    def _route_tool(self, scanner: RegionScanner, event: Event, pieces: _Pieces) -> None:
        kind = event["type"]
        if not self._parse_tools:
            if kind == "region_chunk":
                pieces.content.append(event["text"])
            else:  # the delimiter's text (none of the prompt's)
                start = max(event["start"], self._prefix_end)
                pieces.content.append(scanner.input_text[start : event["end"]])
            return
        if kind == "region_malformed":
            logger.warning("response_template: dropping a malformed tool call")
        elif kind == "region_close":
            calls = _calls(event.get("value"))
            if not calls:
                logger.warning("response_template: dropping an incomplete tool call")
            for name, arguments in calls:
                pieces.calls.append(
                    ToolCallDelta(
                        self._next_index, id=self._new_id(name), name=name, arguments=arguments
                    )
                )
                self._next_index += 1

    def _new_id(self, name: str) -> str:
        # vLLM's make_tool_call_id with the parser's id type; the count lives with the parser.
        if self._indexed_id is None:
            return new_tool_call_id()
        self._indexed_id += 1
        return f"functions.{name}:{self._indexed_id - 1}"

    # -- streaming ---------------------------------------------------------------------------

    def feed(
        self,
        delta_text: str,
        delta_token_ids: Sequence[int],
        prompt_token_ids: Sequence[int] | None,
        *,
        finished: bool,
    ) -> OutputDelta | None:
        """What one engine update adds."""
        if self._prompt_ids is None and prompt_token_ids is not None:
            self.set_prompt_token_ids(prompt_token_ids)
        if self._scanner is None:
            self._scanner = self._start()
        pieces = self._read(self._scanner, delta_text, finished, self._include_reasoning)
        if pieces.calls:
            self.tool_calls_streamed = True
        return pieces.delta()

    def streamed_reasoning_tokens(self) -> int:
        """Reasoning tokens of the streamed output (vLLM's template parser counts none)."""
        return 0

    # -- whole output ------------------------------------------------------------------------

    def parse(self, text: str, token_ids: Sequence[int] = ()) -> ParsedOutput:
        """A finished output read at once (after the prompt given with
        :meth:`set_prompt_token_ids`)."""
        saved = self._finished, self._next_index, self._prefix_end
        pieces = self._read(self._start(), text, True, True)
        self._finished, self._next_index, self._prefix_end = saved
        out = ParsedOutput(
            reasoning="".join(pieces.reasoning) or None, content="".join(pieces.content) or None
        )
        if self._in_message and pieces.calls:
            out.tool_calls = [
                ToolCall(c.id or new_tool_call_id(), c.name or "", c.arguments or "{}")
                for c in pieces.calls
            ]
            out.tools_called = True
        return out

    def count_reasoning_tokens(self, token_ids: Sequence[int]) -> int:
        """Reasoning tokens of a finished output (none, as in vLLM)."""
        return 0

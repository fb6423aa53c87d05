"""gpt-oss output read back through Harmony's channels, as vLLM 0.32's ``HarmonyParser`` does
(``vllm/parser/harmony.py``).

With ``--reasoning-parser openai_gptoss`` and/or ``--tool-call-parser openai`` on a gpt-oss
model, vLLM replaces the usual reasoning-then-tools parser pair with one parser that feeds every
generated token id to Harmony's ``StreamableParser`` and sorts what it reads by channel and
recipient:

- a message to a function recipient (``functions.NAME``, or any other name that is not a
  built-in tool) is a tool call (only with the tool parser configured): streamed as a call
  start (id, ``name``, the text so far as ``arguments``) then argument text; a whole output's
  JSON arguments are re-serialised by ``json.dumps`` (ASCII-escaped) unless its content type is
  not JSON or the text is not JSON;
- ``analysis`` is reasoning (only with the reasoning parser configured);
- ``final``, and ``commentary`` without a recipient, is content;
- anything else is dropped.

Whole outputs use completed messages only; several reasoning or content messages are joined
with newlines. An output that ends inside a message Harmony cannot close is recovered as
content: the decoded ids of that message. Reasoning tokens (``usage``) are the non-special
tokens read on ``analysis``, or on ``commentary`` with a recipient.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from vllm_frontend.chat.harmony_encoding import harmony, harmony_encoding
from vllm_frontend.chat.parsed import (
    OutputDelta,
    ParsedOutput,
    ToolCall,
    ToolCallDelta,
    new_tool_call_id,
)
from vllm_frontend.chat.tool_choice import ForcedToolChoice, forced_tool_choice

__all__ = ["HarmonyOutputParser", "HarmonySegment", "is_function_recipient"]

_BUILTIN_TOOLS = frozenset({"python", "browser", "container"})
_TOOL, _REASONING, _CONTENT, _IGNORE = range(4)


def is_function_recipient(
    recipient: str | None, function_names: frozenset[str] | None = None
) -> bool:
    """Whether a message to ``recipient`` is a function call (vLLM's rule: ``functions.NAME``,
    or a bare name but ``assistant`` and the built-in tools; with ``function_names``, as the
    Responses API asks, a bare name only when it is one of them)."""
    if not recipient or recipient.startswith("<|"):
        return False
    if recipient.startswith("functions."):
        return len(recipient) > len("functions.")
    if recipient == "assistant" or recipient in _BUILTIN_TOOLS:
        return False
    if recipient.split(".", 1)[0] in _BUILTIN_TOOLS:
        return False
    return function_names is None or recipient in function_names


def _kind(channel: str | None, recipient: str | None) -> int:
    if recipient and is_function_recipient(recipient):
        return _TOOL
    if channel == "analysis":
        return _REASONING
    if channel == "final" or (channel == "commentary" and recipient is None):
        return _CONTENT
    return _IGNORE


def _normalize_recipient(recipient: str | None) -> str | None:
    # Older Harmony read ``<|constrain|>`` formats into the recipient: cut them off.
    if recipient is None:
        return None
    cut = recipient.find("<|constrain|>")
    if cut == -1:
        return recipient
    return recipient[:cut].rstrip() or None


class HarmonySegment(NamedTuple):
    """What one output token id did: the channel and recipient after it, the content text it
    added, and the message it completed (a Harmony ``Message``, or None)."""

    channel: str | None
    """The current message's channel."""
    recipient: str | None
    """The current message's recipient (normalised)."""
    delta: str
    """Content text this token added."""
    completed: Any
    """The message this token completed, or None."""


_Segment = HarmonySegment


class _Reader:
    """One ``StreamableParser`` over an output's ids, with the completed messages taken one at
    a time as vLLM polls them (their JSON is only re-read when Harmony completed another)."""

    __slots__ = ("_messages", "_raw_len", "_taken", "parser")

    def __init__(self) -> None:
        h = harmony()
        self.parser = h.StreamableParser(harmony_encoding(), role=h.Role.ASSISTANT)
        self._messages: list[Any] = []
        self._raw_len = 2  # "[]"
        self._taken = 0

    def take_completed(self) -> Any:
        """The next completed message not taken yet (its recipient normalised), or None."""
        if self._taken >= len(self._messages):
            inner = getattr(self.parser, "_inner", None)
            if inner is not None:
                raw = inner.messages
                if len(raw) == self._raw_len:
                    return None
                self._raw_len = len(raw)
                message_cls = harmony().Message
                self._messages = [message_cls.from_dict(m) for m in json.loads(raw)]
            else:  # pragma: no cover - another build of the library
                self._messages = self.parser.messages
            if self._taken >= len(self._messages):
                return None
        message = self._messages[self._taken]
        message.recipient = _normalize_recipient(message.recipient)
        self._taken += 1
        return message


class HarmonyOutputParser:
    """Parses one choice of a gpt-oss output: streamed with :meth:`feed` (token ids), or whole
    with :meth:`parse`; the interface of ``chat.output_parser.OutputParser``."""

    null_later_names = False
    """Later pieces of a streamed call carry no ``name`` key (even for ``"required"``)."""

    def __init__(
        self,
        *,
        reasoning: bool,
        tools: bool,
        tool_choice: Any,
        include_reasoning: bool,
        request_has_tools: bool,
        enable_auto_tools: bool,
        decode: Callable[[Sequence[int]], str],
    ) -> None:
        """``reasoning`` / ``tools``: whether the reasoning / tool parser is configured;
        ``decode`` gives a recovered message's text (the tokenizer's, special tokens kept)."""
        self.reasoning = reasoning
        self.tools = tools
        self.tool_choice = tool_choice
        self.include_reasoning = include_reasoning
        self.request_has_tools = request_has_tools
        self.enable_auto_tools = enable_auto_tools
        self._decode = decode
        self._reader: _Reader | None = None
        self._next_index = 0
        self._counted = 0
        self._reasoning_tokens = 0
        self._message_ids: list[int] = []
        self._is_special = harmony_encoding().is_special_token
        self.flushed = False
        """Whether the last :meth:`segments` call with ``finished`` flushed a segment."""
        self.tool_calls_streamed = False
        """Whether any tool-call piece has been streamed (finish reason ``tool_calls``)."""
        self.forced: ForcedToolChoice | None = forced_tool_choice(tool_choice)
        """``"required"`` or a named function: the whole message always lists the calls."""
        self.forced_choice = self.forced
        """The same (the route reads it as it reads :class:`OutputParser`'s)."""

    @property
    def _r(self) -> _Reader:
        if self._reader is None:
            self._reader = _Reader()
        return self._reader

    # -- reading ids -------------------------------------------------------------------------

    def _read(self, token_ids: Sequence[int]) -> list[_Segment]:
        if not token_ids:
            return []
        error = harmony().HarmonyError
        segments: list[_Segment] = []
        reasoning_tokens = 0
        for token in token_ids:
            reader = self._r
            parser = reader.parser
            try:
                parser.process(token)
            except error:
                continue
            channel = parser.current_channel
            recipient = _normalize_recipient(parser.current_recipient)
            completed = reader.take_completed()
            if completed is not None:
                self._message_ids.clear()
            else:
                self._message_ids.append(token)
            if _is_reasoning_token(channel, recipient) and not self._is_special(token):
                reasoning_tokens += 1
            segments.append(
                _Segment(channel, recipient, parser.last_content_delta or "", completed)
            )
        self._counted += len(token_ids)
        self._reasoning_tokens += reasoning_tokens
        return segments

    def _flush(self) -> list[_Segment]:
        h = harmony()
        segments: list[_Segment] = []
        try:
            self._r.parser.process_eos()
            message = self._r.take_completed()
        except h.HarmonyError:
            # Ended inside a message Harmony cannot close: its ids become final content.
            text = self._decode(self._message_ids)
            segments.append(_Segment("final", None, text, None))
            message = h.Message.from_role_and_content(h.Role.ASSISTANT, text).with_channel("final")
        self._reader = None
        self._message_ids.clear()
        if message is not None:
            segments.append(_Segment(message.channel, message.recipient, "", message))
        return segments

    def segments(self, token_ids: Sequence[int], *, finished: bool) -> list[HarmonySegment]:
        """vLLM's ``process_chunk`` (then ``flush`` when ``finished``): one segment per token
        id read, the flushed ones after (:attr:`flushed` tells whether there were any)."""
        segments = self._read(token_ids)
        self.flushed = False
        if finished:
            flushed = self._flush()
            self.flushed = bool(flushed)
            segments += flushed
        return segments

    # -- streaming ---------------------------------------------------------------------------

    def feed(
        self,
        delta_text: str,
        delta_token_ids: Sequence[int],
        prompt_token_ids: Sequence[int] | None,
        *,
        finished: bool,
    ) -> OutputDelta | None:
        """What one engine update adds (read from its token ids); None when nothing."""
        recipient = _normalize_recipient(self._r.parser.current_recipient)
        segments = self._read(delta_token_ids)
        if finished:
            segments += self._flush()
        content = reasoning = ""
        calls: list[ToolCallDelta] = []
        for segment in segments:
            if segment.completed is not None:
                recipient = None
                continue
            kind = _kind(segment.channel, segment.recipient)
            if kind == _REASONING and self.reasoning:
                reasoning += segment.delta
            elif kind == _CONTENT:
                content += segment.delta
            elif kind == _TOOL and self.tools:
                if recipient != segment.recipient:
                    assert segment.recipient is not None
                    calls.append(
                        ToolCallDelta(
                            self._next_index,
                            id=new_tool_call_id(),
                            name=segment.recipient.removeprefix("functions."),
                            arguments=segment.delta,
                        )
                    )
                    self._next_index += 1
                    recipient = segment.recipient
                elif segment.delta:
                    if calls:
                        calls[-1].arguments = (calls[-1].arguments or "") + segment.delta
                    else:
                        calls.append(ToolCallDelta(self._next_index - 1, arguments=segment.delta))
        if finished:
            self._next_index = 0
        if not content and not reasoning and not calls:
            return None
        if calls:
            self.tool_calls_streamed = True
        if not self.include_reasoning:
            if not content and not calls:
                return None
            return OutputDelta(content=content or None, tool_calls=calls, reasoning_hidden=True)
        return OutputDelta(content=content or None, reasoning=reasoning or None, tool_calls=calls)

    def streamed_reasoning_tokens(self) -> int:
        """Reasoning tokens of the streamed output (``usage.completion_tokens_details``)."""
        return self._reasoning_tokens

    # -- whole output ------------------------------------------------------------------------

    def parse(self, text: str, token_ids: Sequence[int] = ()) -> ParsedOutput:
        """A finished output's reasoning, content and tool calls (read from ``token_ids``)."""
        segments = self._read(token_ids) + self._flush()
        reasoning: list[str] = []
        content: list[str] = []
        calls: list[ToolCall] = []
        for segment in segments:
            message = segment.completed
            if message is None or message.author.role != "assistant" or not message.content:
                continue
            body = message.content[0].text
            kind = _kind(message.channel, message.recipient)
            if kind == _REASONING and self.reasoning and body:
                reasoning.append(body)
            elif kind == _CONTENT and body:
                content.append(body)
            elif kind == _TOOL and self.tools:
                calls.append(
                    ToolCall(
                        new_tool_call_id(),
                        message.recipient.removeprefix("functions."),
                        _arguments(body, message.content_type),
                    )
                )
        out = ParsedOutput(
            reasoning="\n".join(reasoning) or None, content="\n".join(content) or None
        )
        choice = self.tool_choice
        if self.forced is not None:
            out.tool_calls = calls
        elif not self.tools or not self.enable_auto_tools or not choice or choice == "none":
            pass
        elif self.request_has_tools and choice == "auto":
            out.tool_calls = calls
            out.tools_called = bool(calls)
        return out

    def count_reasoning_tokens(self, token_ids: Sequence[int]) -> int:
        """Reasoning tokens of a finished output (what :meth:`parse` read, or a fresh read)."""
        if len(token_ids) == self._counted:
            return self._reasoning_tokens
        h = harmony()
        parser = h.StreamableParser(harmony_encoding(), role=h.Role.ASSISTANT)
        count = 0
        for token in token_ids:
            try:
                parser.process(token)
            except h.HarmonyError:
                continue
            recipient = _normalize_recipient(parser.current_recipient)
            if _is_reasoning_token(parser.current_channel, recipient) and not self._is_special(
                token
            ):
                count += 1
        return count


def _is_reasoning_token(channel: str | None, recipient: str | None) -> bool:
    return channel == "analysis" or (channel == "commentary" and recipient is not None)


def _arguments(text: str, content_type: str | None) -> str:
    if content_type is not None and "json" not in content_type:
        return text
    try:
        return json.dumps(json.loads(text))
    except json.JSONDecodeError:
        return text

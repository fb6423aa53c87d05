"""The Responses API's output for gpt-oss models: Harmony messages as output items, and the
stream events of Harmony segments, as vLLM 0.32 makes them (``responses/harmony.py``
``harmony_to_response_output``, ``streaming_events.py`` and ``HarmonyContext``).

- An assistant message to a function (``functions.NAME``, or a bare name among the request's
  function tools) is a ``function_call`` item per content; to ``browser.*`` a
  ``web_search_call``; to a built-in tool (``python``, ``browser``, ``container``) a
  ``reasoning`` item; to any other recipient an ``mcp_call``. Without a recipient,
  ``analysis`` is a ``reasoning`` item, ``commentary`` and ``final`` a ``message``. The last
  message is ``incomplete`` when the output ended inside it.
- A stream opens an item on its first content delta and closes it when Harmony completes the
  message; the output index moves on with every completed message (even one that streamed
  nothing, as in vLLM). The final response reuses the streamed items' ids.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

from vllm_frontend.chat.harmony_output import HarmonyOutputParser, is_function_recipient

from .errors import BadRequest
from .responses_output import function_call_item, message_item, new_id, output_text, reasoning_item

__all__ = ["HarmonyStream", "HarmonyTurn", "harmony_items"]

_BUILTIN = {"python": "code_interpreter", "browser": "web_search_preview", "container": "container"}


# -- output items ---------------------------------------------------------------------------


def harmony_items(
    message: Any, function_names: frozenset[str], incomplete: bool = False
) -> list[dict[str, Any]]:
    """The output items of one Harmony message (vLLM's ``harmony_to_response_output``)."""
    if message.author.role != "assistant":
        return []
    recipient = message.recipient
    status = "incomplete" if incomplete else "completed"
    if recipient is not None:
        if recipient.startswith("browser."):
            return [] if incomplete else [_web_search_item(message, recipient)]
        if is_function_recipient(recipient, function_names):
            items = []
            for content in message.content:
                rid = uuid.uuid4().hex[:16]
                items.append(
                    function_call_item(
                        f"fc_{rid}", f"call_{rid}", recipient.removeprefix("functions."),
                        content.text, status,
                    )
                )  # fmt: skip
            return items
        if recipient in _BUILTIN:
            return _reasoning_items(message)
        if "." in recipient:
            label, name = recipient.split(".")[0], recipient.split(".")[-1]
        else:
            label = name = recipient
        return [_mcp_item(new_id("mcp"), name, label, c.text, status) for c in message.content]
    if message.channel == "analysis":
        return _reasoning_items(message)
    if message.channel in ("commentary", "final"):
        parts = [output_text(c.text, None) for c in message.content]
        return [message_item(new_id("msg"), parts, status)]
    return []  # (vLLM: a ValueError, "Unknown channel"; see HarmonyTurn.check_channels)


def _reasoning_items(message: Any) -> list[dict[str, Any]]:
    return [reasoning_item(new_id("rs"), c.text, None) for c in message.content]


def _mcp_item(item_id: str, name: str, label: str, arguments: str, status: str) -> dict[str, Any]:
    return {
        "id": item_id,
        "arguments": arguments,
        "name": name,
        "server_label": label,
        "type": "mcp_call",
        "approval_request_id": None,
        "error": None,
        "output": None,
        "status": status,
    }


def _web_search_item(message: Any, recipient: str) -> dict[str, Any]:
    text = message.content[0].text
    try:
        args = json.loads(text)
    except json.JSONDecodeError:
        retry = f"Invalid JSON args, caught and retried: {text}"
        args = {"query": retry, "url": retry, "pattern": retry}
    action: dict[str, Any]
    if recipient == "browser.search":
        action = {"type": "search", "queries": None, "query": f"cursor:{args.get('query', '')}",
                  "sources": None}  # fmt: skip
    elif recipient == "browser.open":
        action = {"type": "open_page", "url": f"cursor:{args.get('url', '')}"}
    elif recipient == "browser.find":
        action = {"pattern": args.get("pattern", ""), "type": "find_in_page",
                  "url": f"cursor:{args.get('url', '')}"}  # fmt: skip
    else:
        raise ValueError(f"Unknown browser action: {recipient}")
    return {"id": new_id("ws"), "action": action, "status": "completed", "type": "web_search_call"}


# -- one generation turn --------------------------------------------------------------------


class HarmonyTurn:
    """vLLM's ``HarmonyContext`` for one engine request: the output read through Harmony, the
    messages it completed, and the token counts of ``usage``."""

    def __init__(
        self,
        parser: HarmonyOutputParser,
        function_names: frozenset[str],
        conversation: list[Any],
    ) -> None:
        """``conversation``: the prompt's Harmony messages; the output's are appended to it
        (vLLM stores that list for ``previous_response_id``)."""
        self.parser = parser
        self.function_names = function_names
        self.conversation = conversation
        self.start = len(conversation)
        """Where the output messages start in :attr:`conversation`."""
        self.prompt_tokens = 0
        self.output_tokens = 0
        self.cached_tokens = 0
        self.cache_writes = 0
        """Prompt tokens the engine wrote to its prefix cache (vLLM's HarmonyContext counts
        them on each turn's first output)."""
        self.finish_reason: str | None = None
        self.flushed = False
        """The output ended inside a message (its last item is ``incomplete``)."""

    def append(
        self, token_ids: Sequence[int], finish_reason: str | None, finished: bool
    ) -> list[Any]:
        """Read one engine update; its segments."""
        segments = self.parser.segments(token_ids, finished=finished)
        self.output_tokens += len(token_ids)
        if finished:
            self.finish_reason = finish_reason
            self.flushed = self.parser.flushed
        self.conversation.extend(s.completed for s in segments if s.completed is not None)
        return segments

    @property
    def messages(self) -> list[Any]:
        """The completed output messages."""
        return self.conversation[self.start :]

    @property
    def reasoning_tokens(self) -> int:
        """Output tokens read on ``analysis`` (or ``commentary`` to a recipient)."""
        return self.parser.streamed_reasoning_tokens()

    def items(self, streamed: Sequence[tuple[Any, list[dict[str, Any]]]] = ()) -> list[Any]:
        """The response's output items; ``streamed`` (message, items sent for it) lends its
        ids (vLLM's ``reuse_streamed_item_ids``)."""
        out: list[Any] = []
        pending = iter(streamed)
        next_streamed = next(pending, None)
        last = len(self.messages) - 1
        for i, message in enumerate(self.messages):
            items = harmony_items(message, self.function_names, i == last and self.flushed)
            if next_streamed is not None and next_streamed[0] is message:
                _reuse_ids(items, next_streamed[1])
                next_streamed = next(pending, None)
            out.extend(items)
        return out

    def check_channels(self) -> None:
        """Refuse the output of a whole (not streamed) response as vLLM does when an assistant
        message without a recipient is on a channel other than ``analysis``, ``commentary`` and
        ``final`` (none included): its ``harmony_to_response_output`` raises "Unknown channel",
        answered as a 400. (A stream sends every event and is then cut off in vLLM; ours
        completes it without that message's items.)"""
        for message in self.messages:
            if (
                message.author.role == "assistant"
                and message.recipient is None
                and message.channel not in ("analysis", "commentary", "final")
            ):
                raise BadRequest(f"Unknown channel: {message.channel}")

    def usage(self) -> dict[str, Any]:
        """``usage`` with one turn's lists."""
        return {
            "input_tokens": self.prompt_tokens,
            "input_tokens_details": {
                "cached_tokens": self.cached_tokens,
                "cache_write_tokens": self.cache_writes,
                "input_tokens_per_turn": [self.prompt_tokens],
                "cached_tokens_per_turn": [self.cached_tokens],
            },
            "output_tokens": self.output_tokens,
            "output_tokens_details": {
                "reasoning_tokens": self.reasoning_tokens,
                "tool_output_tokens": 0,
                "output_tokens_per_turn": [self.output_tokens],
                "tool_output_tokens_per_turn": [0],
            },
            "total_tokens": self.prompt_tokens + self.output_tokens,
        }


def _reuse_ids(items: list[dict[str, Any]], streamed: list[dict[str, Any]]) -> None:
    remaining = list(streamed)
    for item in items:
        for i, sent in enumerate(remaining):
            if sent["type"] != item["type"]:
                continue
            item["id"] = sent["id"]
            if item["type"] == "function_call":
                item["call_id"] = sent["call_id"]
            del remaining[i]
            break


# -- stream events --------------------------------------------------------------------------


def _event(kind: str, **fields: Any) -> dict[str, Any]:
    return {**fields, "sequence_number": -1, "type": kind}


class HarmonyStream:
    """vLLM's Harmony ``StreamingState`` and event emitters: the events of each segment."""

    def __init__(self, function_names: frozenset[str]) -> None:
        self.function_names = function_names
        self.content_index = -1
        self.output_index = 0
        self.item_id = ""
        self.call_id = ""
        self.added = False
        self.call_started = False
        self.streamed: list[tuple[Any, list[dict[str, Any]]]] = []
        """Each completed message with the items its ``output_item.done`` events carried."""

    def feed(self, segment: Any) -> list[dict[str, Any]]:
        """The events of one segment (a content delta, or a completed message)."""
        if segment.delta:
            return self._delta(segment)
        message = segment.completed
        if message is None:
            return []
        events = self._done(message)
        self.streamed.append(
            (message, [e["item"] for e in events if e["type"] == "response.output_item.done"])
        )
        self.output_index += 1
        self.content_index = -1
        self.added = False
        self.call_started = False
        self.call_id = ""
        return events

    # -- deltas

    def _delta(self, segment: Any) -> list[dict[str, Any]]:
        delta, channel, recipient = segment.delta, segment.channel, segment.recipient
        if channel in ("final", "commentary") and recipient is None:
            return self._text_delta(delta)
        if channel == "analysis" and recipient is None:
            return self._reasoning_delta(delta)
        if recipient is None:
            return []
        if is_function_recipient(recipient, self.function_names):
            return self._call_delta(delta, recipient.removeprefix("functions."))
        if recipient == "python":
            return self._code_delta(delta)
        return self._mcp_delta(delta, recipient)

    def _open(self, item: dict[str, Any], *more: dict[str, Any]) -> list[Any]:
        self.added = True
        return [
            _event("response.output_item.added", output_index=self.output_index, item=item),
            *more,
        ]

    def _text_delta(self, delta: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if not self.added:
            self.item_id = new_id("msg")
            events += self._open(message_item(self.item_id, [], "in_progress"))
            self.content_index += 1
            events.append(self._part_added(output_text("", [])))
        events.append(
            _event(
                "response.output_text.delta", content_index=self.content_index, delta=delta,
                item_id=self.item_id, logprobs=[], output_index=self.output_index,
            )
        )  # fmt: skip
        return events

    def _reasoning_delta(self, delta: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if not self.added:
            self.item_id = new_id("rs")
            events += self._open(reasoning_item(self.item_id, None, "in_progress"))
            self.content_index += 1
            events.append(self._part_added({"text": "", "type": "reasoning_text"}))
        events.append(
            _event(
                "response.reasoning_text.delta", content_index=self.content_index, delta=delta,
                item_id=self.item_id, output_index=self.output_index,
            )
        )  # fmt: skip
        return events

    def _call_delta(self, delta: str, name: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if not self.call_started:
            self.call_started = True
            self.item_id = new_id("fc")
            self.call_id = new_id("call")
            item = function_call_item(self.item_id, self.call_id, name, "", "in_progress")
            events.append(
                _event("response.output_item.added", output_index=self.output_index, item=item)
            )
        events.append(
            _event(
                "response.function_call_arguments.delta", delta=delta, item_id=self.item_id,
                output_index=self.output_index,
            )
        )  # fmt: skip
        return events

    def _code_delta(self, delta: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if not self.added:
            self.item_id = new_id("tool")
            item = _code_item(self.item_id, None, None, "in_progress")
            events += self._open(
                item,
                _event("response.code_interpreter_call.in_progress",
                       output_index=self.output_index, item_id=self.item_id),
            )  # fmt: skip
        events.append(
            _event(
                "response.code_interpreter_call_code.delta", delta=delta, item_id=self.item_id,
                output_index=self.output_index,
            )
        )  # fmt: skip
        return events

    def _mcp_delta(self, delta: str, recipient: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if not self.added:
            self.item_id = new_id("mcp")
            name, label = _mcp_name_label(recipient)
            events += self._open(
                _mcp_item(self.item_id, name, label, "", "in_progress"),
                _event("response.mcp_call.in_progress", output_index=self.output_index,
                       item_id=self.item_id),
            )  # fmt: skip
        events.append(
            _event(
                "response.mcp_call_arguments.delta", delta=delta, item_id=self.item_id,
                output_index=self.output_index,
            )
        )  # fmt: skip
        return events

    def _part_added(self, part: dict[str, Any]) -> dict[str, Any]:
        return _event(
            "response.content_part.added", content_index=self.content_index,
            item_id=self.item_id, output_index=self.output_index, part=part,
        )  # fmt: skip

    # -- done

    def _done(self, message: Any) -> list[dict[str, Any]]:
        if not self.added and not self.call_started:
            return []  # (vLLM: nothing was opened for a message without content)
        text = message.content[0].text
        recipient = message.recipient
        index, item_id = self.output_index, self.item_id
        if recipient is not None:
            if is_function_recipient(recipient, self.function_names):
                name = recipient.removeprefix("functions.")
                item = function_call_item(item_id, self.call_id, name, text, "completed")
                item["output_index"] = index  # (vLLM passes these to the item too)
                item["sequence_number"] = -1
                return [
                    _event("response.function_call_arguments.done", arguments=text,
                           item_id=item_id, name=name, output_index=index),
                    _event("response.output_item.done", item=item, output_index=index),
                ]  # fmt: skip
            if recipient == "python":
                return [
                    _event("response.code_interpreter_call_code.done", code=text,
                           item_id=item_id, output_index=index),
                    _event("response.code_interpreter_call.interpreting", item_id=item_id,
                           output_index=index),
                    _event("response.code_interpreter_call.completed", item_id=item_id,
                           output_index=index),
                    _event("response.output_item.done", output_index=index,
                           item=_code_item(item_id, text, [], "completed")),
                ]  # fmt: skip
            if item_id.startswith("mcp_"):
                name, label = _mcp_name_label(recipient)
                return [
                    _event("response.mcp_call_arguments.done", arguments=text, item_id=item_id,
                           name=name, output_index=index),
                    _event("response.mcp_call.completed", item_id=item_id, output_index=index),
                    _event("response.output_item.done", output_index=index,
                           item=_mcp_item(item_id, name, label, text, "completed")),
                ]  # fmt: skip
            return []
        if message.channel == "analysis":
            part = {"text": text, "type": "reasoning_text"}
            return [
                _event("response.reasoning_text.done", content_index=self.content_index,
                       item_id=item_id, output_index=index, text=text),
                _event("response.content_part.done", content_index=self.content_index,
                       item_id=item_id, output_index=index, part=part),
                _event("response.output_item.done", output_index=index,
                       item=reasoning_item(item_id, text, "completed")),
            ]  # fmt: skip
        if message.channel in ("commentary", "final"):
            part = output_text(text, None)
            return [
                _event("response.output_text.done", content_index=self.content_index,
                       item_id=item_id, logprobs=[], output_index=index, text=text),
                _event("response.content_part.done", content_index=self.content_index,
                       item_id=item_id, output_index=index, part=part),
                _event("response.output_item.done", output_index=index,
                       item=message_item(item_id, [part], "completed")),
            ]  # fmt: skip
        return []


def _code_item(item_id: str, code: str | None, outputs: Any, status: str) -> dict[str, Any]:
    return {
        "id": item_id,
        "code": code,
        "container_id": "auto",
        "outputs": outputs,
        "status": status,
        "type": "code_interpreter_call",
    }


def _mcp_name_label(recipient: str) -> tuple[str, str]:
    if recipient.startswith("mcp."):
        name = recipient[len("mcp.") :]
        return name, name
    return recipient, _BUILTIN.get(recipient, recipient)

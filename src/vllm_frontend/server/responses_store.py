"""The in-memory store of the Responses API: stored responses, their conversations, the event
logs of background streams and the background tasks (vLLM 0.32's ``response_store``,
``msg_store``, ``event_store`` and ``background_tasks``).

vLLM keeps every stored response forever (its code says so: a known leak), and the conversation
of every ``store`` request, also of one never stored (its client left, its generation failed).
Here the store is bounded: past ``max_entries`` responses the oldest finished ones are forgotten
(with their conversation and events); responses still queued or in progress are kept; and past
``max_entries`` conversations whose response is not stored yet, the oldest are forgotten.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import OrderedDict
from collections.abc import AsyncIterator, Coroutine
from typing import Any

__all__ = ["DEFAULT_MAX_ENTRIES", "ResponseStore", "StoredStream", "store_from_env"]

DEFAULT_MAX_ENTRIES = 10_000
"""How many responses the store keeps by default (``VLLM_FRONTEND_RESPONSES_STORE_MAX``)."""


class StoredStream:
    """The events of one background stream, replayable from any point while it runs."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.closed = False
        self.error: BaseException | None = None
        """Why the generation stopped before its last event (the engine died): replays end
        by raising it, so their connections are cut as a direct stream's is."""
        self._changed = asyncio.Event()

    def append(self, event: dict[str, Any]) -> None:
        """Log one event and wake the readers."""
        self.events.append(event)
        self._changed.set()

    def close(self, error: BaseException | None = None) -> None:
        """No more events (``error``: the generation failed)."""
        self.closed = True
        self.error = error
        self._changed.set()

    async def replay(self, starting_after: int | None) -> AsyncIterator[dict[str, Any]]:
        """The events after index ``starting_after`` (all when None), then each new one,
        until ``response.completed`` (or the stream ends)."""
        index = 0 if starting_after is None else starting_after + 1
        while True:
            self._changed.clear()
            while index < len(self.events):
                event = self.events[index]
                yield event
                if event.get("type") == "response.completed":
                    return
                index += 1
            if self.closed:
                if self.error is not None:
                    raise self.error
                return
            await self._changed.wait()


class ResponseStore:
    """Stored responses by id (JSON dicts, updated in place), bounded to ``max_entries``."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self._responses: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._messages: dict[str, list[dict[str, Any]]] = {}
        self._unanswered: OrderedDict[str, None] = OrderedDict()
        """Ids of conversations kept before their response is stored, oldest first."""
        self._streams: dict[str, StoredStream] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def get(self, response_id: str) -> dict[str, Any] | None:
        """The stored response, or None."""
        return self._responses.get(response_id)

    def put(self, response: dict[str, Any]) -> None:
        """Store (or replace) a response."""
        self._responses[response["id"]] = response
        self._responses.move_to_end(response["id"])
        self._unanswered.pop(response["id"], None)
        self._evict()

    def put_final(self, response: dict[str, Any]) -> None:
        """Store a finished response unless it was cancelled meanwhile (as vLLM)."""
        stored = self._responses.get(response["id"])
        if stored is None or stored["status"] != "cancelled":
            self.put(response)

    def messages(self, response_id: str) -> list[dict[str, Any]] | None:
        """The conversation a stored response answered (its input messages: chat messages,
        copied; for gpt-oss its Harmony messages, the output's included)."""
        messages = self._messages.get(response_id)
        if messages is None:
            return None
        return [dict(m) if isinstance(m, dict) else m for m in messages]

    def put_messages(self, response_id: str, messages: list[dict[str, Any]]) -> None:
        """Keep the conversation of a stored response (or of one to be stored: of those, past
        ``max_entries`` the oldest are forgotten, their requests having ended unstored)."""
        self._messages[response_id] = messages
        if response_id in self._responses:
            return
        self._unanswered[response_id] = None
        self._unanswered.move_to_end(response_id)
        if len(self._unanswered) > self.max_entries:
            oldest, _ = self._unanswered.popitem(last=False)
            self._messages.pop(oldest, None)

    def open_stream(self, response_id: str) -> StoredStream:
        """A new event log for a background stream."""
        stream = self._streams[response_id] = StoredStream()
        return stream

    def stream(self, response_id: str) -> StoredStream | None:
        """A background stream's event log, or None."""
        return self._streams.get(response_id)

    def run(self, response_id: str, work: Coroutine[Any, Any, None]) -> None:
        """Run a background request (forgotten once done)."""
        task = asyncio.get_running_loop().create_task(work, name=f"create_{response_id}")
        self._tasks[response_id] = task
        task.add_done_callback(lambda _: self._tasks.pop(response_id, None))

    def mark_failed(self, response_id: str) -> None:
        """A background request ended without its final response: ``failed`` (as vLLM marks
        a background request whose generation returned an error), unless it was cancelled."""
        stored = self._responses.get(response_id)
        if stored is not None and stored["status"] in ("queued", "in_progress"):
            stored["status"] = "failed"

    async def cancel_task(self, response_id: str) -> None:
        """Cancel a background request and wait for it to end."""
        task = self._tasks.get(response_id)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _evict(self) -> None:
        excess = len(self._responses) - self.max_entries
        if excess <= 0:
            return
        for response_id in list(self._responses):
            if excess <= 0:
                break
            if self._responses[response_id]["status"] in ("queued", "in_progress"):
                continue
            del self._responses[response_id]
            self._messages.pop(response_id, None)
            self._streams.pop(response_id, None)
            excess -= 1


def store_from_env() -> ResponseStore | None:
    """The store when ``VLLM_ENABLE_RESPONSES_API_STORE`` is on (read as vLLM reads it: an
    integer, non-zero for on), else None (``store`` is then ignored, as in vLLM)."""
    value = os.environ.get("VLLM_ENABLE_RESPONSES_API_STORE", "0")
    if not int(value):
        return None
    return ResponseStore(
        int(os.environ.get("VLLM_FRONTEND_RESPONSES_STORE_MAX", str(DEFAULT_MAX_ENTRIES)))
    )

"""An engine-client stand-in over the engine client's real per-request streams.

Tests and the pipeline benchmark play the engine without sockets: a subclass keeps what each
request still has to produce in ``live`` and hands its outputs over the way the client's read
loop does, ``state.put(output)`` for a running one and ``state.finish(output)`` for the last.
Everything above the streams (push notifications, ``take``, the token lane, aborts) is the
frontend's own code.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from vllm_frontend.engine.streams import Notifier, RequestState, RequestStream


class StreamClient:
    """Request streams of the real engine-client kind; a subclass scripts their outputs."""

    def __init__(self) -> None:
        self.live: dict[str, Any] = {}
        """Running request id -> the subclass's script state (its stream state first)."""
        self.loop = asyncio.get_running_loop()
        """The event loop the streams run on."""
        self._notifier = Notifier(self.loop)

    def open_stream(self, request_id: str) -> tuple[RequestState, RequestStream]:
        """A new request's stream state (to put outputs into) and its stream (to return)."""
        state = RequestState(request_id, 0, self._notifier)
        return state, RequestStream(self, state)

    def abort_state(self, state: RequestState) -> None:
        """Forget the request of ``state`` (its consumer went away)."""
        self.live.pop(state.request_id, None)

    def abort_later(self, request_id: str) -> None:
        """Forget ``request_id`` (its stream was dropped unfinished)."""
        self.live.pop(request_id, None)

    def abort_requests(self, request_ids: Sequence[str]) -> int:
        """Forget the requests (the engine stops producing for them)."""
        for rid in request_ids:
            self.live.pop(rid, None)
        return len(request_ids)

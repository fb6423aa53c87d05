"""Per-request output streams: how one request's engine outputs reach whoever consumes them.

The engine client keeps a :class:`RequestState` per live request and hands it each output as it
reads it; the consumer holds the :class:`RequestStream` over that state and either pulls (``async
for``, :meth:`RequestStream.next_batch`) or is pushed to (:meth:`RequestStream.on_ready` with
:meth:`RequestStream.take`, :meth:`RequestStream.on_output`). A :class:`Notifier` batches the push
announcements: one loop callback per iteration for every stream that changed, no task, future or
queue per output.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Protocol

from vllm_frontend.engine.protocol import EngineCoreOutput, FinishReason

__all__ = ["Notifier", "RequestState", "RequestStream", "StreamOwner"]

logger = logging.getLogger(__name__)


class StreamOwner(Protocol):
    """What a stream needs from the client that feeds it."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop the client runs on (pulling consumers wait on futures of it)."""
        ...

    def abort_state(self, state: RequestState) -> None:
        """Abort the request of ``state`` now, if it is still live."""
        ...

    def abort_later(self, request_id: str) -> None:
        """Abort ``request_id`` from the event loop soon (safe to call from ``__del__``)."""
        ...


class RequestState:
    """The client's side of a stream: a tiny single-consumer queue (cheaper than asyncio.Queue).

    The client holds this, not the public stream, so an abandoned stream can be collected. A
    consumer either awaits a waiter future (pull) or registers a ``notify`` callback (push), which
    the client calls once per batch of engine messages that reached this stream. A push consumer
    may also register ``direct``, offered each running output as it is read (see ``put``).
    """

    __slots__ = (
        "direct",
        "done",
        "engine_index",
        "error",
        "finish_reason",
        "items",
        "notifier",
        "notify",
        "request_id",
        "served_by",
        "waiter",
    )

    def __init__(self, request_id: str, engine_index: int, notifier: Notifier) -> None:
        self.request_id = request_id
        self.engine_index = engine_index
        # A list swapped out whole by take() (no copy); __anext__ pops from the front, which
        # for the few outputs a pulling consumer has queued costs less than a deque here.
        self.items: list[EngineCoreOutput] = []
        self.waiter: asyncio.Future[None] | None = None
        self.notify: Callable[[], None] | None = None
        self.direct: Callable[[EngineCoreOutput], bool] | None = None
        self.notifier = notifier
        self.done = False  # nothing more will be queued
        self.error: BaseException | None = None
        self.finish_reason: FinishReason | None = None
        self.served_by: int | None = None  # engine_index of the message with the final output

    def push(self, output: EngineCoreOutput) -> None:
        """Queue ``output`` and wake the consumer."""
        self.items.append(output)
        self._wake()

    def put(self, output: EngineCoreOutput) -> None:
        """Hand over a running (unfinished) output: to ``direct`` when nothing is queued before
        it and it takes the output, else to the queue. Dropped once the stream has failed."""
        if self.done:
            return  # failed (its handler raised): later outputs must not hide the error
        direct = self.direct
        if direct is not None and not self.items:
            try:
                if direct(output):
                    return
            except Exception as e:  # a broken consumer: the request fails rather than the loop
                self.direct_failed(e)
                return
        self.items.append(output)
        self._wake()

    def queue(self, output: EngineCoreOutput) -> None:
        """The end of :meth:`put` once ``direct`` has declined ``output``: queue it and wake
        the consumer (the output router offers a running output to ``direct`` itself)."""
        self.items.append(output)
        self._wake()

    def direct_failed(self, error: Exception) -> None:
        """``direct`` raised ``error``: the request fails (not the loop), and ``direct`` is
        dropped."""
        logger.exception("request output handler failed", exc_info=error)
        self.direct = None
        self.fail(error)

    def finish(self, output: EngineCoreOutput) -> None:
        """Queue the final ``output`` (it carries the finish reason); nothing follows it.
        Dropped once the stream has failed."""
        if self.done:
            return
        self.done = True
        self.finish_reason = output.finish_reason
        self.push(output)

    def fail(self, error: BaseException) -> None:
        """End the stream with ``error`` (raised once to the consumer), unless it has ended."""
        if self.done:
            return
        self.done = True
        self.error = error
        self._wake()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():
                waiter.set_result(None)
        elif self.notify is not None:
            self.notifier.add(self)


class Notifier:
    """Calls push consumers' callbacks once per loop iteration, for every stream that changed.

    One engine message reaches many streams: instead of a task wake-up per stream, one callback
    per iteration runs each stream's consumer directly, after the output loop has handed out
    everything it read (so a consumer that fell behind sees several steps at once).
    """

    __slots__ = ("_loop", "_scheduled", "_states")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._states: dict[int, RequestState] = {}
        self._scheduled = False

    def add(self, state: RequestState) -> None:
        """Announce ``state`` to its consumer in this loop iteration's callback."""
        self._states[id(state)] = state
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._run)

    def _run(self) -> None:
        self._scheduled = False
        states, self._states = self._states, {}
        for state in states.values():
            notify = state.notify
            if notify is None:
                continue
            try:
                notify()
            except Exception:  # one broken consumer must not hold back the others
                logger.exception("request output callback failed")


class RequestStream:
    """The outputs of one request, in order; iterate with ``async for``.

    The iterator ends exactly once: after the output with a finish reason (a synthesized ABORT
    output for aborts), or by raising EngineDeadError. Stopping early (``aclose()``, leaving
    ``async with``, the consuming task being cancelled while it waits, or dropping the stream
    unfinished) aborts the request on its engine.
    """

    __slots__ = ("_owner", "_state")

    def __init__(self, owner: StreamOwner, state: RequestState) -> None:
        self._owner = owner
        self._state = state

    @property
    def request_id(self) -> str:
        """The engine request id."""
        return self._state.request_id

    @property
    def engine_index(self) -> int:
        """The engine serving this request."""
        return self._state.engine_index

    @property
    def finish_reason(self) -> FinishReason | None:
        """The final output's finish reason once it is queued (None while running or failed)."""
        return self._state.finish_reason

    @property
    def served_by(self) -> int | None:
        """The engine that reported the final output (None before it, or for local aborts)."""
        return self._state.served_by

    @property
    def finished(self) -> bool:
        """True once the stream will produce nothing more (finished, aborted or failed)."""
        return self._state.done

    def __aiter__(self) -> RequestStream:
        return self

    async def __anext__(self) -> EngineCoreOutput:
        state = self._state
        while True:
            if state.items:
                return state.items.pop(0)
            if state.done:
                self._raise_failure()
                raise StopAsyncIteration
            await self._wait()

    async def next_batch(self) -> list[EngineCoreOutput]:
        """Every output queued since the last call, in order; ``[]`` once the stream has ended.

        Waits only when nothing is queued. A consumer that falls behind the engine gets the
        outputs of several engine steps at once and can handle them as one update, as vLLM's
        frontend merges the outputs a slow consumer has not collected yet.
        """
        state = self._state
        while not state.items and not state.done:
            await self._wait()
        return self.take()

    def _raise_failure(self) -> None:
        # A stream that ended by failing raises its error once, then ends normally.
        error = self._state.error
        if error is not None:
            self._state.error = None
            raise error

    def take(self) -> list[EngineCoreOutput]:
        """Every output queued now, in order, without waiting (``[]`` if none).

        Raises the stream's failure once, like :meth:`next_batch`. With :meth:`on_ready` this is
        the push-style way to consume: no task wakes up per engine step.
        """
        state = self._state
        batch = state.items
        if batch:
            state.items = []
            if state.error is not None:
                # Failed behind these outputs: announce the stream again, so that a consumer
                # which keeps them to itself (FINAL_ONLY) comes back and meets the failure.
                state._wake()
            return batch
        if state.done:
            self._raise_failure()
        return []

    def on_ready(self, callback: Callable[[], None] | None) -> None:
        """Call ``callback()`` from the event loop whenever outputs were queued or the stream
        ended (at most once per loop iteration); then :meth:`take` them. None unregisters.

        The callback must not raise (errors are logged) and must not block. Outputs queued
        before registering are not announced: take them right after registering.
        """
        self._state.notify = callback

    def on_output(self, handler: Callable[[EngineCoreOutput], bool] | None) -> None:
        """Offer ``handler`` each running output (not the final one) as the client reads it,
        while nothing is queued for this stream; it returns True when it consumed the output,
        False to have it queued and announced as usual. It must not block; an exception fails
        the request. For a push consumer (:meth:`on_ready`) that can handle the common output
        on the spot, without waiting for the announcement. None unregisters.
        """
        self._state.direct = handler

    async def _wait(self) -> None:
        # Until an output is queued or the stream ends. Being cancelled while waiting (the
        # consumer went away) aborts the request. The owner's loop, not get_running_loop():
        # on 3.11 that costs a getpid() call.
        state = self._state
        waiter = self._owner.loop.create_future()
        state.waiter = waiter
        try:
            await waiter
        except asyncio.CancelledError:
            state.waiter = None
            self._owner.abort_state(state)
            raise

    async def aclose(self) -> None:
        """Stop consuming: abort the request if it has not finished."""
        self._owner.abort_state(self._state)
        self._state.items.clear()

    async def __aenter__(self) -> RequestStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __del__(self) -> None:
        if not self._state.done:
            with contextlib.suppress(Exception):
                self._owner.abort_later(self._state.request_id)

"""Event trace of the short rows' turnaround, for ``bench/turnaround.py`` (not for serving).

Put this folder on ``PYTHONPATH`` with ``TURNAROUND_TRACE_DIR`` set: every process of ours that
starts with it (``bench/run.py`` passes its environment on) records, when it is the mock engine
or our frontend, timestamped events (``time.perf_counter()``, CLOCK_MONOTONIC on Linux, so the
processes' clocks agree) and a daemon thread appends them to ``<dir>/<role>-<pid>.trace`` as
marshal chunks every 0.25 s. Events (a tuple each, kind first):

mock engine
    ``("A", t, request_id)`` an ADD handed to the core; ``("S", start, end, in_flight,
    running_after, steps)`` a step (``in_flight``: running and waiting before it); ``("O",
    start, end, messages)`` outputs sent.
frontend
    ``("D", t, messages)`` engine outputs read off the socket; ``("W", start, end, bytes,
    connection)`` an HTTP response written; ``("R", t, bytes, connection)`` HTTP request bytes
    read; ``("C", t)`` a request handed to the input socket's burst (``Outbox.send``); ``("P",
    start, end, messages)`` requests written to the engine socket; ``("N", t, streams)`` the
    Notifier's callback runs the consumers of the streams that changed.

Python imports only the first ``sitecustomize`` on ``sys.path``, so this one replaces any other.
"""

from __future__ import annotations

import marshal
import os
import threading
import time
from typing import Any

_EVENTS: list[tuple[Any, ...]] = []


def _role() -> str | None:
    """The role of a process traced here, "mock" or "frontend" (by its command line), else None."""
    with open("/proc/self/cmdline", "rb") as f:
        args = f.read().split(b"\0")
    if b"mock-engine" in args:
        return "mock"
    ours = any(a.endswith((b"vllm-frontend", b"vllm_frontend")) for a in args)
    return "frontend" if ours and b"serve" in args else None


def _flush_forever(path: str) -> None:
    with open(path, "ab") as out:
        while True:
            time.sleep(0.25)
            n = len(_EVENTS)
            if n:
                chunk = _EVENTS[:n]
                del _EVENTS[:n]
                marshal.dump(chunk, out)
                out.flush()


def _trace_mock() -> None:
    from vllm_frontend.mock import core, engine

    add, step, send = core.MockEngineCore.add, core.MockEngineCore.step, engine.MockEngine._send
    clock, record = time.perf_counter, _EVENTS.append

    def traced_add(self: Any, req: Any) -> None:
        record(("A", clock(), req.request_id))
        add(self, req)

    def traced_step(self: Any) -> Any:
        in_flight = self.num_running + self.num_waiting
        start = clock()
        out = step(self)
        record(("S", start, clock(), in_flight, self.num_running, self.steps))
        return out

    def traced_send(self: Any, messages: Any) -> None:
        start = clock()
        send(self, messages)
        record(("O", start, clock(), len(messages)))

    core.MockEngineCore.add = traced_add  # type: ignore[method-assign]
    core.MockEngineCore.step = traced_step  # type: ignore[method-assign]
    engine.MockEngine._send = traced_send  # type: ignore[method-assign]


def _trace_frontend() -> None:
    from vllm_frontend.engine import outbox, streams, zmtp_sockets
    from vllm_frontend.server.transport import reader, writer

    pull = zmtp_sockets.ZmtpPull._deliver
    send_parts = zmtp_sockets.ZmtpRouter.send_parts
    send_many = zmtp_sockets.ZmtpRouter.send_many
    burst = outbox.Outbox.send
    notify = streams.Notifier._run
    write = writer.ResponseWriter._write
    received = reader.RequestReader.data_received
    clock, record = time.perf_counter, _EVENTS.append

    def traced_deliver(self: Any, conn: Any, messages: Any) -> None:
        record(("D", clock(), len(messages)))
        pull(self, conn, messages)

    def traced_send_parts(self: Any, parts: Any) -> None:
        start = clock()
        send_parts(self, parts)
        record(("P", start, clock(), 1))

    def traced_send_many(self: Any, messages: Any) -> None:
        start = clock()
        send_many(self, messages)
        record(("P", start, clock(), len(messages)))

    def traced_burst(self: Any, parts: Any) -> None:
        record(("C", clock()))
        burst(self, parts)

    def traced_notify(self: Any) -> None:
        record(("N", clock(), len(self._states)))
        notify(self)

    def traced_write(self: Any, transport: Any, data: bytes) -> None:
        start = clock()
        write(self, transport, data)
        record(("W", start, clock(), len(data), id(self)))

    def traced_received(self: Any, data: bytes) -> None:
        record(("R", clock(), len(data), id(self)))
        received(self, data)

    zmtp_sockets.ZmtpPull._deliver = traced_deliver  # type: ignore[method-assign]
    zmtp_sockets.ZmtpRouter.send_parts = traced_send_parts  # type: ignore[method-assign]
    zmtp_sockets.ZmtpRouter.send_many = traced_send_many  # type: ignore[method-assign]
    outbox.Outbox.send = traced_burst  # type: ignore[method-assign]
    streams.Notifier._run = traced_notify  # type: ignore[method-assign]
    writer.ResponseWriter._write = traced_write  # type: ignore[method-assign]
    reader.RequestReader.data_received = traced_received  # type: ignore[method-assign]


def _install(directory: str) -> None:
    role = _role()
    if role is None:
        return
    if role == "mock":
        _trace_mock()
    else:
        _trace_frontend()
    path = os.path.join(directory, f"{role}-{os.getpid()}.trace")
    threading.Thread(target=_flush_forever, args=(path,), daemon=True).start()


if os.environ.get("TURNAROUND_TRACE_DIR"):
    _install(os.environ["TURNAROUND_TRACE_DIR"])

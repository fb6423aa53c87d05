"""``/metrics`` of the whole server when ``--api-server-count N`` runs N frontend processes.

A scrape lands on whichever process accepts its connection. That process asks its siblings for
their own expositions over private Unix sockets (``<directory>/metrics-<index>.sock``; the
directory is made by the supervisor, mode 0700) and answers with the merge
(:func:`~vllm_frontend.metrics.merge.merge_expositions`); the rest of the ``/metrics`` mount
(format negotiation, gzip) answers with the merge too, read back into families
(:func:`~vllm_frontend.metrics.text_parse.parse_text`). Nothing happens per request or per
token: the series stay each process's in-memory ones, and the work is done per scrape.

A sibling that does not answer within :data:`SIBLING_TIMEOUT_S` (dead, not serving yet, or
stalled) does not fail the scrape: its last snapshot is used if it ever sent one (counters then
never appear to go backwards), else it is left out; the first failure is logged as a warning and
the recovery as info.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Mapping

import msgspec

from vllm_frontend.metrics.merge import MetricsSnapshot, merge_expositions
from vllm_frontend.metrics.text_parse import parse_text

from .metrics_route import METRICS_PREFIX, negotiated_page
from .transport import AnyResponse, App, Request, Response, StreamingResponse

__all__ = ["SIBLING_TIMEOUT_S", "SiblingMetrics", "snapshot_path"]

logger = logging.getLogger(__name__)

SIBLING_TIMEOUT_S = 1.0
"""How long a scrape waits for the siblings' snapshots (all at once) before answering without
the late ones."""

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(MetricsSnapshot)


def snapshot_path(directory: str, index: int) -> str:
    """The Unix socket where API server ``index`` hands out its own metrics snapshot."""
    return os.path.join(directory, f"metrics-{index}.sock")


class SiblingMetrics:
    """Serves this process's snapshot to its siblings and merges theirs into ``/metrics``."""

    def __init__(
        self,
        directory: str,
        index: int,
        count: int,
        timeout_s: float = SIBLING_TIMEOUT_S,
    ) -> None:
        """API server ``index`` of ``count``, its socket in ``directory``."""
        self._directory = directory
        self._index = index
        self._siblings = [i for i in range(count) if i != index]
        self._stats_times: Callable[[], Mapping[str, float]] = dict
        self._timeout_s = timeout_s
        self._app: App | None = None
        self._server: asyncio.AbstractServer | None = None
        self._last: dict[int, tuple[MetricsSnapshot, float]] = {}
        self._failing: set[int] = set()

    async def start(self, app: App, stats_times: Callable[[], Mapping[str, float]] = dict) -> None:
        """Listen for siblings on this process's socket; ``app`` renders its own ``/metrics``,
        ``stats_times()`` gives, per ``engine`` label, when that engine made the stats this
        process holds."""
        self._app = app
        self._stats_times = stats_times
        path = snapshot_path(self._directory, self._index)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(path)
        except OSError:
            sock.close()
            raise
        self._server = await asyncio.start_unix_server(self._serve_snapshot, sock=sock)

    async def close(self) -> None:
        """Stop answering siblings (harmless when never started)."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        with contextlib.suppress(OSError):
            os.unlink(snapshot_path(self._directory, self._index))

    def wrap(self, app: App) -> App:
        """``app`` with ``/metrics`` (and its mount) answered for all processes (everything
        else, and the local part of ``/metrics`` with its middleware, still goes through
        ``app``)."""

        def dispatch(request: Request) -> Awaitable[AnyResponse]:
            if request.path == METRICS_PREFIX and request.method == "GET":
                return self._scrape(app, request)
            if request.path.startswith(METRICS_PREFIX) and request.method != "OPTIONS":
                return self._scrape_mount(app, request)
            return app(request)

        return dispatch

    async def _scrape(self, app: App, request: Request) -> AnyResponse:
        response = await app(request)
        if not isinstance(response, Response) or response.status != 200:
            return response
        local = MetricsSnapshot(response.body, dict(self._stats_times()))
        response.body = merge_expositions([local, *await self.gather()])
        return response

    async def _scrape_mount(self, app: App, request: Request) -> AnyResponse:
        response = await app(request)
        if not isinstance(response, StreamingResponse) or response.status != 200:
            return response
        local = await self.local_snapshot()
        merged = merge_expositions([local, *await self.gather()])
        response.body = negotiated_page(request, parse_text(merged)).body
        return response

    async def local_snapshot(self) -> MetricsSnapshot:
        """This process's own exposition and its engine stats' times."""
        assert self._app is not None, "start() first"
        response = await self._app(Request("GET", "/metrics", b"", {}, b""))
        if not isinstance(response, Response) or response.status != 200:
            raise RuntimeError(f"/metrics answered {response.status}")
        return MetricsSnapshot(response.body, dict(self._stats_times()))

    async def gather(self) -> list[MetricsSnapshot]:
        """The siblings' snapshots, in index order (late or failed ones as described above)."""
        tasks = {i: asyncio.ensure_future(self._fetch(i)) for i in self._siblings}
        try:
            if tasks:
                await asyncio.wait(tasks.values(), timeout=self._timeout_s)
        finally:
            for task in tasks.values():
                task.cancel()
            await asyncio.gather(*tasks.values(), return_exceptions=True)
        out = []
        now = time.monotonic()
        for i, task in tasks.items():
            error = _outcome(task)
            if error is None:
                snapshot = task.result()
                self._last[i] = (snapshot, now)
                if i in self._failing:
                    self._failing.discard(i)
                    logger.info("metrics: API server %d answers again", i)
                out.append(snapshot)
                continue
            last = self._last.get(i)
            level = logging.DEBUG if i in self._failing else logging.WARNING
            self._failing.add(i)
            if last is None:
                logger.log(level, "metrics: API server %d left out of /metrics: %s", i, error)
            else:
                logger.log(
                    level,
                    "metrics: API server %d: %s; /metrics uses its snapshot from %.1f s ago",
                    i,
                    error,
                    now - last[1],
                )
                out.append(last[0])
        return out

    async def _fetch(self, index: int) -> MetricsSnapshot:
        reader, writer = await asyncio.open_unix_connection(snapshot_path(self._directory, index))
        try:
            data = await reader.read()
        finally:
            writer.close()
        return _decoder.decode(data)

    async def _serve_snapshot(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            snapshot = await self.local_snapshot()
            writer.write(_encoder.encode(snapshot))
            await writer.drain()
        except ConnectionError:
            pass  # the asking sibling gave up (its timeout)
        except Exception:
            logger.exception("metrics: could not hand this process's snapshot to a sibling")
        finally:
            writer.close()


def _outcome(task: asyncio.Future[MetricsSnapshot]) -> str | None:
    """None when ``task`` produced a snapshot, else why not."""
    if task.cancelled():
        return "no answer within the timeout"
    error = task.exception()
    if error is None:
        return None
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__

"""A small HTTP server on 127.0.0.1 (its own thread and event loop) serving the media tests'
images, statuses, redirects, endless and slow bodies, and bodies that lie about themselves."""

from __future__ import annotations

import asyncio
import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from aiohttp import web


class MediaServer:
    """Files by path plus behaviours; ``base`` is ``http://127.0.0.1:<port>``."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.sent_forever = 0
        self.sent_dripping = 0
        self.requests: list[str] = []
        self.base = ""
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None

    def url(self, path: str) -> str:
        """The URL of ``path`` on this server."""
        return f"{self.base}/{path.lstrip('/')}"

    async def _file(self, request: web.Request) -> web.Response:
        self.requests.append(request.path)
        name = request.match_info["name"]
        if name not in self.files:
            return web.Response(status=404, text="no such file")
        return web.Response(body=self.files[name], content_type="application/octet-stream")

    async def _status(self, request: web.Request) -> web.Response:
        self.requests.append(request.path)
        return web.Response(status=int(request.match_info["code"]), text="status")

    async def _redirect(self, request: web.Request) -> web.Response:
        self.requests.append(request.path)
        return web.Response(status=302, headers={"Location": request.query["to"]}, text="moved")

    async def _forever(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        chunk = b"\0" * 65536
        try:
            while True:
                await response.write(chunk)
                self.sent_forever += len(chunk)
                await asyncio.sleep(0)
        except (ConnectionError, asyncio.CancelledError):
            return response

    async def _drip(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        delay = float(request.query.get("delay", "0.05"))
        pieces = int(request.query.get("pieces", "20"))
        body = self.files[name]
        response = web.StreamResponse(headers={"Content-Length": str(len(body))})
        await response.prepare(request)
        step = -(-len(body) // pieces)
        try:
            for start in range(0, len(body), step):
                await response.write(body[start : start + step])
                self.sent_dripping += len(body[start : start + step])
                await asyncio.sleep(delay)
            await response.write_eof()
        except (ConnectionError, asyncio.CancelledError):
            pass
        return response

    async def _faulty(self, request: web.Request) -> web.StreamResponse:
        # /faulty/{fault}/{name}: the file, served wrongly.
        self.requests.append(request.path)
        fault, body = request.match_info["fault"], self.files[request.match_info["name"]]
        if fault == "gzip":  # compressed, and says so
            return web.Response(body=gzip.compress(body), headers={"Content-Encoding": "gzip"})
        if fault == "false-gzip":  # says gzip, is not
            return web.Response(body=body, headers={"Content-Encoding": "gzip"})
        if fault == "html":
            return web.Response(body=body, content_type="text/html")
        if fault == "loop":
            return web.Response(status=302, headers={"Location": request.path})
        if fault == "slow":
            await asyncio.sleep(float(request.query.get("delay", "3")))
            return web.Response(body=body)
        # "long": declares 100 bytes more than it sends; "reset": sends half, then closes.
        declared = len(body) + 100 if fault == "long" else len(body)
        response = web.StreamResponse(headers={"Content-Length": str(declared)})
        await response.prepare(request)
        await response.write(body if fault == "long" else body[: len(body) // 2])
        assert request.transport is not None
        request.transport.close()
        return response

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get("/files/{name}", self._file)
        app.router.add_get("/status/{code}", self._status)
        app.router.add_get("/redirect", self._redirect)
        app.router.add_get("/forever", self._forever)
        app.router.add_get("/drip/{name}", self._drip)
        app.router.add_get("/faulty/{fault}/{name}", self._faulty)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base = f"http://127.0.0.1:{port}"

    @contextmanager
    def running(self) -> Iterator[MediaServer]:
        """Serve on a thread until the block ends."""
        thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        try:
            yield self
        finally:
            assert self._runner is not None
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            thread.join(10)

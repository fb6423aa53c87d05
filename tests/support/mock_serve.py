"""A real ``vllm-frontend serve`` in front of the project's mock engine, for tests that look at
the serving process from outside (its imports, its mapped files), plus a small HTTP helper."""

from __future__ import annotations

import contextlib
import http.client
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence

from tests.support.engines import free_port, http_status


class MockServe:
    """The running frontend: its process, HTTP port, and the file its stderr goes to."""

    def __init__(self, process: subprocess.Popen[bytes], port: int, log: pathlib.Path) -> None:
        self.process = process
        self.port = port
        self.log = log

    def request(
        self,
        method: str,
        path: str,
        body: str | bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, bytes]:
        """One request on a fresh connection (with ``headers`` too): (status, body)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request(
                method, path, body, {"Content-Type": "application/json", **(headers or {})}
            )
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()


@contextlib.contextmanager
def mock_serve(
    model: pathlib.Path,
    log: pathlib.Path,
    python_flags: Sequence[str] = (),
    serve_args: Sequence[str] = (),
    healthy: Callable[[int], bool] | None = None,
    engine_args: Sequence[str] = (),
) -> Iterator[MockServe]:
    """Serve ``model`` (``python python_flags -m vllm_frontend serve … serve_args``, stderr to
    ``log``) in front of a mock engine (``mock-engine … engine_args``), once ``healthy(port)``
    (default: ``/health`` answers 200); on exit the frontend must stop cleanly on SIGTERM."""
    port, rpc = free_port(), free_port()
    engine = subprocess.Popen(
        [sys.executable, "-m", "vllm_frontend", "mock-engine",
         "--handshake-address", f"tcp://127.0.0.1:{rpc}", "--max-model-len", "256",
         *engine_args],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    with log.open("w") as stderr:
        frontend = subprocess.Popen(
            [sys.executable, *python_flags, "-m", "vllm_frontend", "serve", str(model),
             "--port", str(port), "--data-parallel-size-local", "0",
             "--data-parallel-rpc-port", str(rpc), *serve_args],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
            start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (healthy(port) if healthy else http_status(port, "/health") == 200):
            assert frontend.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, "frontend not healthy after 120 s"
            time.sleep(0.05)
        yield MockServe(frontend, port, log)
        frontend.send_signal(signal.SIGTERM)
        assert frontend.wait(30) == 0
    finally:
        if frontend.poll() is None:
            frontend.kill()
            frontend.wait()
        engine.kill()
        engine.wait()

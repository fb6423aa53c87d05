"""Micro-benchmark of HTTP stacks for the frontend's server: requests/s and server CPU time.

Stacks (each serves the same two routes on 127.0.0.1):
  own      vllm_frontend.server.transport (asyncio Protocol on httptools) + our App, on uvloop
  uvicorn  uvicorn (httptools, uvloop) + a Starlette app (vLLM's stack minus FastAPI)
  granian  granian ASGI (Rust HTTP) + the same Starlette app
  granian-rsgi  granian's native RSGI interface, minimal app (its fastest mode)

Routes: GET /json returns a small JSON object; GET /sse streams 256 small SSE events and
``data: [DONE]`` (one chunk per event, produced back to back); GET /sse_tick streams the same
events with an ``await asyncio.sleep(0)`` before each, so that every event is produced in its
own event-loop iteration as a token stream's events are (one engine step each): no stack can
coalesce them, which makes it the honest per-event cost.

Load: ``wrk`` (Debian package) with 1 thread, pinned to one core while the server is pinned to
the other (``taskset``); server CPU = utime+stime of its process tree from /proc over the run.

Usage:
    .venv/bin/python bench/bench_http.py [--duration 5] [--connections 64] [--stacks own,uvicorn]
    .venv/bin/python bench/bench_http.py --serve own --port 8123   # just run one server
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

N_EVENTS = 256
_EVENT = (
    b'data: {"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":" tok"}]}\n\n'
)
_JSON = {"object": "list", "data": [{"id": "model", "object": "model", "owned_by": "vllm"}]}

# ---------------------------------------------------------------------------------------------
# servers (each runs in its own process)


def _serve_own(port: int) -> None:
    import asyncio

    import uvloop

    from vllm_frontend.server.app import App, ServerSettings
    from vllm_frontend.server.transport import (
        HttpServer,
        Request,
        Response,
        StreamingResponse,
        bind_tcp,
        json_response,
    )

    async def json_route(request: Request) -> Response:
        return json_response(_JSON)

    async def events() -> AsyncIterator[bytes]:
        for _ in range(N_EVENTS):
            yield _EVENT
        yield b"data: [DONE]\n\n"

    async def ticked_events() -> AsyncIterator[bytes]:
        for _ in range(N_EVENTS):
            await asyncio.sleep(0)
            yield _EVENT
        yield b"data: [DONE]\n\n"

    async def sse_route(request: Request) -> StreamingResponse:
        return StreamingResponse(events())

    async def sse_tick_route(request: Request) -> StreamingResponse:
        return StreamingResponse(ticked_events())

    async def main() -> None:
        app = App(ServerSettings())
        app.route("GET", "/json", json_route)
        app.route("GET", "/sse", sse_route)
        app.route("GET", "/sse_tick", sse_tick_route)
        server = HttpServer(app)
        await server.start(bind_tcp("127.0.0.1", port))
        await asyncio.Event().wait()

    uvloop.run(main())


def _starlette_app() -> Any:
    import asyncio

    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, StreamingResponse
    from starlette.routing import Route

    async def json_route(request: Request) -> JSONResponse:
        return JSONResponse(_JSON)

    async def events() -> AsyncIterator[bytes]:
        for _ in range(N_EVENTS):
            yield _EVENT
        yield b"data: [DONE]\n\n"

    async def ticked_events() -> AsyncIterator[bytes]:
        for _ in range(N_EVENTS):
            await asyncio.sleep(0)
            yield _EVENT
        yield b"data: [DONE]\n\n"

    async def sse_route(request: Request) -> StreamingResponse:
        return StreamingResponse(events(), media_type="text/event-stream")

    async def sse_tick_route(request: Request) -> StreamingResponse:
        return StreamingResponse(ticked_events(), media_type="text/event-stream")

    return Starlette(
        routes=[
            Route("/json", json_route),
            Route("/sse", sse_route),
            Route("/sse_tick", sse_tick_route),
        ]
    )


app = None  # granian imports "bench_http:app"
if os.environ.get("BENCH_HTTP_STARLETTE"):
    app = _starlette_app()


async def rsgi_app(scope: Any, proto: Any) -> None:
    """Minimal RSGI app for granian's native interface."""
    if scope.path == "/json":
        proto.response_bytes(
            200, [("content-type", "application/json")], json.dumps(_JSON).encode()
        )
        return
    transport = proto.response_stream(200, [("content-type", "text/event-stream")])
    tick = scope.path == "/sse_tick"
    for _ in range(N_EVENTS):
        if tick:
            await asyncio.sleep(0)
        await transport.send_bytes(_EVENT)
    await transport.send_bytes(b"data: [DONE]\n\n")


def _serve_uvicorn(port: int) -> None:
    import uvicorn

    uvicorn.run(
        _starlette_app(),
        host="127.0.0.1",
        port=port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
        backlog=2048,
    )


def _server_cmd(stack: str, port: int) -> tuple[list[str], dict[str, str]]:
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ)
    if stack in ("own", "uvicorn"):
        return [sys.executable, __file__, "--serve", stack, "--port", str(port)], env
    granian = shutil.which("granian") or os.path.join(os.path.dirname(sys.executable), "granian")
    common = [
        granian, "--host", "127.0.0.1", "--port", str(port), "--loop", "uvloop",
        "--http", "1", "--no-ws", "--log-level", "warning", "--workers", "1",
        "--runtime-threads", "1", "--working-dir", here,
    ]  # fmt: skip
    if stack == "granian":
        env["BENCH_HTTP_STARLETTE"] = "1"
        return [*common, "--interface", "asgi", "bench_http:app"], env
    if stack == "granian-rsgi":
        return [*common, "--interface", "rsgi", "bench_http:rsgi_app"], env
    raise SystemExit(f"unknown stack {stack}")


# ---------------------------------------------------------------------------------------------
# measurement


def _tree_cpu(pid: int) -> float:
    """utime+stime (s) of pid and its descendants (granian runs workers as children)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    pids = [pid]
    while pids:
        p = pids.pop()
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
            with open(f"/proc/{p}/task/{p}/children") as f:
                pids.extend(int(c) for c in f.read().split())
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


def _wait_port(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"server on port {port} did not start")


def _wrk(url: str, duration: int, connections: int) -> tuple[float, int]:
    out = subprocess.run(
        ["taskset", "-c", "1", "wrk", "-t1", f"-c{connections}", f"-d{duration}s", url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    total = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)|Socket errors: (.*)", out)
    if errors:
        print(f"    wrk reported: {errors.group(0)}", file=sys.stderr)
    return rps, total


def bench_stack(stack: str, port: int, duration: int, connections: int) -> dict[str, Any]:
    """Start one server pinned to CPU 0 and drive both routes with wrk pinned to CPU 1."""
    cmd, env = _server_cmd(stack, port)
    proc = subprocess.Popen(["taskset", "-c", "0", *cmd], env=env, start_new_session=True)
    try:
        _wait_port(port)
        result: dict[str, Any] = {"stack": stack}
        for route in ("json", "sse", "sse_tick"):
            url = f"http://127.0.0.1:{port}/{route}"
            _wrk(url, 1, connections)  # warm-up
            cpu0 = _tree_cpu(proc.pid)
            rps, total = _wrk(url, duration, connections)
            cpu = _tree_cpu(proc.pid) - cpu0
            result[route] = {
                "requests_per_s": round(rps, 1),
                "server_cpu_s": round(cpu, 2),
                "server_cpu_us_per_request": round(cpu / total * 1e6, 1),
            }
            if route.startswith("sse"):
                result[route]["server_cpu_us_per_event"] = round(
                    cpu / (total * (N_EVENTS + 1)) * 1e6, 2
                )
        return result
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stacks", default="own,uvicorn,granian,granian-rsgi")
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--port", type=int, default=18123)
    parser.add_argument("--serve", help="run one server in the foreground (own|uvicorn)")
    parser.add_argument("--json", help="write results to this file")
    args = parser.parse_args()
    if args.serve == "own":
        _serve_own(args.port)
        return
    if args.serve == "uvicorn":
        _serve_uvicorn(args.port)
        return
    results = []
    for i, stack in enumerate(args.stacks.split(",")):
        res = bench_stack(stack, args.port + i, args.duration, args.connections)
        results.append(res)
        print(json.dumps(res), flush=True)
    print()
    print(f"wrk -t1 -c{args.connections} -d{args.duration}s; server pinned to CPU 0, wrk to CPU 1")
    print("| stack | /json req/s | /json us CPU/req | /sse req/s | /sse us CPU/event "
          "| /sse_tick req/s | /sse_tick us CPU/event |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in results:
        j, s, t = r["json"], r["sse"], r["sse_tick"]
        print(
            f"| {r['stack']} | {j['requests_per_s']} | {j['server_cpu_us_per_request']} "
            f"| {s['requests_per_s']} | {s['server_cpu_us_per_event']} "
            f"| {t['requests_per_s']} | {t['server_cpu_us_per_event']} |"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()

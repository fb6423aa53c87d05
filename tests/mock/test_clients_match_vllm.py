"""Clients, inputs and faults no issue lists: vLLM 0.32's own server (uvicorn + FastAPI) and ours,
each in front of the project's mock engine playing the same scripted tokens, get the same raw
bytes; compared are the status, the headers a client relies on (content type, allow, location,
connection) and the body (JSON and SSE events parsed; ids, timestamps and the model path
dropped; the mock engine's random logprobs reduced to their count).

The last test kills the engines (``--die-after-requests``) with a request of every API in flight,
streamed and not: every request ends in vLLM's shape and ``/health`` turns unhealthy.
"""

from __future__ import annotations

import contextlib
import email.utils
import json
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest

from tests.support.engines import (
    engine_env,
    free_port,
    http_status,
    log_dir,
    start_vllm_server,
    stop_group,
)
from tests.support.tiny_model import tiny_model_dir

pytestmark = pytest.mark.engine

SCRIPT = [1000, 2000, 3000, 4000, 5000, 6000, 7000, 8000]
"""The token ids every request gets from the mock engines, in order."""

GENERATION_CAP = 200
"""``max_new_tokens`` of the servers' ``--generation-config`` folder: vLLM's server-wide cap."""


@dataclass
class Stack:
    """vLLM's server and ours, each with its mock engine (``stats``: the engine's counters)."""

    ports: dict[str, int]
    stats: dict[str, pathlib.Path]
    model: str

    def running(self, name: str) -> int:
        """Requests running in ``name``'s engine (its latest report, 0.1 s old at most)."""
        return int(json.loads(self.stats[name].read_text())["engines"]["0"]["running"])


def _start(
    argv: list[str], log: pathlib.Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, env=engine_env(env), start_new_session=True
        )


@contextlib.contextmanager
def _stack(
    tmp: pathlib.Path, *engine_args: str, env: dict[str, str] | None = None
) -> Iterator[Stack]:
    """Both servers on their mock engines (``engine_args`` to both engines; ``env``: more
    environment for both frontends)."""
    model = str(tiny_model_dir())
    script = tmp / "script.json"
    script.write_text(json.dumps(SCRIPT))
    # The model's generation config given as a folder, with a server-wide max_new_tokens.
    generation = tmp / "generation"
    generation.mkdir()
    defaults = json.loads((pathlib.Path(model) / "generation_config.json").read_text())
    (generation / "generation_config.json").write_text(
        json.dumps({**defaults, "max_new_tokens": GENERATION_CAP})
    )
    procs: list[subprocess.Popen[bytes]] = []
    servers = []
    ports: dict[str, int] = {}
    stats: dict[str, pathlib.Path] = {}
    try:
        for name in ("vllm", "ours"):
            rpc = free_port()
            stats[name] = tmp / f"{name}-stats.json"
            procs.append(
                _start(
                    [sys.executable, "-m", "vllm_frontend", "mock-engine",
                     "--handshake-address", f"tcp://127.0.0.1:{rpc}", "--step-ms", "10",
                     "--max-model-len", "300", "--script-tokens", str(script),
                     "--stats-file", str(stats[name]), "--report-interval", "0.1",
                     *engine_args],
                    log_dir() / f"clients-mock-{name}-{rpc}.log",
                )
            )  # fmt: skip
            # (usage reports the prompt tokens the engine read from and wrote to its cache; the
            # responses carry a fingerprint given, vLLM's own holding its config's hash; the
            # engines allow 300 tokens, the frontends' --max-model-len 256 is the lower bound
            # each serves, as vLLM's frontend keeps the smaller of its own and the engines'; the
            # generation folder's max_new_tokens caps every request's max_tokens)
            external = ["--data-parallel-size-local", "0", "--data-parallel-rpc-port", str(rpc),
                        "--max-model-len", "256", "--enable-prompt-tokens-details",
                        "--fingerprint-mode", "custom", "--fingerprint-value", "fp-1",
                        "--generation-config", str(generation)]  # fmt: skip
            if name == "vllm":
                server = start_vllm_server(
                    model=model,
                    extra_args=[*external, "--data-parallel-address", "127.0.0.1"],
                    env=env,
                )
                servers.append(server)
                ports[name] = server.port
            else:
                ports[name] = free_port()
                procs.append(
                    _start(
                        [sys.executable, "-m", "vllm_frontend", "serve", model,
                         "--port", str(ports[name]), *external],
                        log_dir() / f"clients-ours-{ports[name]}.log",
                        env,
                    )
                )  # fmt: skip
        servers[0].wait_ready(600)
        deadline = time.monotonic() + 120
        while http_status(ports["ours"]) != 200:
            assert time.monotonic() < deadline, "our frontend is not healthy after 120 s"
            time.sleep(0.2)
        yield Stack(ports, stats, model)
    finally:
        for server in servers:
            server.stop()
        for proc in reversed(procs):
            stop_group(proc)


@pytest.fixture
def stack(mock_clients_stack: Stack) -> Stack:
    """Both servers on healthy mock engines (the session's ``mock_clients_stack``, which
    tests/mock/test_fuzz_match_vllm.py uses too), for every test but the last."""
    return mock_clients_stack


# -- raw exchanges and what a client sees of them -------------------------------------------------


def exchange(port: int, data: bytes | list[bytes], timeout: float = 10.0) -> bytes:
    """Send ``data`` (pieces 50 ms apart) on a fresh connection; read until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        for i, piece in enumerate([data] if isinstance(data, bytes) else data):
            if i:
                time.sleep(0.05)
            s.sendall(piece)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


KEPT_HEADERS = ("content-type", "allow", "location", "connection", "server", "date")
_HTTP_DATE = re.compile(r"[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT")
DROPPED = {"id", "created", "created_at", "model", "root"}
_IDS = re.compile(r"(cmpl|chatcmpl|resp|msg|modelperm|rs|fc|call)[-_][0-9a-zA-Z]+")


def _scrub(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: "X"
            if k in DROPPED
            else f"{len(v)} entries"
            if k in ("logprobs", "top_logprobs", "prompt_logprobs") and isinstance(v, list | dict)
            else _scrub(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    return _IDS.sub("X", value) if isinstance(value, str) else value


def _body(content_type: str, body: bytes) -> Any:
    if not body:
        return body
    if content_type.startswith("application/json"):
        return _scrub(json.loads(body))
    if content_type.startswith("text/event-stream"):
        events: list[Any] = []
        for line in body.split(b"\n"):
            if line.startswith(b"data: {"):
                events.append(_scrub(json.loads(line[6:])))
            elif line:
                events.append(line.decode(errors="replace"))
        return events
    return body


def responses(raw: bytes, head: bool = False) -> list[tuple[int, dict[str, str], Any]]:
    """Each response in ``raw`` as a client sees it: status, kept headers, parsed body (none
    for the answer to a ``head`` request)."""
    out = []
    rest = raw
    while rest:
        top, sep, rest = rest.partition(b"\r\n\r\n")
        assert sep, f"unframed bytes: {top[:200]!r}"
        lines = top.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers.setdefault(name.strip().lower(), value.strip())
        body = b""
        if status in (100, 204, 304) or head:
            pass
        elif "content-length" in headers:
            n = int(headers["content-length"])
            body, rest = rest[:n], rest[n:]
        elif headers.get("transfer-encoding") == "chunked":
            while True:
                size_line, _, rest = rest.partition(b"\r\n")
                if not size_line:  # the server closed the connection mid-body
                    body += b"\n<cut off>"
                    break
                size = int(size_line.split(b";")[0], 16)
                body, rest = body + rest[:size], rest[size + 2 :]
                if size == 0:
                    break
        else:
            body, rest = rest, b""
        kept = {k: headers[k] for k in KEPT_HEADERS if k in headers}
        if _HTTP_DATE.fullmatch(kept.get("date", "")):
            kept["date"] = "<IMF-fixdate>"  # the time itself: test_every_response_is_dated_...
        out.append((status, kept, _body(headers.get("content-type", ""), body)))
    return out


def assert_same(
    stack: Stack, data: bytes | list[bytes], head: bool = False
) -> list[tuple[int, dict[str, str], Any]]:
    """Send ``data`` to both servers; what a client sees must be the same."""
    theirs = responses(exchange(stack.ports["vllm"], data), head)
    mine = responses(exchange(stack.ports["ours"], data), head)
    assert mine == theirs
    return mine


def post(
    path: str, body: Any, headers: bytes = b"", content_type: bytes = b"application/json"
) -> bytes:
    """A ``POST`` closing the connection after its response."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return (
        f"POST {path} HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n".encode()
        + (b"Content-Type: " + content_type + b"\r\n" if content_type else b"")
        + b"Content-Length: %d\r\n" % len(data)
        + headers
        + b"\r\n"
        + data
    )


def request(method: str, target: str, extra: bytes = b"", version: str = "1.1") -> bytes:
    """A body-less request closing the connection after its response (HTTP/1.1)."""
    close = b"Connection: close\r\n" if version == "1.1" else b""
    head = f"{method} {target} HTTP/{version}\r\nHost: example.com\r\n".encode()
    return head + close + extra + b"\r\n"


def completion(**fields: Any) -> dict[str, Any]:
    """A two-token completion of "hi" with ``fields`` on top."""
    return {"model": str(tiny_model_dir()), "prompt": "hi", "max_tokens": 2, **fields}


# -- 1. HTTP clients ------------------------------------------------------------------------------


def _chunked(data: bytes, size: int) -> bytes:
    pieces = [data[i : i + size] for i in range(0, len(data), size)]
    return b"".join(b"%x;ext=1\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


def test_a_chunked_request_body_is_read_like_uvicorn(stack: Stack) -> None:
    body = json.dumps(completion(prompt="a chunked prompt")).encode()
    data = (
        b"POST /v1/completions HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n"
        b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    ) + _chunked(body, 7)
    [(status, _, answer)] = assert_same(stack, data)
    assert status == 200 and answer["choices"][0]["finish_reason"] == "length"


def test_expect_100_continue_gets_the_interim_response_then_the_answer(stack: Stack) -> None:
    body = json.dumps(completion(prompt="x" * 2000)).encode()  # curl expects past 1 KB
    head = post("/v1/completions", body, b"Expect: 100-continue\r\n")[: -len(body)]
    [(interim, _, _), (status, _, _)] = assert_same(stack, [head, body])
    assert (interim, status) == (100, 200)


@pytest.mark.parametrize(
    "data",
    [
        request("GET", "/health", version="1.0"),
        request("GET", "/v1/models", b"Connection: keep-alive\r\n", version="1.0"),
        request("GET", "/version", b"Connection: keep-alive\r\n", version="1.0")
        + request("GET", "/health", version="1.0"),  # no keep-alive for HTTP/1.0: one answer
        b"GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /ping HTTP/1.1\r\nHost: x\r\n\r\n"
        + request("GET", "/nope"),  # pipelined, answered in order
        post("/tokenize", {"prompt": "hi"}).replace(b"Connection: close\r\n", b"")
        + request(
            "POST", "/detokenize", b"Content-Type: application/json\r\nContent-Length: 19\r\n"
        )
        + b'{"tokens": [15339]}',
    ],
    ids=["1.0", "1.0-keep-alive", "1.0-pipelined", "pipelined", "pipelined-bodies"],
)
def test_connection_semantics_match_uvicorn(stack: Stack, data: bytes) -> None:
    assert_same(stack, data)


@pytest.mark.parametrize(
    "data",
    [
        request("GET", "/health"),
        post("/v1/completions", completion(stream=True)),
        post("/v1/completions", b"{bad"),
        b"GARBAGE\r\n\r\n",  # refused by the HTTP parser, before any route
        request("HEAD", "/v1/models"),
    ],
    ids=["empty", "stream", "400", "unparsable", "head"],
)
def test_every_response_is_dated_and_names_its_server_like_uvicorns(
    stack: Stack, data: bytes
) -> None:
    # uvicorn (vLLM's server) puts "date" (the time, in whole seconds) and "server" before
    # every response's own headers; the kept headers of every other test compare their shape
    for name in ("vllm", "ours"):
        before = int(time.time())
        head = exchange(stack.ports[name], data).partition(b"\r\n\r\n")[0].decode("latin-1")
        after = time.time()
        lines = head.split("\r\n")
        assert [line.partition(":")[0] for line in lines[1:3]] == ["date", "server"], name
        date = email.utils.parsedate_to_datetime(lines[1].partition(": ")[2]).timestamp()
        assert before - 2 <= date <= after, (name, lines[1])
        assert lines[2] == "server: uvicorn", name


ROUTES = ["/health", "/ping", "/version", "/load", "/v1/models", "/metrics", "/v1/completions",
          "/v1/chat/completions", "/v1/responses", "/v1/messages", "/tokenize",
          "/scale_elastic_ep", "/is_scaling_elastic_ep", "/nope"]  # fmt: skip


@pytest.mark.parametrize("method", ["HEAD", "OPTIONS", "PUT", "DELETE", "PATCH", "FOO"])
@pytest.mark.parametrize("path", ROUTES)
def test_methods_answer_404_or_405_with_allow_like_fastapi(
    stack: Stack, method: str, path: str
) -> None:
    if path == "/metrics" and method != "FOO":
        pytest.skip("/metrics answers every method with the page (tests/server/test_metrics_*)")
    assert_same(stack, request(method, path), head=method == "HEAD")


@pytest.mark.parametrize(
    "target",
    ["/health/", "/health//", "/v1/models/", "/v1/models/?a=b%20c&d", "/ping/", "/nope/",
     "/v1/models?x=1", "/health?", "/%68ealth", "/health%20", "//health", "/v1//models",
     "/v1/models/tiny", "/v1/responses/", "/v1/responses/resp_x/", "/v1/models#x",
     "/v1/responses/resp_x?stream=true&starting_after=1.0",
     "/v1/responses/resp_x?starting_after=%201", "/v1/responses/resp_x?starting_after=1.5",
     "/health?a#b", "/health#a?b"],
)  # fmt: skip
def test_trailing_slashes_and_queries_route_like_starlette(stack: Stack, target: str) -> None:
    assert_same(stack, request("GET", target))


@pytest.mark.parametrize(
    "data",
    [
        b"GET /health/ HTTP/1.0\r\n\r\n",
        b"GET /v1/models/?a=b%20c HTTP/1.1\r\nConnection: close\r\n\r\n",
        b"GET /v1/models/ HTTP/1.1\r\nHost:\r\nConnection: close\r\n\r\n",
        b"GET /health/ HTTP/1.1\r\nHost: [::1\r\nConnection: close\r\n\r\n",
        b"GET /health/ HTTP/1.1\r\nHost: x:99999\r\nConnection: close\r\n\r\n",
    ],
    ids=["1.0", "1.1-no-host", "empty-host", "bad-host", "bad-port"],
)
def test_a_redirect_without_a_usable_host_names_the_servers_address(
    stack: Stack, data: bytes
) -> None:
    # Starlette's URL falls back to the socket the request came in on (each server's own port)
    seen = {}
    for name in ("vllm", "ours"):
        raw = exchange(stack.ports[name], data)
        seen[name] = responses(raw.replace(b":%d" % stack.ports[name], b":PORT"))
    assert seen["ours"] == seen["vllm"]
    [(status, headers, _)] = seen["ours"]
    assert status == 307 and headers["location"].startswith("http://127.0.0.1:PORT/")


def _framing(raw: bytes) -> list[tuple[str, list[str]]]:
    """Each response's status line and the headers that frame or describe its body (names of
    the framing ones, as a page's length differs between the servers)."""
    out = []
    for part in raw.split(b"\r\n\r\n"):
        if not part.startswith(b"HTTP/1.1 "):
            continue
        line, *fields = part.decode("latin-1").split("\r\n")
        kept = []
        for field in fields:
            name, _, value = field.partition(":")
            name = name.strip().lower()
            if name in ("content-length", "transfer-encoding"):
                kept.append(name)
            elif name in ("content-type", "content-encoding", "connection"):
                kept.append(f"{name}: {value.strip()}")
        out.append((line, sorted(kept)))
    return out


@pytest.mark.parametrize(
    "data",
    [
        b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n" + request("GET", "/health"),
        request("HEAD", "/metrics", b"Accept-Encoding: gzip\r\n"),
        request("HEAD", "/metrics/", b"Accept: application/openmetrics-text\r\n"),
        request("GET", "/metrics/"),
        request("GET", "/metrics/", b"Accept-Encoding: gzip\r\n"),
    ],
    ids=["head-keep-alive", "head-gzip", "head-openmetrics", "get-mount", "get-mount-gzip"],
)
def test_the_metrics_mount_frames_its_answer_like_prometheus_client_under_uvicorn(
    stack: Stack, data: bytes
) -> None:
    # prometheus_client's ASGI app sends no Content-Length: chunked to GET, unframed to HEAD
    theirs = _framing(exchange(stack.ports["vllm"], data))
    assert _framing(exchange(stack.ports["ours"], data)) == theirs
    assert theirs and all(status.startswith("HTTP/1.1 200") for status, _ in theirs)


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions", "/v1/responses",
                                  "/v1/messages", "/tokenize", "/detokenize"])  # fmt: skip
@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (b'{"prompt": "hi"}', b""),
        (b'{"prompt": "hi"}', b"text/plain"),
        (b'{"prompt": "hi"}', b"application/json; charset=latin-1"),
        (b'{"prompt": "hi"}', b"Application/JSON"),
        (b'{"prompt": "hi"}', b"application/vnd.api+json"),
        (b'{"prompt": "hi"}', b"application/json ; charset=utf-8"),
        (b'{"prompt": "hi"}', b"application/json\t"),
        (b"", b"application/json"),
        (b"null", b"application/json"),
        (b"[1, 2]", b"application/json"),
        (b'"x"', b"application/json"),
        (b"1e999", b"application/json"),
        (b'{"prompt": "\xff"}', b"application/json"),
        (b'{"prompt": "a", "prompt": "hi", "max_tokens": 1}', b"application/json"),
        (b'{"prompt": "a", "max_tokens": 100000000000000000000000}', b"application/json"),
        (b'{"prompt": ' + b"[" * 300 + b"]" * 300 + b"}", b"application/json"),
        (b'{"prompt": "a\\u0000b", "input": "a\\u0000b", "max_tokens": 1}', b"application/json"),
        (b"{}", b"application/json"),
    ],
    ids=["no-type", "text", "charset", "upper", "vnd", "space-before-param", "trailing-tab",
         "empty", "null", "array", "string", "huge-float", "bad-utf8", "duplicate-keys",
         "huge-int", "nested", "nul", "object"],
)  # fmt: skip
def test_bodies_of_every_shape_are_judged_like_fastapi(
    stack: Stack, path: str, body: bytes, content_type: bytes
) -> None:
    [(status, _, _)] = assert_same(stack, post(path, body, content_type=content_type))
    assert status < 500


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (b'{"new_data_parallel_size": 1}', b"application/json"),
        (b'{"new_data_parallel_size": true, "drain_timeout": 5}', b"application/json"),
        (b'{"new_data_parallel_size": 2}', b"application/json"),
        (b'{"new_data_parallel_size": 1, "drain_timeout": 0}', b"application/json"),
        (b'{"new_data_parallel_size": 1, "drain_timeout": "x"}', b"application/json"),
        (b'{"new_data_parallel_size": 1.0}', b"application/json"),
        (b'{"new_data_parallel_size": 0}', b"application/json"),
        (b'{"new_data_parallel_size": null}', b"application/json"),
        (b"{}", b"application/json"),
        (b"", b"application/json"),
        (b"{bad", b"application/json"),
        (b'{"new_data_parallel_size": 1}', b"text/plain"),
        (b'{"new_data_parallel_size": 1}', b""),
    ],
)
def test_elastic_ep_scaling_is_answered_like_vllm_without_ray(
    stack: Stack, body: bytes, content_type: bytes
) -> None:
    # vLLM serves both routes for every generating model; only its Ray data-parallel backend
    # scales (any other size fails with its 500 "Scale failed"), and nothing is ever scaling
    assert_same(stack, post("/scale_elastic_ep", body, content_type=content_type))
    assert_same(stack, post("/is_scaling_elastic_ep", body, content_type=content_type))


@pytest.mark.parametrize("body", [b"[1]", b"null", b"5"])
def test_elastic_ep_scaling_refuses_a_body_that_is_not_an_object(stack: Stack, body: bytes) -> None:
    # vLLM's handler calls .get on it and answers 500 (an AttributeError); bad input is a 400 here
    request = post("/scale_elastic_ep", body)
    [(theirs, _, _)] = responses(exchange(stack.ports["vllm"], request))
    [(status, _, answer)] = responses(exchange(stack.ports["ours"], request))
    assert theirs == 500
    assert (status, answer["error"]["message"]) == (400, "Request body must be a JSON object")


def test_a_large_body_and_large_headers_are_served_like_uvicorn(stack: Stack) -> None:
    big = completion(prompt="hello " * 200_000)  # 1.2 MB: too long for the context
    [(status, _, _)] = assert_same(stack, post("/v1/completions", big))
    assert status == 400
    header = b"X-Big: " + b"a" * 30_000 + b"\r\n"
    [(status, _, _)] = assert_same(stack, post("/v1/completions", completion(), header))
    assert status == 200


def _curl(port: int, *args: str) -> Any:
    out = subprocess.run(
        ["curl", "-s", "-i", "--http1.1", *args, f"http://127.0.0.1:{port}/v1/completions"],
        capture_output=True, timeout=30, check=True,
    ).stdout  # fmt: skip
    return responses(out.replace(b"HTTP/1.1 100 Continue\r\n\r\n", b""))


@pytest.mark.skipif(shutil.which("curl") is None, reason="no curl")
@pytest.mark.parametrize(
    "args",
    [
        ["-H", "Content-Type: application/json", "--data-binary", "@BODY"],  # Expect: 100-continue
        ["-H", "Content-Type: application/json", "-H", "Transfer-Encoding: chunked",
         "--data-binary", "@BODY"],
        ["-H", "Content-Type: application/json", "-H", "Expect:", "--data-binary", "@BODY"],
    ],
    ids=["expect", "chunked", "no-expect"],
)  # fmt: skip
def test_curl_uploads_are_answered_like_vllm(
    stack: Stack, tmp_path: pathlib.Path, args: list[str]
) -> None:
    body = tmp_path / "body.json"
    body.write_text(json.dumps(completion(prompt="y" * 3000)))
    args = [a.replace("@BODY", f"@{body}") for a in args]
    assert _curl(stack.ports["ours"], *args) == _curl(stack.ports["vllm"], *args)


async def _aiohttp(port: int) -> list[Any]:
    import aiohttp

    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    body = {"model": str(tiny_model_dir()), "messages": M, "max_tokens": 3}
    out: list[Any] = []
    async with aiohttp.ClientSession() as session:
        async with session.post(url, json=body) as r:
            out.append((r.status, r.content_type, _scrub(await r.json())))
        async with session.post(url, json={**body, "stream": True}) as r:
            lines = [line async for line in r.content]
            events = _coalesced(_body("text/event-stream", b"".join(lines)))
            out.append((r.status, r.content_type, events))
    return out


def _requests(port: int) -> list[Any]:
    import requests

    url = f"http://127.0.0.1:{port}/v1/completions"
    out: list[Any] = []
    with requests.Session() as session:
        r = session.post(url, json=completion())
        out.append((r.status_code, r.headers["content-type"], _scrub(r.json())))
        with session.post(url, json=completion(stream=True), stream=True) as r:
            events = _coalesced(_body("text/event-stream", b"\n".join(r.iter_lines())))
            out.append((r.status_code, r.headers["content-type"], events))
        r = session.post(url + "/", json=completion())  # follows the 307, body and all
        out.append((r.status_code, [h.status_code for h in r.history], _scrub(r.json())))
    return out


def _text_of(event: Any) -> str | None:
    """The text an SDK stream event adds (None: not a text delta)."""
    if not isinstance(event, dict):
        return None
    if event.get("type") == "response.output_text.delta":
        return str(event["delta"])
    if event.get("type") == "content_block_delta" and event["delta"].get("type") == "text_delta":
        return str(event["delta"]["text"])
    choices = event.get("choices")
    running = bool(choices) and choices[0]["finish_reason"] is None
    if event.get("object") == "text_completion" and running:
        # (a running event's continuous usage counts the tokens so far: it follows the split)
        return str(choices[0]["text"])
    if event.get("object") == "chat.completion.chunk" and choices:
        delta = choices[0]["delta"]
        others = [v for k, v in delta.items() if k != "content" and v is not None]
        if choices[0]["finish_reason"] is None and not others:
            return delta.get("content")
    return None


def _final_text(event: Any) -> tuple[Any, str] | None:
    """A finishing completion or chat chunk without its text, and the text (None otherwise)."""
    if not isinstance(event, dict) or not event.get("choices"):
        return None
    choice = event["choices"][0]
    if choice.get("finish_reason") is None:
        return None
    if event.get("object") == "text_completion" and isinstance(choice.get("text"), str):
        # (split even without text: the finish may carry the last tokens' other fields)
        return {**event, "choices": [{**choice, "text": ""}]}, choice["text"]
    delta = choice.get("delta") or {}
    if event.get("object") == "chat.completion.chunk" and delta.get("content"):
        blank = {**choice, "delta": {**delta, "content": ""}}
        return {**event, "choices": [blank]}, delta["content"]
    return None


_PER_TOKEN = ("logprobs", "token_ids", "prompt_token_ids")
"""A streamed completion choice's fields that belong to its tokens: where they land depends on
how the tokens split between events, as the text does."""


def _token_fields(event: Any) -> dict[str, Any] | None:
    """A completion event's per-token fields (None: not a completion event)."""
    if not isinstance(event, dict) or event.get("object") != "text_completion":
        return None
    choices = event.get("choices")
    return {k: choices[0].get(k) for k in _PER_TOKEN} if choices else None


def _joined(first: Any, then: Any) -> Any:
    """Two events' value of one per-token field as one event's (lists and logprobs' lists
    concatenated, else the first that is set)."""
    if isinstance(first, list) and isinstance(then, list):
        return first + then
    if isinstance(first, dict) and isinstance(then, dict):
        return {k: _joined(first.get(k), then.get(k)) for k in first.keys() | then.keys()}
    return first if first is not None else then


def _coalesced(events: list[Any]) -> list[Any]:
    """``events`` with runs of text deltas joined into the first (how many tokens an engine
    step's message carries, and so how deltas split, depends on timing) and without the
    numbering and text snapshots that follow from the split. A completion's per-token fields
    (:data:`_PER_TOKEN`) are joined with its text."""
    out: list[Any] = []
    joined = False

    def add(text: str, fields: dict[str, Any] | None) -> None:
        if joined:
            _, before, had = out[-1]
            out[-1] = ("text", before + text, _joined(had, fields))
        else:
            out.append(("text", text, fields))

    for event in events:
        if isinstance(event, dict) and event.get("type") == "text":
            continue  # the anthropic SDK's running text snapshot
        if isinstance(event, dict):
            event = {k: v for k, v in event.items() if k != "sequence_number"}
        text = _text_of(event)
        fields = _token_fields(event)
        if text is None and (last := _final_text(event)) is not None:
            # the last tokens may come with the finish, or in a chunk of their own
            event, text = last
            if fields is not None:
                choice = {**event["choices"][0], **dict.fromkeys(_PER_TOKEN)}
                event = {**event, "choices": [choice]}
            add(text, fields)
            out.append(event)
            joined = False
            continue
        if text is not None:
            add(text, fields)
            joined = True
            continue
        joined = False
        out.append(event)
    return out


def _completion_event(text: str, finish: str | None, **fields: Any) -> dict[str, Any]:
    choice = {"index": 0, "text": text, "finish_reason": finish, **dict.fromkeys(_PER_TOKEN)}
    return {"object": "text_completion", "choices": [{**choice, **fields}]}


def test_a_completion_stream_reads_the_same_however_its_tokens_split() -> None:
    # Two tokens of an echoed stream in one event (the engine client read both steps' outputs
    # at once) or in two: the same once coalesced, the first event's prompt ids included.
    lp = {"tokens": ["a", "b"], "token_logprobs": [-1.0, -2.0], "text_offset": [2, 7]}
    one = [_completion_event("hiindowfor", "length", prompt_token_ids=[1, 2], token_ids=[3, 4],
                             logprobs=lp)]  # fmt: skip
    two = [
        _completion_event("hiindow", None, prompt_token_ids=[1, 2], token_ids=[3],
                          logprobs={k: v[:1] for k, v in lp.items()}),
        _completion_event("for", "length", token_ids=[4],
                          logprobs={k: v[1:] for k, v in lp.items()}),
    ]  # fmt: skip
    assert _coalesced(one) == _coalesced(two)
    assert _coalesced(one)[0] == ("text", "hiindowfor", {"logprobs": lp, "token_ids": [3, 4],
                                                          "prompt_token_ids": [1, 2]})  # fmt: skip
    changed = [two[0], _completion_event("for", "length", token_ids=[5])]
    assert _coalesced(changed) != _coalesced(one)
    # continuous usage: each event counts the tokens so far; the finishing one counts them all
    usage = [{"completion_tokens": n} for n in (1, 2)]
    assert _coalesced([{**one[0], "usage": usage[1]}]) == _coalesced(
        [{**two[0], "usage": usage[0]}, {**two[1], "usage": usage[1]}]
    )
    assert _coalesced([{**one[0], "usage": usage[0]}]) != _coalesced(
        [{**two[0], "usage": usage[0]}, {**two[1], "usage": usage[1]}]
    )


def _sdks(port: int) -> list[Any]:
    import anthropic
    import openai

    model = str(tiny_model_dir())
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)
    out: list[Any] = [
        client.completions.create(model=model, prompt="hi", max_tokens=3).model_dump(),
        _coalesced([c.model_dump() for c in client.chat.completions.create(
            model=model, messages=M, max_tokens=3, stream=True,  # type: ignore[arg-type]
            stream_options={"include_usage": True})]),
        client.responses.create(model=model, input="hi", max_output_tokens=3).model_dump(),
        _coalesced([e.model_dump() for e in client.responses.create(
            model=model, input="hi", max_output_tokens=3, stream=True)]),
    ]  # fmt: skip
    try:
        client.completions.create(model="nope", prompt="hi", max_tokens=3)
    except openai.APIStatusError as e:
        out.append((e.status_code, e.body))
    claude = anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}", api_key="x", max_retries=0)
    out.append(claude.messages.create(model=model, messages=M, max_tokens=3).model_dump())  # type: ignore[arg-type]
    with claude.messages.stream(model=model, messages=M, max_tokens=3) as stream:  # type: ignore[arg-type]
        out.append(_coalesced([e.model_dump() for e in stream]))
    return [_scrub(o) for o in out]


def test_python_clients_see_the_same_answers(stack: Stack) -> None:
    import asyncio

    for name in ("vllm", "ours"):
        assert _settled(stack, name, 0)
    got = {
        name: [_requests(port), asyncio.run(_aiohttp(port)), _sdks(port)]
        for name, port in stack.ports.items()
    }
    assert got["ours"] == got["vllm"]


# -- 2. inputs ------------------------------------------------------------------------------------

M = [{"role": "user", "content": "hi"}]
BASES = {
    "/v1/completions": {"prompt": "hi", "max_tokens": 2},
    "/v1/chat/completions": {"messages": M, "max_tokens": 2},
    "/v1/responses": {"input": "hi", "max_output_tokens": 2},
    "/v1/messages": {"messages": M, "max_tokens": 2},
}
# What each API gets on top of its base: type confusion, nulls, boundaries, unicode.
CHANGES: list[dict[str, Any]] = [
    {"max_tokens": 0}, {"max_tokens": -1}, {"max_tokens": 300}, {"max_tokens": 100000},
    {"max_tokens": "5"}, {"max_tokens": None}, {"max_tokens": 2.0}, {"max_tokens": 2.5},
    {"max_tokens": True}, {"max_output_tokens": 0}, {"max_output_tokens": -1},
    {"max_output_tokens": 100000}, {"max_completion_tokens": 0},
    {"n": 0}, {"n": 2}, {"n": -1}, {"temperature": -1}, {"temperature": 3},
    {"temperature": "x"}, {"top_p": 0}, {"top_p": 1.5}, {"top_k": -2}, {"top_k": 0},
    {"logprobs": 21}, {"logprobs": 20}, {"logprobs": True, "top_logprobs": 21},
    {"top_logprobs": 21}, {"logprobs": True, "top_logprobs": 20},
    {"stop": ["a", "b", "c", "d", "e"]}, {"stop": []}, {"stop": [""]}, {"stop": 5},
    {"stop_sequences": ["a"] * 6}, {"stop_sequences": "x"},
    {"prompt": ""}, {"prompt": []}, {"prompt": [1, 2, 200000]}, {"prompt": [[1, 2], [3]]},
    {"prompt": [-1]}, {"prompt": [[1], "a"]},
    {"prompt": "\U0001f600 \u0645\u0631\u062d\u0628\u0627"},
    {"prompt": "\ud800"}, {"messages": []}, {"messages": [{"role": "user", "content": ""}]},
    {"messages": [{"role": "user"}]}, {"messages": [{"role": "bogus", "content": "x"}]},
    {"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]},
    {"messages": [{"role": "user", "content": "\ud800 \u202e"}]},
    {"input": ""}, {"input": []}, {"input": 5}, {"input": [{"role": "user", "content": "x"}]},
    {"model": "nope"}, {"model": None}, {"model": 5}, {"model": ""},
    {"seed": "x"}, {"seed": -1}, {"presence_penalty": 3}, {"frequency_penalty": -3},
    {"repetition_penalty": 0}, {"min_p": 2}, {"logit_bias": {"999999": 1}},
    {"logit_bias": {"1": 101}}, {"stream": "yes"}, {"stream": None}, {"stream": 1},
    {"echo": 1}, {"user": None}, {"metadata": "x"}, {"system": 5},
    {"system": [{"type": "text", "text": "s"}]},
    {"temperature": None, "top_p": None, "n": None, "stop": None, "seed": None},
    {"tools": "x"}, {"tool_choice": "required"}, {"tool_choice": "none"}, {"instructions": 5},
    {"thinking": {"type": "enabled", "budget_tokens": 1}},
]  # fmt: skip
CHANGES += [
    {"prompt": [[]]}, {"prompt": [True, 2]}, {"prompt": [1.0, 2]}, {"prompt": [[True], [2.0]]},
    {"messages": [{"role": "user", "content": None}]},
    {"messages": [{"role": "system", "content": None}, *M]},
    {"messages": [*M, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "content": None, "tool_call_id": "c1"}]},
    {"messages": [*M, {"role": "assistant", "content": None}]},
    {"messages": [{"role": "weird", "content": None}]},
    {"messages": [{"role": "user", "content": [{"type": "bogus"}]}]},
    {"messages": [{"role": "user", "content": ["x", {"type": "input_text", "text": "y"}]}]},
    {"messages": [{"role": "system", "content": [{"type": "bogus"}]}, *M]},
    {"messages": [{"role": "user", "content": [{"type": "text", "text": "y"}, 3]}]},
    {"reasoning": {"effort": "bogus"}}, {"reasoning": {"effort": "low", "summary": 5}},
    {"reasoning": {"context": "x", "summary": "none"}},
]  # fmt: skip
# Where we still differ from vLLM, and why.
KNOWN: dict[tuple[str, str], str] = {}


def _input_cases() -> list[Any]:
    cases = []
    for path in BASES:
        for change in CHANGES:
            label = json.dumps(change)
            reason = KNOWN.get((path, label))
            marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
            cases.append(pytest.param(path, change, marks=marks, id=f"{path}-{label}"))
    return cases


@pytest.mark.parametrize(
    "messages",
    [
        [3],
        [{"content": "x"}],
        [{"role": "user", "content": None}],
        [{"role": "tool", "content": None, "tool_call_id": "c1"}],
        [{"role": "user", "content": "x", "name": 5}],
        [{"role": "user"}],
        [{"role": "assistant", "content": None}],
    ],
)
def test_tokenize_falls_back_to_the_prompt_when_the_messages_do_not_validate(
    stack: Stack, messages: list[Any]
) -> None:
    # /tokenize's body is a union of the prompt form and the messages form: pydantic takes the
    # prompt form when the messages fail vLLM's message union
    body = {"model": str(tiny_model_dir()), "prompt": "hi", "messages": messages}
    [(status, _, _)] = assert_same(stack, post("/tokenize", body))
    assert status == 200


@pytest.mark.parametrize(
    "parts", [[{"type": "bogus"}], ["x"], [{"type": "text", "text": "x"}, None], [{"text": "x"}]]
)
def test_tokenize_reports_parts_no_part_type_reads_as_vllm(stack: Stack, parts: list[Any]) -> None:
    body = {"model": str(tiny_model_dir()), "messages": [{"role": "user", "content": parts}]}
    [(status, _, _)] = assert_same(stack, post("/tokenize", body))
    assert status == 400


_CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/tokenize"])
@pytest.mark.parametrize(
    "calls",
    [[{"id": "c", "function": {"name": "f", "arguments": "{}"}}],
     [_CALL, {"id": "c2", "function": {"name": "g", "arguments": "{}"}}],
     [{**_CALL, "function": {"name": "f", "arguments": {"city": "Paris"}}}],
     [{**_CALL, "function": {"name": "f"}}], [{**_CALL, "function": {"arguments": "{}"}}],
     [{**_CALL, "function": "f"}], [{**_CALL, "id": 5}], [{**_CALL, "type": "bogus"}],
     [{"id": "c", "type": "custom", "custom": {"name": "x"}}], [{}], ["x"], {"a": 1}, "ab",
     [{**_CALL, "extra": 1}], [], 5, 2.5, True],
)  # fmt: skip
def test_assistant_tool_calls_are_read_like_vllm(stack: Stack, path: str, calls: Any) -> None:
    """Found by a differential probe: vLLM reads an assistant message's tool calls lazily and
    refuses the first one neither tool-call type takes with pydantic's report under
    ``body.<index>`` (ours served a call without ``type``, and answered others in its own
    words). A number or a boolean fails vLLM's ``list(tool_calls)`` before validation: Python's
    TypeError text (ours answered the message union's report)."""
    messages = [{"role": "user", "content": "w?"},
                {"role": "assistant", "content": None, "tool_calls": calls},
                {"role": "user", "content": "ok"}]  # fmt: skip
    body = {"model": str(tiny_model_dir()), "messages": messages}
    if path != "/tokenize":
        body["max_tokens"] = 2
    [(status, _, _)] = assert_same(stack, post(path, body))
    assert status == (200 if calls in ([], [{**_CALL, "extra": 1}]) else 400)


@pytest.mark.parametrize(("path", "change"), _input_cases())
def test_odd_inputs_get_vllms_answer(stack: Stack, path: str, change: dict[str, Any]) -> None:
    body = {"model": str(tiny_model_dir()), **BASES[path], **change}
    [(status, _, _)] = assert_same(stack, post(path, body))
    assert status < 500


def test_the_generation_folders_max_new_tokens_caps_every_request(stack: Stack) -> None:
    # vLLM's override_max_tokens: a request asking for more is answered with the cap's tokens
    # (one API: the cap is applied where every API resolves max_tokens)
    body = {"model": str(tiny_model_dir()), "prompt": "hi", "max_tokens": GENERATION_CAP + 3}
    [(status, _, answer)] = assert_same(stack, post("/v1/completions", body))
    assert status == 200 and answer["usage"]["completion_tokens"] == GENERATION_CAP


_USER = {"role": "user", "content": "hi"}
RESPONSES: list[Any] = [
    # items of the SDK's input union that vLLM's conversion refuses, by their type; an
    # item_reference may leave its type out (vLLM says "None")
    {"input": [_USER, {"type": "item_reference", "id": "msg_1"}]},
    {"input": [{"id": "msg_1"}, _USER]},
    {"input": [_USER, {"type": "web_search_call", "id": "ws", "status": "completed",
                       "action": {"type": "search", "query": "q"}}]},
    {"input": [{"type": "mcp_approval_response", "approval_request_id": "a", "approve": True}]},
    {"input": [_USER, {"type": "compaction_trigger"}]},
    {"input": [{"type": "file_search_call", "id": "f", "queries": [], "status": "completed"}]},
    # a null truncation truncates, then fails building the response (not the length check)
    {"input": "hi " * 300, "truncation": None},
    # the prompt and output as raw text and tokens, streamed or not, a stop string trimming
    # the text (not the tokens)
    {"input": "hi", "enable_response_messages": True},
    {"input": "hi", "enable_response_messages": True, "stream": True},
    {"input": [_USER], "instructions": "be brief", "enable_response_messages": True,
     "stop": ["db"], "max_output_tokens": 6},
    {"input": "hi", "enable_response_messages": True, "stop": ["db"], "max_output_tokens": 6,
     "stream": True},
    # previous_input_messages are Harmony messages or any objects (ours took anything)
    {"input": "hi", "previous_input_messages": [5]},
    {"input": "hi", "previous_input_messages": [{"role": "user", "content": "a"}, "x", None]},
    {"input": "hi", "previous_input_messages": "x"},
    # an additional_tools item is passed on as a developer message without content: served
    # after a user message, refused by the Llama 3 template when first (ours refused both)
    {"input": [_USER, {"type": "additional_tools", "role": "developer", "tools": [
        {"type": "function", "name": "f", "parameters": {"type": "object"}}]}]},
    {"input": [{"type": "additional_tools", "role": "developer", "tools": []}, _USER]},
    {"input": [_USER, {"type": "additional_tools", "role": "developer", "tools": []}],
     "stream": True},
]  # fmt: skip


# built-in tools vLLM validates with the SDK's models and echoes with every field
RESPONSES += [{"input": "hi", "tools": [tool]} for tool in [
    {"type": "web_search", "user_location": {"type": "approximate", "city": "P"},
     "filters": {"allowed_domains": ["a.com"]}},
    {"type": "web_search_preview_2025_03_11", "user_location": {"type": "approximate"}},
    {"type": "file_search", "vector_store_ids": ["v"], "ranking_options": {"ranker": "auto"}},
    {"type": "computer_use_preview", "display_height": 1, "display_width": 2,
     "environment": "linux"},
    {"type": "image_generation", "quality": "low"}, {"type": "local_shell"}, {"type": "shell"},
    {"type": "mcp", "server_label": "x", "allowed_tools": ["a"]}, {"type": "apply_patch"},
    {"type": "code_interpreter", "container": {"type": "auto"}}, {"type": "tool_search"},
]]  # fmt: skip


# custom tools are shown as one-string function shims, namespace functions under flat
# ``<namespace>__<name>`` names; a custom_tool_call input item is a call of the shim
_CUSTOM = {"type": "custom", "name": "patch", "description": "Apply a patch"}
_NAMESPACE = {
    "type": "namespace",
    "name": "crm",
    "description": "CRM",
    "tools": [
        {
            "type": "function",
            "name": "lookup",
            "description": "Find",
            "parameters": {"type": "object", "properties": {}},
        },
        {"type": "custom", "name": "note"},
    ],
}
_OTHER_NAMESPACE = {**_NAMESPACE, "name": "erp"}
_CUSTOM_CALL = {"type": "custom_tool_call", "call_id": "c1", "name": "patch", "input": "x = 1"}
RESPONSES += [
    {"input": "hi", "tools": [_CUSTOM]},
    {"input": "hi", "tools": [_NAMESPACE]},
    {"input": "hi", "tools": [_CUSTOM, _NAMESPACE], "stream": True},
    {"input": [_USER, _CUSTOM_CALL,
               {"type": "custom_tool_call_output", "call_id": "c1", "output": "ok"}],
     "tools": [_CUSTOM]},
    {"input": [_USER, {"type": "message", "role": "assistant", "content": "Sure."},
               _CUSTOM_CALL, {**_CUSTOM_CALL, "call_id": "c2", "input": "é\n\"q\""},
               {"type": "function_call", "call_id": "c3", "name": "lookup", "namespace": "crm",
                "arguments": "{}"}]},
    # a named choice: a custom tool, a namespace function by its flat or (unique) local name
    {"input": "hi", "tools": [_CUSTOM], "tool_choice": {"type": "custom", "name": "patch"}},
    {"input": "hi", "tools": [_NAMESPACE],
     "tool_choice": {"type": "function", "name": "crm__lookup"}},
    {"input": "hi", "tools": [_NAMESPACE], "tool_choice": {"type": "function", "name": "lookup"}},
    {"input": "hi", "tools": [_NAMESPACE], "tool_choice": {"type": "function", "name": "crm"}},
    {"input": "hi", "tools": [_NAMESPACE, _OTHER_NAMESPACE],
     "tool_choice": {"type": "function", "name": "lookup"}},
    {"input": "hi", "tools": [_CUSTOM, _NAMESPACE], "tool_choice": "required"},
    {"input": "hi", "tools": [_CUSTOM], "tool_choice": "required", "stream": True},
    {"input": "hi", "tools": [{"type": "web_search"}], "tool_choice": "required"},
    {"input": "hi", "tools": [{**_NAMESPACE, "tools": [{"type": "custom", "name": "n"}]}],
     "tool_choice": "required"},
    {"input": "hi", "tools": [_CUSTOM, _NAMESPACE], "tool_choice": "none"},
    # the tool choice is echoed as the SDK's model holds it: its fields in order (an MCP
    # choice's unset name null), other keys after (ours echoed it as sent, or dropped keys)
    {"input": "hi", "tools": [_CUSTOM], "tool_choice": {"type": "mcp", "server_label": "x"}},
    {"input": "hi", "tools": [_CUSTOM], "tool_choice": {"type": "custom", "name": "patch",
                                                         "extra": 1}},
    {"input": "hi", "tools": [_CUSTOM], "tool_choice": {"tools": [{"type": "custom",
     "name": "patch"}], "mode": "auto", "type": "allowed_tools"}, "stream": True},
]  # fmt: skip


@pytest.mark.parametrize("fields", RESPONSES, ids=range(len(RESPONSES)))
def test_responses_requests_get_vllms_answer(stack: Stack, fields: dict[str, Any]) -> None:
    body = {"model": str(tiny_model_dir()), "max_output_tokens": 3, **fields}
    seen = {}
    for name, port in stack.ports.items():
        [(status, headers, answer)] = responses(exchange(port, post("/v1/responses", body)))
        if isinstance(answer, list):  # a stream: its events, however the engine steps split
            answer = _coalesced([e for e in answer if isinstance(e, dict)])
        seen[name] = (status, headers, answer)
    assert seen["ours"] == seen["vllm"]
    assert seen["ours"][0] < 500


@pytest.mark.parametrize(
    "tool",
    [{"type": "file_search"}, {"type": "computer_use_preview", "display_width": 2},
     {"type": "mcp"}, {"type": "code_interpreter"}, {"type": "custom"},
     {"type": "namespace", "name": "n"}],
)  # fmt: skip
def test_a_built_in_tool_without_its_required_fields_is_refused_like_vllm(
    stack: Stack, tool: dict[str, Any]
) -> None:
    # vLLM's message lists pydantic's errors for every member of the SDK's tool union; ours
    # those of FunctionTool and of the member the type names (the first, vLLM's param, alike)
    body = {"model": str(tiny_model_dir()), "input": "hi", "tools": [{"type": "function",
            "name": "f"}, tool]}  # fmt: skip
    seen = {}
    for name, port in stack.ports.items():
        [(status, _, answer)] = responses(exchange(port, post("/v1/responses", body)))
        seen[name] = (status, answer["error"]["param"], answer["error"]["type"])
    assert seen["ours"] == seen["vllm"]
    assert seen["ours"][0] == 400 and seen["ours"][1].startswith("body.tools.1.FunctionTool.")


@pytest.mark.parametrize(
    "item",
    [{**_CUSTOM_CALL, "input": 5}, {k: v for k, v in _CUSTOM_CALL.items() if k != "input"},
     {**_CUSTOM_CALL, "name": None}],
)  # fmt: skip
def test_a_malformed_custom_tool_call_item_is_refused_like_vllm(
    stack: Stack, item: dict[str, Any]
) -> None:
    # vLLM's message lists pydantic's errors for every member of the SDK's item union; ours
    # the one rule the item breaks (status, param and type alike)
    body = {"model": str(tiny_model_dir()), "input": [_USER, item], "tools": [_CUSTOM]}
    seen = {}
    for name, port in stack.ports.items():
        [(status, _, answer)] = responses(exchange(port, post("/v1/responses", body)))
        seen[name] = (status, answer["error"]["param"], answer["error"]["type"])
    assert seen["ours"] == seen["vllm"]
    assert seen["ours"][0] == 400


# -- 1 (end). clients that leave ------------------------------------------------------------------

STREAMS = [
    ("/v1/completions", {"prompt": "hi", "max_tokens": 200, "stream": True}),
    ("/v1/chat/completions", {"messages": M, "max_tokens": 200, "stream": True}),
    ("/v1/responses", {"input": "hi", "max_output_tokens": 200, "stream": True}),
    ("/v1/messages", {"messages": M, "max_tokens": 200, "stream": True}),
    ("/v1/chat/completions", {"messages": M, "max_tokens": 200}),
]


def _settled(stack: Stack, name: str, running: int) -> bool:
    deadline = time.monotonic() + 10
    while stack.running(name) != running:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.parametrize(
    ("path", "fields"), STREAMS, ids=[f"{p}-{'stream' in f}" for p, f in STREAMS]
)
@pytest.mark.parametrize("name", ["vllm", "ours"])
def test_a_client_leaving_mid_body_or_mid_stream_aborts_its_engine_request(
    stack: Stack, name: str, path: str, fields: dict[str, Any]
) -> None:
    data = post(path, {"model": str(tiny_model_dir()), **fields})
    assert _settled(stack, name, 0)
    with socket.create_connection(("127.0.0.1", stack.ports[name]), timeout=10) as s:
        s.sendall(data[:-5])  # mid-body: nothing reaches the engine
        time.sleep(0.2)
    with socket.create_connection(("127.0.0.1", stack.ports[name]), timeout=10) as s:
        s.sendall(data)
        assert _settled(stack, name, 1)
        if fields.get("stream"):
            assert s.recv(100).startswith(b"HTTP/1.1 200")
    assert _settled(stack, name, 0), "the engine request was not aborted"


# -- 3. faults ------------------------------------------------------------------------------------


def _ending(answer: list[tuple[int, dict[str, str], Any]]) -> Any:
    """How one answer ends: a whole JSON answer as it is; of a stream, its status, headers and
    last event (the deltas before it depend on how far the engines got)."""
    [(status, headers, body)] = answer
    if not isinstance(body, list):
        return status, headers, body
    return status, headers, body[-1:] if body[-1] == "<cut off>" else body[-2:]


DYING_BACKGROUND = ("/v1/responses", {**STREAMS[2][1], "background": True})
"""A background response (the dying stack has the Responses store): queued at once; streamed,
its events until the engine dies, then the connection is cut, as a direct stream's."""


def _dying_requests() -> list[tuple[str, dict[str, Any]]]:
    """A request of every API, streamed and not, and a background response."""
    return [
        (path, {"model": str(tiny_model_dir()), **fields, "stream": stream})
        for path, fields in [*STREAMS[:4], DYING_BACKGROUND]
        for stream in (False, True)
    ]


@pytest.fixture(scope="module", autouse=True)
def dying(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Future[Stack]]:
    """The last test's stack, whose engines die after :func:`_dying_requests`: started in the
    background as the module's first test starts (a start waits mostly on vLLM's server
    importing vLLM), its engines idle until that test."""
    tmp = tmp_path_factory.mktemp("dying")
    start = _stack(
        tmp,
        "--die-after-requests",
        str(len(_dying_requests())),
        env={"VLLM_ENABLE_RESPONSES_API_STORE": "1"},
    )
    pool = ThreadPoolExecutor(1)
    started = pool.submit(start.__enter__)
    pool.shutdown(wait=False)
    try:
        yield started
    finally:
        if started.exception() is None:
            start.__exit__(None, None, None)


def test_requests_in_flight_when_the_engine_dies_end_like_vllms(dying: Future[Stack]) -> None:
    # The engines die once they have a request of every API, streamed and not: they send
    # ENGINE_CORE_DEAD and exit (how vLLM learns of an external engine's death).
    requests = _dying_requests()
    # vLLM's server exits soon after its first request fails on the dead engine (uvicorn checks
    # for that every 0.1 s), and then refuses new connections: its /health answer is asked on
    # the first request's connection, pipelined behind it. uvicorn starts a pipelined request
    # as soon as the one before it is answered, and lets a request in flight finish when it
    # shuts down.
    first = post(*requests[0]).replace(b"Connection: close\r\n", b"")
    background_stream = len(requests) - 1
    stack = dying.result()
    seen: dict[str, list[Any]] = {}
    hung: dict[str, bool] = {}
    for name in ("vllm", "ours"):
        answers: list[bytes] = [b""] * len(requests)

        def send(i: int, name: str = name, answers: list[bytes] = answers) -> None:
            data = first + request("GET", "/health") if i == 0 else post(*requests[i])
            if i != background_stream:
                answers[i] = exchange(stack.ports[name], data, timeout=60)
                return
            with socket.create_connection(("127.0.0.1", stack.ports[name]), timeout=15) as s:
                s.sendall(data)
                hung[name] = False
                try:
                    while chunk := s.recv(65536):
                        answers[i] += chunk
                except TimeoutError:
                    hung[name] = True

        threads = [threading.Thread(target=send, args=(i,)) for i in range(len(requests))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(90)
        pipelined = responses(answers[0])
        assert len(pipelined) == 2, f"{name} did not answer the pipelined /health"
        answered, health = pipelined
        seen[name] = [_ending([answered])] + [_ending(responses(a)) for a in answers[1:]]
        seen[name].append(health)
    # A background stream: vLLM's replay of its events waits for more after the engine died
    # (and keeps vLLM's server from exiting until the client leaves); ours is cut at once, as
    # a direct Responses stream is on both
    assert hung == {"vllm": True, "ours": False}
    theirs, mine = seen["vllm"].pop(background_stream), seen["ours"].pop(background_stream)
    assert theirs[:2] == mine[:2] and mine[2] == ["<cut off>"]
    messages_stream = next(
        i for i, (path, body) in enumerate(requests) if path == "/v1/messages" and body["stream"]
    )
    # vLLM's Messages stream fails to convert the error chunk and reports pydantic's complaint
    # about it; ours reports the dead engine in the same event
    theirs = seen["vllm"].pop(messages_stream)
    mine = seen["ours"].pop(messages_stream)
    assert theirs[2][0] == "event: error"
    assert theirs[2][1]["error"]["message"].startswith("2 validation errors")
    assert mine[:2] == theirs[:2]
    assert mine[2] == [
        "event: error",
        {"type": "error", "error": {"type": "internal_error", "message": ENGINE_DEAD}},
    ]
    assert seen["ours"] == seen["vllm"]


ENGINE_DEAD = "EngineCore encountered an issue. See stack trace (above) for the root cause."

"""Served requests leave no cyclic garbage: everything a request (and its connection) made is
freed by reference counting when it ends, so the cyclic GC finds nothing to collect.

This is what lets the serving process run the GC's young generation rarely (see
``vllm_frontend.cmd.runner``) without memory piling up between collections: a cycle through a
request would keep its body, prompt and outputs (for an image request, megabytes of pixels)
alive until the next collection. Our frontend runs in-process on uvloop, as the CLI serves, in
front of the mock engine; every request goes on its own connection, closed after the response.
"""

from __future__ import annotations

import gc
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvloop

from tests.e2e.ours import OurServer, start_our_server
from tests.server.support import raw_exchange
from tests.support.engines import free_port
from tests.support.tiny_model import tiny_model_dir

MODEL = "m"
USER = [{"role": "user", "content": "Say something."}]
# Each kind of request: (path, body); the streaming ones end with "data: [DONE]".
REQUESTS: dict[str, tuple[str, dict[str, Any]]] = {
    "completion": ("/v1/completions", {"prompt": "Hello there", "max_tokens": 4}),
    "completion-stream": (
        "/v1/completions",
        {"prompt": "Hello there", "max_tokens": 4, "stream": True},
    ),
    "completion-stream-n2-logprobs-usage": (
        "/v1/completions",
        {
            "prompt": "Hello there",
            "max_tokens": 5,
            "n": 2,
            "logprobs": 2,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        },
    ),
    "completion-stream-stop-string": (
        "/v1/completions",
        {"prompt": "Hello there", "max_tokens": 16, "stop": ["e"], "stream": True},
    ),
    "completion-echo-two-prompts": (
        "/v1/completions",
        {"prompt": ["a b", "c d"], "max_tokens": 3, "echo": True},
    ),
    "completion-refused": ("/v1/completions", {"prompt": "Hello", "max_tokens": -1}),
    "chat": ("/v1/chat/completions", {"messages": USER, "max_tokens": 4}),
    "chat-n3": ("/v1/chat/completions", {"messages": USER, "max_tokens": 4, "n": 3}),
    "chat-stream": ("/v1/chat/completions", {"messages": USER, "max_tokens": 4, "stream": True}),
    "chat-stream-logprobs": (
        "/v1/chat/completions",
        {"messages": USER, "max_tokens": 4, "logprobs": True, "top_logprobs": 2, "stream": True},
    ),
}


@pytest.fixture(scope="module")
def server() -> Iterator[OurServer]:
    """Ours (uvloop, the tokenizers encoder) in front of a mock engine with 1 ms steps."""
    rpc = free_port()
    engine = subprocess.Popen(
        [sys.executable, "-m", "vllm_frontend", "mock-engine",
         "--handshake-address", f"tcp://127.0.0.1:{rpc}", "--max-model-len", "256"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        with pytest.MonkeyPatch.context() as patch:
            # fastokens' load, on a thread, frees a ctypes handle (cyclic) whenever it ends.
            patch.setenv("VLLM_USE_FASTOKENS", "0")
            ours = start_our_server(
                tiny_model_dir(),
                f"tcp://127.0.0.1:{rpc}",
                free_port(),
                timeout=120,
                args={"served_model_name": [MODEL]},
                loop_factory=uvloop.new_event_loop,
            )
        try:
            yield ours
        finally:
            ours.stop()
    finally:
        engine.terminate()
        engine.wait(30)


def _post(server: OurServer, path: str, body: dict[str, Any]) -> bytes:
    data = json.dumps({"model": MODEL, **body}).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
    )
    return raw_exchange(server.port, head.encode() + data)


def _cut_off(server: OurServer, path: str, body: dict[str, Any]) -> None:
    """Send the request and disconnect 50 ms later, reading nothing."""
    data = json.dumps({"model": MODEL, **body}).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(head.encode() + data)
        time.sleep(0.05)


def _garbage_after(
    server: OurServer, path: str, body: dict[str, Any], send: Any = _post
) -> list[str]:
    """The types of what the cyclic GC finds after three such requests."""
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(3):
            send(server, path, body)
        # The server's loop closes the connection after the client has read to the end.
        time.sleep(0.2)
        gc.collect()
        return sorted(f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


@pytest.mark.parametrize("kind", list(REQUESTS))
def test_a_served_request_leaves_no_cyclic_garbage(server: OurServer, kind: str) -> None:
    path, body = REQUESTS[kind]
    reply = _post(server, path, body)  # warm-up: lazily built caches and templates
    status = 400 if kind == "completion-refused" else 200
    assert reply.startswith(f"HTTP/1.1 {status} ".encode()), reply[:300]
    if body.get("stream"):
        assert reply.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n"), reply[-300:]
    assert _garbage_after(server, path, body) == []


@pytest.mark.parametrize("stream", [True, False])
def test_a_request_its_client_left_leaves_no_cyclic_garbage(
    server: OurServer, stream: bool
) -> None:
    # The client goes away while the request still runs (200 tokens at 1 ms steps): the
    # handler is cancelled, the engine request aborted, the connection closed.
    body = {"prompt": "Hello there", "max_tokens": 200, "ignore_eos": True, "stream": stream}
    _cut_off(server, "/v1/completions", body)
    assert _garbage_after(server, "/v1/completions", body, _cut_off) == []

"""Served requests leave no cyclic garbage: everything a request (and its connection) made is
freed by reference counting when it ends, so the cyclic GC finds nothing to collect.

This is what lets the serving process run the GC's young generation rarely (see
``vllm_frontend.cmd.runner``) without memory piling up between collections: a cycle through a
request would keep its body, prompt and outputs (for an image request, megabytes of pixels)
alive until the next collection. Our frontend runs in-process on uvloop, as the CLI serves, in
front of the mock engine; every request goes on its own connection, closed after the response.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.ours import OurServer
from tests.support.cyclic_garbage import cyclic_garbage, ours_on_mock_engine, post
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
    with ours_on_mock_engine(
        tiny_model_dir(), max_model_len=256, args={"served_model_name": [MODEL]}
    ) as ours:
        yield ours


def _post(server: OurServer, path: str, body: dict[str, Any]) -> bytes:
    return post(server, path, {"model": MODEL, **body})


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
    return cyclic_garbage(lambda: send(server, path, body))


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

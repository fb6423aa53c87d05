"""A request's ``traceparent`` / ``tracestate`` headers, as vLLM 0.32's serving code and AsyncLLM
take them: with ``--otlp-traces-endpoint`` they go with every engine request and name the
span's parent; without it they are dropped, with vLLM's warning logged once, after which no
request's headers are looked at."""

from __future__ import annotations

import asyncio
import json
import logging
import pathlib
from typing import Any

import pytest

from tests.server.test_kv_transfer_params import ConnectorClient
from tests.support.generation_app import generation_context
from tests.support.responses import body as body_of
from vllm_frontend.engine.protocol import EngineCoreRequest
from vllm_frontend.server.app import App, ServerSettings
from vllm_frontend.server.chat import ChatHandler
from vllm_frontend.server.completions import CompletionsHandler
from vllm_frontend.server.generation import ServingContext
from vllm_frontend.server.protocol import parse_chat_request, parse_completion_request
from vllm_frontend.server.transport import Request

TRACEPARENT = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
WARNING = "Received a request with trace context but tracing is disabled"


class RecordingClient(ConnectorClient):
    """Keeps the engine requests it gets."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[EngineCoreRequest] = []

    def add_request(self, request: EngineCoreRequest) -> Any:
        self.requests.append(request)
        return super().add_request(request)


class RecordingTracer:
    """Stands in for ``metrics.tracing.RequestTracer``: the finished requests it was told of."""

    def __init__(self) -> None:
        self.finished: list[tuple[Any, ...]] = []

    def request_finished(self, request_id: str, trace_headers: Any, *rest: Any) -> None:
        self.finished.append((request_id, trace_headers, *rest[1:]))


def _app(ctx: ServingContext) -> App:
    app = App(ServerSettings(served_model_names=["m"], max_model_len=128))
    app.route("POST", "/v1/completions", CompletionsHandler(ctx, parse_completion_request))
    app.route("POST", "/v1/chat/completions", ChatHandler(ctx, parse_chat_request))
    return app


def _post(app: App, path: str, body: dict[str, Any], headers: dict[bytes, bytes]) -> int:
    async def go() -> int:
        raw = json.dumps({"model": "m", "max_tokens": 3, **body}).encode()
        request = Request("POST", path, b"", {b"content-type": b"application/json", **headers}, raw)
        response = await app(request)
        await body_of(response)
        return response.status

    return asyncio.run(go())


COMPLETION = ("/v1/completions", {"prompt": "hi", "n": 2, "temperature": 0.5})
CHAT = ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})


def test_with_tracing_the_engine_requests_carry_the_trace_headers(
    tiny_model: pathlib.Path,
) -> None:
    client, tracer = RecordingClient(), RecordingTracer()
    app = _app(generation_context(tiny_model, client, max_model_len=128, tracer=tracer))
    both = {b"traceparent": TRACEPARENT, b"tracestate": b"a=1"}
    assert _post(app, *COMPLETION, both) == 200
    assert _post(app, *CHAT, {b"tracestate": b"a=1"}) == 200
    assert _post(app, *CHAT, {b"x-other": b"1"}) == 200
    sent = [r.trace_headers for r in client.requests]
    expected = {"traceparent": TRACEPARENT.decode(), "tracestate": "a=1"}
    assert sent == [expected, expected, {"tracestate": "a=1"}, None]
    # One span per engine request (the two samples of n=2 too), with the public id and n=1.
    ids = [r.external_req_id for r in client.requests]
    assert [(f[0], f[1], f[-1]) for f in tracer.finished] == [
        (ids[0], expected, 1),
        (ids[1], expected, 1),
        (ids[2], {"tracestate": "a=1"}, 1),
        (ids[3], None, 1),
    ]
    assert ids[0] == ids[1] and ids[0].startswith("cmpl-") and ids[2].startswith("chatcmpl-")


def test_without_tracing_they_are_dropped_with_one_warning(
    tiny_model: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    client = RecordingClient()
    ctx = generation_context(tiny_model, client, max_model_len=128)
    app = _app(ctx)
    with caplog.at_level(logging.WARNING):
        assert _post(app, *CHAT, {}) == 200
        assert ctx.trace is not None  # still looking for the first traced request
        assert _post(app, *CHAT, {b"traceparent": TRACEPARENT}) == 200
        assert _post(app, *COMPLETION, {b"tracestate": b"a=1"}) == 200
    assert [r.trace_headers for r in client.requests] == [None] * 4
    assert [r.getMessage() for r in caplog.records].count(WARNING) == 1
    assert ctx.trace is None  # from then on, requests are not looked at

"""``vllm-frontend serve --otlp-traces-endpoint`` (the shipped command, in front of the mock
engine): a request's span reaches the collector, and the spans still queued at a SIGTERM are
flushed before the process exits (as vLLM's ``atexit`` shutdown of its tracer provider)."""

from __future__ import annotations

import json
import pathlib

import pytest
from tests.support.mock_serve import mock_serve
from tests.support.otlp_collector import grpc_collector

TRACE_ID = "5bf92f3577b34da6a3ce929d0e0e4736"


def test_serve_exports_request_spans_and_flushes_them_at_exit(
    tiny_model: pathlib.Path, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "600000")  # nothing goes out before the exit
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", raising=False)
    with grpc_collector() as collector:
        args = ["--otlp-traces-endpoint", collector.endpoint]
        with mock_serve(tiny_model, tmp_path / "frontend.log", serve_args=args) as serve:
            body = {"model": str(tiny_model), "prompt": "Hello there", "max_tokens": 3}
            status, _ = serve.request(
                "POST", "/v1/completions", json.dumps(body),
                {"traceparent": f"00-{TRACE_ID}-00f067aa0ba902b7-01", "X-Request-Id": "x1"},
            )  # fmt: skip
            assert status == 200
            pid = serve.process.pid
            assert collector.spans() == []
        (span,) = collector.wait_for(lambda s: s.trace_id == TRACE_ID, timeout=10)
    assert span.name == "llm_request" and span.parent_span_id == "00f067aa0ba902b7"
    assert span.attributes["gen_ai.request.id"] == "cmpl-x1-0"
    assert span.attributes["gen_ai.request.max_tokens"] == 3
    assert span.resource["vllm.process_id"] == str(pid)

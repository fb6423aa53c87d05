"""``--otlp-traces-endpoint``: each finished engine request's ``llm_request`` span, received by an
in-process OTLP collector (gRPC and HTTP/protobuf), with vLLM 0.32's name, kind, resource,
attributes and parent context (the values vLLM's do_tracing reads: vllm/v1/engine/
output_processor.py; compared with vLLM's own spans in test_tracing_matches_vllm.py)."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
from tests.llm.tracing_script import (
    PARENT_SPAN_ID,
    REQUESTS,
    TRACE_ID,
    TRACESTATE,
    RecordedEngine,
    run_ours,
)
from tests.support.otlp_collector import ReceivedSpan, grpc_collector, http_collector

from vllm_frontend.engine.protocol import EngineCoreRequest, SamplingParams
from vllm_frontend.llm import LLM, GenerateRequest
from vllm_frontend.metrics import tracing
from vllm_frontend.metrics.frontend import FrontendMetrics
from vllm_frontend.metrics.tracing import RequestTracer, TracingUnavailable

SERVER = 2  # OTLP's Span.SpanKind
TIMING = {
    "gen_ai.latency.time_to_first_token",
    "gen_ai.latency.e2e",
    "gen_ai.latency.time_in_queue",
    "gen_ai.latency.time_in_model_prefill",
    "gen_ai.latency.time_in_model_decode",
    "gen_ai.latency.time_in_model_inference",
}


def _by_id(spans: list[ReceivedSpan]) -> dict[str, ReceivedSpan]:
    return {s.attributes["gen_ai.request.id"]: s for s in spans}


def check_timings(span: ReceivedSpan, queued: float) -> None:
    """The latency figures agree with each other and with the span's own times."""
    a = span.attributes
    assert a["gen_ai.latency.time_in_queue"] == pytest.approx(queued)
    assert 0 < a["gen_ai.latency.time_to_first_token"] <= a["gen_ai.latency.e2e"]
    assert a["gen_ai.latency.time_in_model_prefill"] >= 0
    assert a["gen_ai.latency.time_in_model_decode"] >= 0
    assert a["gen_ai.latency.time_in_model_inference"] == pytest.approx(
        a["gen_ai.latency.time_in_model_prefill"] + a["gen_ai.latency.time_in_model_decode"]
    )
    assert span.start_ns < span.end_ns
    # The span starts at the arrival and ends at the finish, which the e2e latency spans too.
    assert (span.end_ns - span.start_ns) / 1e9 == pytest.approx(a["gen_ai.latency.e2e"], abs=0.05)


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_each_finished_request_exports_vllms_span(
    protocol: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(tracing.PROTOCOL_ENV, protocol)
    monkeypatch.delenv("TRACEPARENT", raising=False)
    collector_cm = grpc_collector() if protocol == "grpc" else http_collector()
    with collector_cm as collector:
        engine = run_ours(REQUESTS, RequestTracer(collector.endpoint))
        spans = _by_id(collector.wait_for(lambda s: True, count=2))
    # The engine requests carry the trace headers too (the engine echoes them).
    assert [r.trace_headers for r in engine.added] == [r["headers"] for r in REQUESTS]
    a, b = spans["cmpl-trace-a-0"], spans["chatcmpl-trace-b"]
    for span in (a, b):
        assert span.name == "llm_request" and span.kind == SERVER
        assert span.scope == "vllm.tracing.otel"
        assert span.resource["vllm.instrumenting_module_name"] == "vllm.llm_engine"
        assert span.resource["vllm.process_id"].isdigit()
        assert span.resource["telemetry.sdk.name"] == "opentelemetry"
    # The parent is the request's traceparent (and its tracestate is kept); no headers: a root.
    assert (a.trace_id, a.parent_span_id, a.trace_state) == (TRACE_ID, PARENT_SPAN_ID, TRACESTATE)
    assert b.parent_span_id == "" and b.trace_id != TRACE_ID
    assert {k: v for k, v in a.attributes.items() if k not in TIMING} == {
        "gen_ai.usage.prompt_tokens": 6,
        "gen_ai.usage.completion_tokens": 4,
        "gen_ai.request.id": "cmpl-trace-a-0",
        "gen_ai.request.top_p": 0.9,
        "gen_ai.request.max_tokens": 4,
        "gen_ai.request.temperature": 0.7,
        "gen_ai.request.n": 1,
    }
    # Greedy: vLLM leaves a zero temperature out.
    assert {k: v for k, v in b.attributes.items() if k not in TIMING} == {
        "gen_ai.usage.prompt_tokens": 7,
        "gen_ai.usage.completion_tokens": 2,
        "gen_ai.request.id": "chatcmpl-trace-b",
        "gen_ai.request.top_p": 1.0,
        "gen_ai.request.max_tokens": 8,
        "gen_ai.request.n": 1,
    }
    assert set(a.attributes) >= TIMING and set(b.attributes) >= TIMING
    check_timings(a, 0.003)
    check_timings(b, 0.0015)


def test_each_sample_of_n_is_a_span_of_n_1(monkeypatch: pytest.MonkeyPatch) -> None:
    # vLLM traces each child request of an n > 1 request, whose parameters say n=1.
    monkeypatch.delenv(tracing.PROTOCOL_ENV, raising=False)
    recorded = {**REQUESTS[0], "id": "cmpl-n", "params": {"max_tokens": 4, "n": 3, "seed": 1}}
    with grpc_collector() as collector:
        engine = RecordedEngine([recorded])
        tracer = RequestTracer(collector.endpoint)
        llm = LLM(engine, EngineCoreRequest, FrontendMetrics("tiny", 256), tracer=tracer)
        request = GenerateRequest(
            request_id="cmpl-n",
            prompt_token_ids=[1, 2, 3],
            n=3,
            sampling_params=SamplingParams(**recorded["params"]),
        )

        async def main() -> None:
            async with llm.generate(request) as stream:
                async for _ in stream:
                    pass

        asyncio.run(main())
        assert tracer.force_flush(10_000)
        spans = collector.wait_for(lambda s: True, count=3)
    assert len(spans) == 3
    assert {s.attributes["gen_ai.request.id"] for s in spans} == {"cmpl-n"}
    assert {s.attributes["gen_ai.request.n"] for s in spans} == {1}
    assert {s.attributes["gen_ai.request.max_tokens"] for s in spans} == {4}


def test_missing_opentelemetry_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace.export", None)
    with pytest.raises(TracingUnavailable) as info:
        tracing.check_tracing()
    message = str(info.value)
    assert message.startswith("OpenTelemetry is not available. Unable to configure")
    assert "pip install 'vllm-frontend-py[otlp]'" in message


def test_an_unknown_protocol_is_refused_with_vllms_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(tracing.PROTOCOL_ENV, "http/json")
    with pytest.raises(TracingUnavailable, match=r"^Unsupported OTLP protocol 'http/json' is "):
        tracing.check_tracing()


def test_importing_the_runner_leaves_opentelemetry_unimported() -> None:
    code = (
        "import sys, vllm_frontend.cmd.runner\n"
        "print(sorted(m for m in sys.modules\n"
        "             if m.startswith(('opentelemetry', 'grpc', 'vllm_frontend.metrics.tracing'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"

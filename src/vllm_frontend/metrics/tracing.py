"""vLLM's request spans over OpenTelemetry (``--otlp-traces-endpoint``).

One ``llm_request`` span (kind SERVER) per finished engine request, with the attributes, times
and parent context vLLM 0.32's ``OutputProcessor.do_tracing`` gives it (vllm/v1/engine/
output_processor.py; names from vllm/tracing/utils.py), exported as vLLM's ``init_tracer``
exports it (vllm/tracing/otel.py): a batch span processor, OTLP over gRPC (insecure) or, with
``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf``, over HTTP, and the resource vLLM's
frontend process reports.

OpenTelemetry is an optional extra (``pip install 'vllm-frontend-py[otlp]'``): it is imported
only when a tracer is made, never at startup without the option. The figures come from the
request's :class:`RequestStats` (what the ``vllm:*`` series are computed from): nothing is added
to the per-token path, and without a tracer nothing at all.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import time
from collections.abc import Mapping
from typing import Any

from vllm_frontend.metrics.request_stats import RequestStats

__all__ = [
    "EXTRA",
    "SPAN_NAME",
    "TRACE_HEADERS",
    "RequestTracer",
    "TracingUnavailable",
    "check_tracing",
]

SPAN_NAME = "llm_request"
"""The name of vLLM's request span."""
TRACE_HEADERS = ("traceparent", "tracestate")
"""The W3C trace-context headers a request's span takes its parent from (vLLM's list)."""
EXTRA = "vllm-frontend-py[otlp]"
"""The optional extra that installs OpenTelemetry."""
INSTRUMENTING_MODULE = "vllm.llm_engine"
"""The ``vllm.instrumenting_module_name`` resource attribute of vLLM's frontend process."""
SCOPE_NAME = "vllm.tracing.otel"
"""The instrumentation scope vLLM's request spans are made under (its ``trace.get_tracer``)."""
PROTOCOL_ENV = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"

# vLLM's SpanAttributes (vllm/tracing/utils.py), in do_tracing's order.
TIME_TO_FIRST_TOKEN = "gen_ai.latency.time_to_first_token"
E2E = "gen_ai.latency.e2e"
TIME_IN_QUEUE = "gen_ai.latency.time_in_queue"
PROMPT_TOKENS = "gen_ai.usage.prompt_tokens"
COMPLETION_TOKENS = "gen_ai.usage.completion_tokens"
TIME_IN_PREFILL = "gen_ai.latency.time_in_model_prefill"
TIME_IN_DECODE = "gen_ai.latency.time_in_model_decode"
TIME_IN_INFERENCE = "gen_ai.latency.time_in_model_inference"
REQUEST_ID = "gen_ai.request.id"
TOP_P = "gen_ai.request.top_p"
MAX_TOKENS = "gen_ai.request.max_tokens"
TEMPERATURE = "gen_ai.request.temperature"
N = "gen_ai.request.n"


class TracingUnavailable(ValueError):
    """``--otlp-traces-endpoint`` cannot be honoured (OpenTelemetry missing, bad protocol)."""


def _otel() -> dict[str, Any]:
    """The OpenTelemetry names vLLM's tracing uses; TracingUnavailable (vLLM's message, and
    the extra to install) when the packages are missing."""
    try:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcExporter,
        )
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HttpExporter,
        )
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.trace import SpanKind
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    except ImportError as e:
        raise TracingUnavailable(
            "OpenTelemetry is not available. Unable to configure 'otlp_traces_endpoint'. "
            f"Ensure OpenTelemetry packages are installed: pip install '{EXTRA}'. "
            f"Original error: {e}"
        ) from None
    return {
        "GrpcExporter": GrpcExporter,
        "HttpExporter": HttpExporter,
        "Resource": Resource,
        "TracerProvider": TracerProvider,
        "BatchSpanProcessor": BatchSpanProcessor,
        "SpanKind": SpanKind,
        "Propagator": TraceContextTextMapPropagator,
    }


def _protocol() -> str:
    protocol = os.environ.get(PROTOCOL_ENV, "grpc")
    if protocol not in ("grpc", "http/protobuf"):
        raise TracingUnavailable(f"Unsupported OTLP protocol '{protocol}' is configured")
    return protocol


def check_tracing() -> None:
    """Raise TracingUnavailable unless a tracer can be made (at startup, before engines)."""
    _otel()
    _protocol()


class RequestTracer:
    """Exports one span per finished engine request to an OTLP endpoint."""

    __slots__ = ("_env_context", "_extract", "_kind", "_provider", "_tracer")

    def __init__(self, endpoint: str) -> None:
        """Set up the exporter to ``endpoint`` (flushed at exit); TracingUnavailable if it
        cannot be."""
        otel = _otel()
        if _protocol() == "grpc":
            exporter = otel["GrpcExporter"](endpoint=endpoint, insecure=True)
        else:
            exporter = otel["HttpExporter"](endpoint=endpoint)
        resource = otel["Resource"].create(
            {"vllm.instrumenting_module_name": INSTRUMENTING_MODULE,
             "vllm.process_id": str(os.getpid())}
        )  # fmt: skip
        provider = otel["TracerProvider"](resource=resource)
        provider.add_span_processor(otel["BatchSpanProcessor"](exporter))
        atexit.register(provider.shutdown)
        self._provider = provider
        self._tracer = provider.get_tracer(SCOPE_NAME)
        self._kind = otel["SpanKind"].SERVER
        self._extract = otel["Propagator"]().extract
        # A request without trace headers gets its parent from this process's environment, as
        # vLLM's spans do (``_get_smart_context``): a launcher's TRACEPARENT / TRACESTATE.
        carrier = {}
        if tp := os.environ.get("traceparent", os.environ.get("TRACEPARENT")):  # noqa: SIM112
            carrier["traceparent"] = tp
        if ts := os.environ.get("tracestate", os.environ.get("TRACESTATE")):  # noqa: SIM112
            carrier["tracestate"] = ts
        self._env_context = self._extract(carrier) if carrier else None

    def request_finished(
        self,
        request_id: str,
        trace_headers: Mapping[str, str] | None,
        stats: RequestStats,
        num_prompt_tokens: int,
        top_p: float | None,
        max_tokens: int | None,
        temperature: float | None,
        n: int | None,
        now: float | None = None,
    ) -> None:
        """Export the span of a finished engine request: ``request_id`` is the public id (the
        engine request's ``external_req_id``); the sampling values are the engine request's
        (vLLM leaves out falsy ones); ``now``: ``time.monotonic()`` at the finish."""
        if now is None:
            now = time.monotonic()
        first = stats.first_token_ts
        last = stats.last_token_ts
        scheduled = stats.scheduled_ts
        # vLLM's arithmetic as it is (no clamping): a request that never ran has zeros.
        attributes: dict[str, Any] = {
            TIME_TO_FIRST_TOKEN: first - stats.arrival_monotonic if first else 0.0,
            E2E: now - stats.arrival_monotonic,
            TIME_IN_QUEUE: scheduled - stats.queued_ts,
            PROMPT_TOKENS: num_prompt_tokens,
            COMPLETION_TOKENS: stats.num_generation_tokens,
            TIME_IN_PREFILL: first - scheduled,
            TIME_IN_DECODE: last - first,
            TIME_IN_INFERENCE: last - scheduled,
            REQUEST_ID: request_id,
        }
        if top_p:
            attributes[TOP_P] = top_p
        if max_tokens:
            attributes[MAX_TOKENS] = max_tokens
        if temperature:
            attributes[TEMPERATURE] = temperature
        if n:
            attributes[N] = n
        context = self._extract(trace_headers) if trace_headers else self._env_context
        span = self._tracer.start_span(
            SPAN_NAME, context=context, kind=self._kind, start_time=int(stats.arrival_time * 1e9)
        )
        span.set_attributes(attributes)
        span.end()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Export the spans still queued (True when done in time)."""
        return bool(self._provider.force_flush(timeout_millis))

    async def aclose(self) -> None:
        """Export the spans still queued and stop exporting (at shutdown; at exit otherwise)."""
        await asyncio.to_thread(self._provider.shutdown)

"""Our request spans against vLLM 0.32's own: the same recorded engine requests and outputs go
through vLLM's ``OutputProcessor`` with tracing on (its ``do_tracing``, exported by its
``init_tracer``, in a process of its own: it sets the global tracer provider and the process
environment) and through our llm layer, each to an in-process OTLP collector. Everything but the
timings must be equal; the timings must be consistent (ordering), as the clocks differ."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from tests.llm.test_tracing import TIMING, check_timings
from tests.llm.tracing_script import REQUESTS, run_ours
from tests.support.otlp_collector import Collector, ReceivedSpan, grpc_collector

from vllm_frontend.metrics import tracing
from vllm_frontend.metrics.tracing import RequestTracer

pytestmark = pytest.mark.oracle

_VLLM_SCRIPT = r"""
import json, sys, time
from opentelemetry import trace
from vllm.sampling_params import RequestOutputKind, SamplingParams
from vllm.tracing import init_tracer
from vllm.v1.engine import (EngineCoreEvent, EngineCoreEventType, EngineCoreOutput,
                            EngineCoreRequest, FinishReason)
from vllm.v1.engine.output_processor import OutputProcessor
from vllm.v1.metrics.stats import IterationStats

spec = json.loads(sys.stdin.read())
init_tracer("vllm.llm_engine", spec["endpoint"])  # what AsyncLLM does with the option
processor = OutputProcessor(None, log_stats=True, tracing_enabled=True)
for r in spec["requests"]:
    params = SamplingParams(**r["params"], output_kind=RequestOutputKind.DELTA)
    request = EngineCoreRequest(
        request_id=r["id"] + "-0a1b2c3d", prompt_token_ids=r["prompt_token_ids"],
        mm_features=None, sampling_params=params, pooling_params=None,
        arrival_time=time.time(), lora_request=None, cache_salt=None,
        data_parallel_rank=None, trace_headers=r["headers"], external_req_id=r["id"])
    processor.add_request(request, None)
    t0 = time.monotonic()
    for step in r["steps"]:
        time.sleep(0.01)
        events = [EngineCoreEvent(EngineCoreEventType(k), t0 + o)
                  for k, o in step.get("events", [])]
        finish = step.get("finish")
        output = EngineCoreOutput(
            request_id=request.request_id, new_token_ids=list(step["tokens"]),
            finish_reason=None if finish is None else FinishReason(finish),
            events=events or None, trace_headers=r["headers"])
        processor.process_outputs([output], time.monotonic(), IterationStats())
trace.get_tracer_provider().shutdown()
"""


def _vllm_spans(collector: Collector, env: dict[str, str]) -> dict[str, ReceivedSpan]:
    spec = json.dumps({"endpoint": collector.endpoint, "requests": REQUESTS})
    out = subprocess.run(
        [sys.executable, "-c", _VLLM_SCRIPT], input=spec, capture_output=True, text=True,
        timeout=300, env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    spans = collector.wait_for(lambda s: True, count=len(REQUESTS))
    return {s.attributes["gen_ai.request.id"]: s for s in spans}


def _ours(collector: Collector) -> dict[str, ReceivedSpan]:
    run_ours(REQUESTS, RequestTracer(collector.endpoint))
    spans = collector.wait_for(lambda s: True, count=len(REQUESTS))
    return {s.attributes["gen_ai.request.id"]: s for s in spans}


def test_our_spans_are_vllms(monkeypatch: pytest.MonkeyPatch) -> None:
    # OTLP/gRPC, vLLM's default (test_tracing.py sends ours over HTTP/protobuf too).
    monkeypatch.delenv(tracing.PROTOCOL_ENV, raising=False)
    for name in ("TRACEPARENT", "traceparent", "TRACESTATE", "tracestate"):
        monkeypatch.delenv(name, raising=False)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_EXPORTER_OTLP_TRACES_E")}
    with grpc_collector() as theirs_collector, grpc_collector() as ours_collector:
        theirs = _vllm_spans(theirs_collector, env)
        ours = _ours(ours_collector)
    assert sorted(ours) == sorted(theirs) == sorted(r["id"] for r in REQUESTS)
    for recorded in REQUESTS:
        mine, vllm = ours[recorded["id"]], theirs[recorded["id"]]
        assert (mine.name, mine.kind, mine.scope) == (vllm.name, vllm.kind, vllm.scope)
        assert list(mine.attributes) == list(vllm.attributes)  # same keys, same order
        assert {k: (v, type(v)) for k, v in mine.attributes.items() if k not in TIMING} == {
            k: (v, type(v)) for k, v in vllm.attributes.items() if k not in TIMING
        }
        # The same resource, but for what names the process.
        per_process = ("vllm.process_id", "service.instance.id")
        assert {k: v for k, v in mine.resource.items() if k not in per_process} == {
            k: v for k, v in vllm.resource.items() if k not in per_process
        }
        assert list(mine.resource) == list(vllm.resource)
        assert mine.resource["vllm.process_id"] == str(os.getpid())
        assert vllm.resource["vllm.process_id"] != mine.resource["vllm.process_id"]
        # The parent context: the traceparent's trace and span ids, its tracestate; else a root.
        assert (mine.parent_span_id, mine.trace_state) == (vllm.parent_span_id, vllm.trace_state)
        assert (mine.trace_id == vllm.trace_id) == (recorded["headers"] is not None)
        queued = recorded["steps"][0]["events"]
        for span in (mine, vllm):
            check_timings(span, queued[1][1] - queued[0][1])

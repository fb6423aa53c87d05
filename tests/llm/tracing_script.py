"""Recorded engine requests and outputs for the tracing tests, and our llm layer run on them.

Each request is plain data (JSON), so that vLLM's own ``OutputProcessor`` can be fed the same
steps in another process (tests/llm/test_tracing_matches_vllm.py). Event timestamps are offsets
from the engine clock (``time.monotonic()``) at the request's start.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from vllm_frontend.engine.protocol import (
    EngineCoreEvent,
    EngineCoreEventType,
    EngineCoreOutput,
    EngineCoreRequest,
    FinishReason,
    SamplingParams,
)
from vllm_frontend.llm import LLM, GenerateRequest
from vllm_frontend.metrics.frontend import FrontendMetrics
from vllm_frontend.metrics.tracing import RequestTracer

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_SPAN_ID}-01"
TRACESTATE = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"

QUEUED, SCHEDULED = int(EngineCoreEventType.QUEUED), int(EngineCoreEventType.SCHEDULED)

REQUESTS: list[dict[str, Any]] = [
    {
        # Sampled, with a parent context; cut by max_tokens.
        "id": "cmpl-trace-a-0",
        "prompt_token_ids": [128000, 9906, 11, 856, 836, 374],
        "params": {"max_tokens": 4, "temperature": 0.7, "top_p": 0.9},
        "headers": {"traceparent": TRACEPARENT, "tracestate": TRACESTATE},
        "steps": [
            {"events": [[QUEUED, 0.001], [SCHEDULED, 0.004]], "tokens": [311]},
            {"tokens": [264]},
            {"tokens": [1296]},
            {"tokens": [13], "finish": int(FinishReason.LENGTH)},
        ],
    },
    {
        # Greedy (temperature 0 is left out), no trace headers (a root span), stopped early.
        "id": "chatcmpl-trace-b",
        "prompt_token_ids": [128000, 128006, 882, 128007, 271, 13347, 128009],
        "params": {"max_tokens": 8, "temperature": 0.0, "top_p": 1.0},
        "headers": None,
        "steps": [
            {"events": [[QUEUED, 0.0005], [SCHEDULED, 0.002]], "tokens": [9906]},
            {"tokens": [128009], "finish": int(FinishReason.STOP)},
        ],
    },
]


class RecordedEngine:
    """An engine client that answers each request with its recorded steps (one per loop turn)."""

    def __init__(self, requests: Sequence[dict[str, Any]]) -> None:
        self._by_id = {r["id"]: r for r in requests}
        self.added: list[EngineCoreRequest] = []

    async def _stream(self, request: EngineCoreRequest) -> AsyncIterator[EngineCoreOutput]:
        recorded = self._by_id[request.external_req_id or ""]
        t0 = time.monotonic()
        for step in recorded["steps"]:
            await asyncio.sleep(0.01)  # past the recorded events
            events = [
                EngineCoreEvent(EngineCoreEventType(kind), t0 + offset)
                for kind, offset in step.get("events", [])
            ]
            finish = step.get("finish")
            yield EngineCoreOutput(
                request_id=request.request_id,
                new_token_ids=list(step["tokens"]),
                finish_reason=None if finish is None else FinishReason(finish),
                events=events or None,
                trace_headers=request.trace_headers,
            )

    def add_request(self, request: Any) -> AsyncIterator[Any]:
        """Start answering ``request``."""
        self.added.append(request)
        return self._stream(request)

    async def abort_requests(self, request_ids: Sequence[str]) -> None:
        """Nothing to abort: every recorded request finishes."""


def run_ours(requests: Sequence[dict[str, Any]], tracer: RequestTracer) -> RecordedEngine:
    """Run ``requests`` through our llm layer (with the metrics the server keeps) and flush the
    tracer; returns the engine with the engine requests it got."""
    engine = RecordedEngine(requests)
    metrics = FrontendMetrics("tiny", max_model_len=256)
    llm = LLM(engine, EngineCoreRequest, metrics, tracer=tracer)

    async def one(recorded: dict[str, Any]) -> None:
        request = GenerateRequest(
            request_id=recorded["id"],
            prompt_token_ids=list(recorded["prompt_token_ids"]),
            sampling_params=SamplingParams(**recorded["params"]),
            trace_headers=recorded["headers"],
        )
        async with llm.generate(request) as stream:
            async for _ in stream:
                pass

    async def main() -> None:
        for recorded in requests:
            await one(recorded)

    asyncio.run(main())
    assert tracer.force_flush(10_000)
    return engine

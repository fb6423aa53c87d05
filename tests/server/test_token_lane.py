"""The token lane: a streamed request's plain running outputs rendered from the engine client's
read loop (``RequestStream.on_output`` → ``GenerationStream.on_tokens`` → the push pump) must
change nothing a client or /metrics can see.

The same scripted engine steps go through the engine client's real per-request streams twice:
once with the lane (what the server does) and once through streams that only offer
``take``/``on_ready`` (the general path). Every SSE event, in order, and every metric sample
must be the same. The text has multi-byte characters split over several byte-level tokens
(empty text updates), some steps carry two tokens, and the requests cover the cases the lane
must decline (logprobs, stop strings, n > 1, echo, continuous usage).
"""

from __future__ import annotations

import asyncio
import functools
import json
import pathlib
import re
from typing import Any

import numpy as np
import pytest

from tests.support.generation_app import generation_app
from tests.support.responses import body as body_of
from tests.support.stream_client import StreamClient
from vllm_frontend.engine.client import RequestStream
from vllm_frontend.engine.protocol import (
    EngineCoreEvent,
    EngineCoreEventType,
    EngineCoreOutput,
    EngineCoreRequest,
    FinishReason,
    LogprobsLists,
    PrefillStats,
)
from vllm_frontend.metrics.frontend import FrontendMetrics
from vllm_frontend.metrics.registry import MetricsRegistry
from vllm_frontend.server.app import App
from vllm_frontend.server.transport import PushedStreamingResponse, Request
from vllm_frontend.text.tokenizer import Tokenizer

TEXT = " Le café 🦊 jumps — naïve 北京 fox; the lazy dog 🐕 sleeps. Stop here, then more."


class _TakeOnly:
    """An engine stream without ``on_output``: every output goes through take()."""

    def __init__(self, stream: RequestStream) -> None:
        self._stream = stream
        self.engine_index = 0

    @property
    def finished(self) -> bool:
        return self._stream.finished

    def take(self) -> list[Any]:
        return self._stream.take()

    def on_ready(self, callback: Any) -> None:
        self._stream.on_ready(callback)

    async def aclose(self) -> None:
        await self._stream.aclose()


class StepClient(StreamClient):
    """Plays the engine: ``step()`` hands each live request its next output, as the engine
    client's read loop does with one engine message."""

    def __init__(self, tokenizer: Tokenizer, lane: bool, first_stats: bool = False) -> None:
        super().__init__()
        self.ids = tokenizer.encode(TEXT, add_special_tokens=False)
        self.lane = lane
        self.first_stats = first_stats  # the first output with prefill stats and events
        self.direct = 0  # outputs the lane took on the spot
        self.running = 0  # running outputs handed over (all but the final ones)

    def _outputs(self, req: EngineCoreRequest) -> list[EngineCoreOutput]:
        params = req.sampling_params
        assert params is not None
        limit = min(len(self.ids), params.max_tokens or len(self.ids))
        rng = np.random.default_rng(limit)
        outs: list[EngineCoreOutput] = []
        i = 0
        while i < limit:
            take = 2 if len(outs) % 5 == 3 else 1  # now and then two tokens in one step
            toks = self.ids[i : i + take]
            i += len(toks)
            out = EngineCoreOutput(req.request_id, toks)
            if params.logprobs is not None:
                k = len(toks)
                out.new_logprobs = LogprobsLists(
                    np.array([[t, (t + 1) % 1000] for t in toks], dtype=np.int32),
                    np.sort(rng.uniform(-5, 0, size=(k, 2)).astype(np.float32))[:, ::-1].copy(),
                    np.ones(k, dtype=np.int32),
                )
            outs.append(out)
        outs[-1].finish_reason = FinishReason.LENGTH
        if self.first_stats:  # as a real engine's first output (timestamps: engine clock)
            prompt = len(req.prompt_token_ids or ())
            outs[0].prefill_stats = PrefillStats(
                num_prompt_tokens=prompt,
                num_computed_tokens=prompt - 1,
                num_cached_tokens=1,
                num_local_cached_tokens=1,
                num_cache_creation_tokens=prompt - 1,
            )
            outs[0].events = [
                EngineCoreEvent(EngineCoreEventType.QUEUED, 1.0),
                EngineCoreEvent(EngineCoreEventType.SCHEDULED, 1.25),
            ]
        return outs

    def add_request(self, request: EngineCoreRequest) -> Any:
        state, stream = self.open_stream(request.request_id)
        self.live[request.request_id] = (state, self._outputs(request))
        return stream if self.lane else _TakeOnly(stream)

    def step(self) -> None:
        for rid, (state, outs) in list(self.live.items()):
            out = outs.pop(0)
            if out.finish_reason is None:
                state.put(out)
                self.running += 1
                self.direct += not state.items
            else:
                del self.live[rid]
                state.finish(out)


@functools.cache
def _tokenizer(model: pathlib.Path) -> Tokenizer:
    return Tokenizer.from_dir(model)


def _app(
    model: pathlib.Path,
    client: StepClient,
    registry: MetricsRegistry | None,
    details: bool = False,
) -> App:
    """``details``: ``--enable-prompt-tokens-details``."""
    metrics = None if registry is None else FrontendMetrics("m", 256, registry=registry)
    return generation_app(
        model,
        client,
        max_model_len=256,
        metrics=metrics,
        tokenizer=_tokenizer(model),
        enable_prompt_tokens_details=details,
    )


async def _stream(
    model: pathlib.Path,
    lane: bool,
    path: str,
    body: dict[str, Any],
    metrics: bool = True,
    first_stats: bool = False,
    details: bool = False,
) -> Any:
    """``first_stats``: the first output carries prefill stats and events; ``details``:
    ``--enable-prompt-tokens-details`` (the usage then reports the cached tokens)."""
    client = StepClient(_tokenizer(model), lane, first_stats)
    registry = MetricsRegistry()
    app = _app(model, client, registry if metrics else None, details)
    raw = json.dumps({**body, "model": "m", "stream": True}).encode()
    response = await app(Request("POST", path, b"", {b"content-type": b"application/json"}, raw))
    assert isinstance(response, PushedStreamingResponse), getattr(response, "body", response)
    reading = asyncio.create_task(body_of(response))
    await _play(client)
    return _seen((await reading).decode(), registry, client)


async def _full(
    model: pathlib.Path, lane: bool, path: str, body: dict[str, Any], first_stats: bool = False
) -> Any:
    """As :func:`_stream`, for a non-streamed request (its running outputs are accumulated
    where the lane takes them, its handler woken only for the others). ``first_stats``: the
    first output carries prefill stats and events, and usage reports the cached tokens."""
    client = StepClient(_tokenizer(model), lane, first_stats)
    registry = MetricsRegistry()
    app = _app(model, client, registry, details=first_stats)
    raw = json.dumps({**body, "model": "m"}).encode()
    headers = {b"content-type": b"application/json"}
    handling = asyncio.create_task(app(Request("POST", path, b"", headers, raw)))
    await _play(client)
    response = await handling
    assert response.status == 200, getattr(response, "body", response)
    return _seen((await body_of(response)).decode(), registry, client)


async def _play(client: StepClient) -> None:
    while not client.live:
        await asyncio.sleep(0)
    while client.live:
        client.step()
        await asyncio.sleep(0)  # one loop iteration per engine step


def _seen(data: str, registry: MetricsRegistry, client: StepClient) -> Any:
    # Ids and timestamps differ from run to run; everything else must not.
    data = re.sub(r'"(chatcmpl|cmpl)-[^"]*"', '"ID"', data)
    data = re.sub(r'"created":\d+', '"created":0', data)
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in registry.collect()
        for s in family.samples
        if not s.name.endswith("_created") and "latency" not in s.name and "time" not in s.name
    }
    # Latency histograms: how many observations, not the (timing-dependent) values.
    counts = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in registry.collect()
        for s in family.samples
        if s.name.endswith("_count")
    }
    return data, samples, counts, client.direct, client.running


CHAT = [{"role": "user", "content": "hi"}]
# (route, body, whether the lane takes its outputs: one sample without logprobs or stops)
BODIES = [
    ("/v1/completions", {"prompt": "hi", "max_tokens": 60}, True),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 60, "stream_options":
                         {"include_usage": True}}, True),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 60, "stream_options":
                         {"include_usage": True, "continuous_usage_stats": True}}, True),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 60, "return_token_ids": True}, True),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 60, "echo": True}, True),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 60, "logprobs": 1}, False),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 60, "stop": ["lazy"]}, False),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 60, "n": 2}, False),
    ("/v1/completions", {"prompt": ["hi", "there"], "max_tokens": 60}, False),
    ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 60}, True),
    ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 60, "stream_options":
                              {"include_usage": True, "continuous_usage_stats": True}}, True),
    ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 60, "logprobs": True,
                              "top_logprobs": 1}, False),
    ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 60, "stop": "dog"}, False),
]  # fmt: skip


@pytest.mark.parametrize("path,body,laned", BODIES)
def test_the_lane_changes_no_event_and_no_metric(
    tiny_model: pathlib.Path, path: str, body: dict[str, Any], laned: bool
) -> None:
    with_lane = asyncio.run(_stream(tiny_model, True, path, body))
    general = asyncio.run(_stream(tiny_model, False, path, body))
    assert with_lane[0] == general[0]
    assert with_lane[1] == general[1]
    assert with_lane[2] == general[2]
    assert general[3] == 0
    # The first output (it carries the prefill metrics) always goes the long way.
    assert (with_lane[3] > 10) if laned else (with_lane[3] == 0)
    events = [e for e in with_lane[0].split("\n\n") if e.startswith("data: {")]
    assert len(events) > 8  # an event per step or so (fewer with a stop string): it ran
    itl = ("vllm:inter_token_latency_seconds_count", (("engine", "0"), ("model_name", "m")))
    assert with_lane[2][itl] > 8


@pytest.mark.parametrize("path,body,laned", [b for b in BODIES if b[2]])
def test_without_metrics_the_lane_also_takes_the_first_tokens(
    tiny_model: pathlib.Path, path: str, body: dict[str, Any], laned: bool
) -> None:
    """With --disable-log-stats there is no prefill to record, so the first output goes the
    lane too (the renderers' first-update handling then runs from it)."""
    with_lane = asyncio.run(_stream(tiny_model, True, path, body, metrics=False))
    general = asyncio.run(_stream(tiny_model, False, path, body, metrics=False))
    assert with_lane[0] == general[0]
    assert general[3] == 0
    assert with_lane[3] == with_lane[4]  # the first output as well


@pytest.mark.parametrize("details", [False, True])
@pytest.mark.parametrize("path,body,laned", BODIES)
def test_a_streams_first_output_takes_the_lane_unless_its_count_is_shown(
    tiny_model: pathlib.Path, path: str, body: dict[str, Any], laned: bool, details: bool
) -> None:
    """A first output with prefill stats and events: without prompt-token details (the cached
    count is never rendered) the lane takes it too, accounting the prefill as take() does; with
    them it goes the long way, its count on the first update. Every event and metric is the
    general path's either way."""
    with_lane = asyncio.run(
        _stream(tiny_model, True, path, body, first_stats=True, details=details)
    )
    general = asyncio.run(_stream(tiny_model, False, path, body, first_stats=True, details=details))
    assert with_lane[0] == general[0]
    assert with_lane[1] == general[1]
    assert with_lane[2] == general[2]
    assert general[3] == 0
    if not laned:
        assert with_lane[3] == 0
    else:
        assert with_lane[3] == with_lane[4] - (1 if details else 0)
    usage = [e for e in with_lane[0].split("\n\n") if '"usage":{' in e and '"choices":[]' in e]
    if details and usage:
        assert '"cached_tokens":1' in usage[-1]  # the first output's count reached the usage


# (route, body, whether the lane takes its outputs: one sample without logprobs or stops)
FULL_BODIES = [
    ("/v1/completions", {"prompt": "hi", "max_tokens": 60}, True),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 60, "return_token_ids": True}, True),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 60, "echo": True}, True),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 60, "logprobs": 1}, False),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 60, "stop": ["lazy"]}, False),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 60, "n": 2}, False),
    ("/v1/completions", {"prompt": ["hi", "there"], "max_tokens": 60}, True),  # one each
    ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 60}, True),
    ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 60, "logprobs": True,
                              "top_logprobs": 1}, False),
    ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 60, "stop": "dog"}, False),
]  # fmt: skip


@pytest.mark.parametrize("path,body,laned", FULL_BODIES)
def test_the_lane_changes_no_full_response_and_no_metric(
    tiny_model: pathlib.Path, path: str, body: dict[str, Any], laned: bool
) -> None:
    with_lane = asyncio.run(_full(tiny_model, True, path, body))
    general = asyncio.run(_full(tiny_model, False, path, body))
    assert with_lane[0] == general[0]
    assert with_lane[1] == general[1]
    assert with_lane[2] == general[2]
    assert general[3] == 0
    assert (with_lane[3] > 10) if laned else (with_lane[3] == 0)
    assert json.loads(with_lane[0])["usage"]["completion_tokens"] > 8  # it ran
    itl = ("vllm:inter_token_latency_seconds_count", (("engine", "0"), ("model_name", "m")))
    assert with_lane[2][itl] > 8


@pytest.mark.parametrize("path,body,laned", FULL_BODIES)
def test_a_full_requests_first_output_takes_the_lane_and_changes_nothing(
    tiny_model: pathlib.Path, path: str, body: dict[str, Any], laned: bool
) -> None:
    """A non-streamed request makes no update before its end, so the lane also takes its first
    output (prefill stats, events, the first tokens' metrics): the response, the cached-token
    count in its usage and every metric are those of the general path."""
    with_lane = asyncio.run(_full(tiny_model, True, path, body, first_stats=True))
    general = asyncio.run(_full(tiny_model, False, path, body, first_stats=True))
    assert with_lane[0] == general[0]
    assert with_lane[1] == general[1]
    assert with_lane[2] == general[2]
    assert general[3] == 0
    details = json.loads(general[0])["usage"]["prompt_tokens_details"]
    assert details["cached_tokens"] == 1  # the first output's count reached the response
    # Every running output, the first included, where a streamed request's first goes the long
    # way (test_the_lane_changes_no_event_and_no_metric).
    assert with_lane[3] == (with_lane[4] if laned else 0)
    prefill = (
        "vllm:request_prefill_kv_computed_tokens_count",
        (("engine", "0"), ("model_name", "m")),
    )
    assert with_lane[2][prefill] == general[2][prefill] > 0

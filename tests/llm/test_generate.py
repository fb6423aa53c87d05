"""The llm facade: n>1 fan-out, seeds, ids, output kinds and aborts, against a scripted engine."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import msgspec
import pytest
from prometheus_client import CollectorRegistry

from vllm_frontend.llm import LLM, GenerateRequest, OutputKind
from vllm_frontend.metrics.frontend import FrontendMetrics


class Params(msgspec.Struct):
    n: int = 1
    seed: int | None = None
    max_tokens: int = 16


class Request(msgspec.Struct, kw_only=True):
    request_id: str
    prompt_token_ids: list[int]
    sampling_params: Params
    external_req_id: str | None = None
    arrival_time: float = 0.0


class Output(msgspec.Struct):
    request_id: str
    new_token_ids: list[int]
    new_logprobs: Any = None
    finish_reason: int | None = None
    stop_reason: int | str | None = None


class ScriptedEngine:
    """Yields `steps` outputs per request, one token each, then finishes with `finish`."""

    def __init__(self, steps: int = 3, finish: int | None = 1, block: bool = False) -> None:
        self.steps = steps
        self.finish = finish
        self.block = block
        self.added: list[Request] = []
        self.aborted: list[str] = []
        self.release = asyncio.Event()

    async def _stream(self, req: Request) -> AsyncIterator[Output]:
        for i in range(self.steps):
            last = i == self.steps - 1
            yield Output(req.request_id, [100 + i], None, self.finish if last else None)
            await asyncio.sleep(0)
        if self.block:
            await self.release.wait()

    def add_request(self, request: Any) -> AsyncIterator[Any]:
        self.added.append(request)
        return self._stream(request)

    async def abort_requests(self, request_ids: Sequence[str]) -> None:
        self.aborted.extend(request_ids)


def _llm(engine: ScriptedEngine, metrics: FrontendMetrics | None = None) -> LLM:
    return LLM(engine, lambda **kw: Request(**{k: kw[k] for k in (
        "request_id", "prompt_token_ids", "sampling_params", "external_req_id", "arrival_time")}),
        metrics)  # fmt: skip


async def _collect(llm: LLM, req: GenerateRequest) -> list[Any]:
    async with llm.generate(req) as stream:
        return [o async for o in stream]


def test_n_samples_become_n_engine_requests_with_consecutive_seeds() -> None:
    engine = ScriptedEngine()
    req = GenerateRequest(request_id="cmpl-abc", prompt_token_ids=[1, 2], n=3,
                          sampling_params=Params(n=3, seed=7))  # fmt: skip
    outs = asyncio.run(_collect(_llm(engine), req))
    assert [r.sampling_params.seed for r in engine.added] == [7, 8, 9]
    assert all(r.sampling_params.n == 1 for r in engine.added)
    assert all(r.external_req_id == "cmpl-abc" for r in engine.added)
    ids = [r.request_id for r in engine.added]
    assert len(set(ids)) == 3
    assert all(i.startswith(f"{k}_cmpl-abc-") for k, i in enumerate(ids))
    finished = sorted(o.index for o in outs if o.finished)
    assert finished == [0, 1, 2]
    assert engine.aborted == []


def test_engine_ids_are_unique_for_the_same_client_id() -> None:
    engine = ScriptedEngine(steps=1)
    llm = _llm(engine)
    for _ in range(2):
        asyncio.run(_collect(llm, GenerateRequest(
            request_id="cmpl-x", prompt_token_ids=[1], sampling_params=Params())))  # fmt: skip
    a, b = (r.request_id for r in engine.added)
    assert a != b and a.startswith("cmpl-x-") and len(a) == len("cmpl-x-") + 8


def test_final_only_yields_one_merged_output_per_sample() -> None:
    engine = ScriptedEngine(steps=4)
    req = GenerateRequest(request_id="r", prompt_token_ids=[1], n=2, sampling_params=Params(n=2),
                          output_kind=OutputKind.FINAL_ONLY)  # fmt: skip
    outs = asyncio.run(_collect(_llm(engine), req))
    assert sorted((o.index, o.token_ids, o.finish_reason) for o in outs) == [
        (0, [100, 101, 102, 103], "length"),
        (1, [100, 101, 102, 103], "length"),
    ]


def test_leaving_early_aborts_every_unfinished_sample() -> None:
    engine = ScriptedEngine(steps=5, finish=None, block=True)
    req = GenerateRequest(request_id="r", prompt_token_ids=[1], n=2, sampling_params=Params(n=2))

    async def main() -> None:
        async with _llm(engine).generate(req) as stream:
            async for _ in stream:
                break

    asyncio.run(main())
    assert sorted(engine.aborted) == sorted(r.request_id for r in engine.added)


def test_finishing_one_sample_aborts_only_that_engine_request() -> None:
    engine = ScriptedEngine(steps=3)

    async def main() -> list[Any]:
        req = GenerateRequest(request_id="r", prompt_token_ids=[1], n=2,
                              sampling_params=Params(n=2))  # fmt: skip
        seen = []
        async with _llm(engine).generate(req) as stream:
            async for o in stream:
                seen.append(o)
                if o.index == 0:
                    await stream.finish_sample(0)
        return seen

    seen = asyncio.run(main())
    assert engine.aborted == [engine.added[0].request_id]
    assert [o for o in seen if o.index == 0][-1].token_ids == [100]
    assert [o for o in seen if o.index == 1][-1].finish_reason == "length"


def test_cancellation_still_aborts_on_the_engine() -> None:
    engine = ScriptedEngine(steps=1, finish=None, block=True)

    async def main() -> None:
        async def consume() -> None:
            req = GenerateRequest(request_id="r", prompt_token_ids=[1], sampling_params=Params())
            async with _llm(engine).generate(req) as stream:
                async for _ in stream:
                    pass

        task = asyncio.create_task(consume())
        while not engine.added:
            await asyncio.sleep(0)
        for _ in range(5):
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert engine.aborted == [engine.added[0].request_id]


def test_metrics_count_each_sample_by_finish_reason() -> None:
    registry = CollectorRegistry()
    metrics = FrontendMetrics("tiny", max_model_len=128, registry=registry)
    engine = ScriptedEngine(steps=3, finish=0)
    req = GenerateRequest(request_id="r", prompt_token_ids=[1, 2, 3], n=2,
                          sampling_params=Params(n=2))  # fmt: skip
    asyncio.run(_collect(_llm(engine, metrics), req))
    labels = {"model_name": "tiny", "engine": "0"}
    got = registry.get_sample_value
    assert got("vllm:request_success_total", {**labels, "finished_reason": "stop"}) == 2
    assert got("vllm:generation_tokens_total", labels) == 6
    assert got("vllm:prompt_tokens_total", labels) == 6
    assert got("vllm:time_to_first_token_seconds_count", labels) == 2
    assert got("vllm:inter_token_latency_seconds_count", labels) == 4
    assert got("vllm:e2e_request_latency_seconds_count", labels) == 2
    assert got("vllm:request_params_n_count", labels) == 1


def test_engine_gauges_report_the_latest_scheduler_stats_per_engine() -> None:
    class Stats(msgspec.Struct):
        num_running_reqs: int
        num_waiting_reqs: int
        kv_cache_usage: float

    from vllm_frontend.metrics.engine_gauges import EngineGauges

    registry = CollectorRegistry()
    latest = {1: Stats(3, 2, 0.25)}
    registry.register(EngineGauges("tiny", [0, 1], lambda: latest))
    got = registry.get_sample_value
    assert got("vllm:num_requests_running", {"model_name": "tiny", "engine": "1"}) == 3
    assert got("vllm:num_requests_waiting", {"model_name": "tiny", "engine": "1"}) == 2
    assert got("vllm:kv_cache_usage_perc", {"model_name": "tiny", "engine": "1"}) == 0.25
    assert got("vllm:num_requests_running", {"model_name": "tiny", "engine": "0"}) == 0


class _BatchedStream:
    """An engine-client stream that hands over everything queued at once (``next_batch``)."""

    def __init__(self, outputs: list[Output]) -> None:
        self._outputs = outputs
        self.engine_index = 0

    async def next_batch(self) -> list[Output]:
        await asyncio.sleep(0)
        batch, self._outputs = self._outputs, []
        return batch

    async def aclose(self) -> None:
        pass


class BatchingEngine(ScriptedEngine):
    """Like ScriptedEngine, but each request's outputs arrive as one batch."""

    def add_request(self, request: Any) -> Any:
        self.added.append(request)
        last = self.steps - 1
        return _BatchedStream([
            Output(request.request_id, [100 + i], None, self.finish if i == last else None)
            for i in range(self.steps)
        ])  # fmt: skip


@pytest.mark.parametrize("n", [1, 3])
def test_outputs_queued_together_arrive_as_one_update_per_sample(n: int) -> None:
    registry = CollectorRegistry()
    metrics = FrontendMetrics("tiny", max_model_len=128, registry=registry)
    engine = BatchingEngine(steps=4, finish=1)
    req = GenerateRequest(request_id="r", prompt_token_ids=[1, 2], n=n,
                          sampling_params=Params(n=n))  # fmt: skip
    outs = asyncio.run(_collect(_llm(engine, metrics), req))
    assert sorted((o.index, o.token_ids, o.finish_reason) for o in outs) == [
        (i, [100, 101, 102, 103], "length") for i in range(n)
    ]
    # Every engine output is still accounted one by one, as vLLM's output processor does.
    labels = {"model_name": "tiny", "engine": "0"}
    assert registry.get_sample_value("vllm:generation_tokens_total", labels) == 4 * n
    assert registry.get_sample_value("vllm:inter_token_latency_seconds_count", labels) == 3 * n
    assert engine.aborted == []


def test_a_consumer_leaving_early_records_no_finished_request_like_vllm() -> None:
    # vLLM's OutputProcessor.abort_requests drops the request without finished-request stats;
    # the tokens it produced so far stay counted.
    registry = CollectorRegistry()
    metrics = FrontendMetrics("tiny", max_model_len=128, registry=registry)
    engine = ScriptedEngine(steps=5, finish=None, block=True)
    req = GenerateRequest(request_id="r", prompt_token_ids=[1], n=2, sampling_params=Params(n=2))

    async def main() -> None:
        async with _llm(engine, metrics).generate(req) as stream:
            async for _ in stream:
                break

    asyncio.run(main())
    labels = {"model_name": "tiny", "engine": "0"}
    got = registry.get_sample_value
    assert got("vllm:request_success_total", {**labels, "finished_reason": "abort"}) == 0
    assert got("vllm:e2e_request_latency_seconds_count", labels) == 0
    assert got("vllm:request_params_n_count", labels) == 0
    assert (got("vllm:generation_tokens_total", labels) or 0) >= 1


def test_abort_by_public_id_reaches_every_unfinished_sample_and_forgets_the_request() -> None:
    async def run() -> None:
        engine = ScriptedEngine(steps=1, finish=None, block=True)
        llm = _llm(engine)
        req = GenerateRequest(request_id="generate-tokens-x", prompt_token_ids=[1], n=2,
                              sampling_params=Params(n=2))  # fmt: skip
        other = GenerateRequest(request_id="cmpl-y", prompt_token_ids=[1], sampling_params=Params())
        async with llm.generate(req) as stream, llm.generate(other) as kept:
            assert sorted(llm.live_request_ids) == ["cmpl-y", "generate-tokens-x"]
            assert await llm.abort(["generate-tokens-x", "unknown"]) == 2
            assert engine.aborted == stream.engine_request_ids
            assert await llm.abort(["cmpl"]) == 0  # ids are matched whole
            assert kept.engine_request_ids[0] not in engine.aborted
        # closing ended both requests: nothing is left to abort
        assert llm.live_request_ids == []
        assert await llm.abort(["generate-tokens-x", "cmpl-y"]) == 0

    asyncio.run(run())


def test_a_finished_request_cannot_be_aborted() -> None:
    async def run() -> None:
        engine = ScriptedEngine(steps=2)
        llm = _llm(engine)
        req = GenerateRequest(request_id="g", prompt_token_ids=[1], sampling_params=Params())
        async with llm.generate(req) as stream:
            outputs = [o async for o in stream]
            assert outputs[-1].finished
            assert llm.live_request_ids == []
            assert await llm.abort(["g"]) == 0
        assert engine.aborted == []

    asyncio.run(run())


class _PushStream:
    """An engine-client stream with the push surface of the engine client's streams (take,
    on_ready, on_output, finish_reason); records whether it was closed."""

    def __init__(self) -> None:
        self.items: list[Output] = []
        self.finish_reason: int | None = None
        self.engine_index = 0
        self.closed = False
        self.callback: Any = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def take(self) -> list[Output]:
        items, self.items = self.items, []
        return items

    def on_ready(self, callback: Any) -> None:
        self.callback = callback

    def on_output(self, handler: Any) -> None:
        pass

    def put(self, output: Output) -> None:
        self.items.append(output)
        if output.finish_reason is not None:
            self.finish_reason = output.finish_reason

    async def aclose(self) -> None:
        self.closed = True


class PushEngine(ScriptedEngine):
    def __init__(self) -> None:
        super().__init__()
        self.streams: list[_PushStream] = []

    def add_request(self, request: Any) -> Any:
        self.added.append(request)
        self.streams.append(_PushStream())
        return self.streams[-1]


@pytest.mark.parametrize("finished", [2, 1, 0])
def test_close_nowait_closes_only_when_nothing_is_left_to_abort(finished: int) -> None:
    # Every sample ended with its final engine output: closed at once, as aclose would (nothing
    # aborted, the engine streams' callbacks dropped); otherwise aclose must run and aborts.
    engine = PushEngine()
    req = GenerateRequest(request_id="r", prompt_token_ids=[1], n=2, sampling_params=Params(n=2))

    async def main() -> None:
        stream = _llm(engine).generate(req)
        stream.on_ready(lambda: None)
        stream.start()
        for i, (added, s) in enumerate(zip(engine.added, engine.streams, strict=True)):
            s.put(Output(added.request_id, [7], None, 1 if i < finished else None))
        stream.take()
        closed = stream.close_nowait()
        assert closed is (finished == 2)
        if closed:
            assert all(s.callback is None and not s.closed for s in engine.streams)
        await stream.aclose()  # idempotent after close_nowait
        unfinished = [a.request_id for a in engine.added[finished:]]
        assert engine.aborted == unfinished
        assert stream.close_nowait()

    asyncio.run(main())

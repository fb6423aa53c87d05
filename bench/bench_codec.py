"""Micro-benchmark of the engine wire codec (vllm_frontend.engine.codec).

Measures what the frontend does per engine step and per request:

* decode one output message carrying 256 request outputs (one new token each, as in a decode
  step of a 256-request batch; with and without sample logprobs, with scheduler stats) and
  dispatch each output to its request's sink (dict lookup + list append, or an
  ``asyncio.Queue`` put/get as the engine client does);
* the same plus reading the logprobs arrays (numpy views, or lists as the text layer does);
* encode one ADD request (20 and 1,000 prompt tokens, typical sampling parameters);
* encode one 256-output message (the mock engine's side).

Run: ``.venv/bin/python bench/bench_codec.py``. Prints the best and the median of 300 short
repeats (the best is the least disturbed by other processes); no thresholds.
"""

from __future__ import annotations

import asyncio
import os
import platform
import statistics
import time
from collections.abc import Callable
from functools import partial

import msgspec
import numpy as np

from vllm_frontend.engine import codec
from vllm_frontend.engine.protocol import (
    EngineCoreOutput,
    EngineCoreOutputs,
    EngineCoreRequest,
    LogprobsLists,
    NdArray,
    RequestOutputKind,
    SamplingParams,
    SchedulerStats,
)

BATCH = 256
Sinks = dict[str, list[EngineCoreOutput]]
Queues = dict[str, asyncio.Queue[EngineCoreOutput]]


def request_ids() -> list[str]:
    # vLLM-style ids: "<user id>-<8 random chars>" with a 36-char completion id.
    return [f"cmpl-{i:032x}-0-{i:08x}" for i in range(BATCH)]


def outputs_message(logprobs: int | None) -> EngineCoreOutputs:
    outputs = []
    for i, rid in enumerate(request_ids()):
        lp = None
        if logprobs is not None:
            lp = LogprobsLists(
                NdArray.from_numpy(np.arange(logprobs + 1, dtype=np.int32).reshape(1, -1)),
                NdArray.from_numpy(np.full((1, logprobs + 1), -0.5, dtype=np.float32)),
                NdArray.from_numpy(np.array([1], dtype=np.int64)),
            )
        outputs.append(EngineCoreOutput(rid, [1000 + i], new_logprobs=lp))
    return EngineCoreOutputs(
        engine_index=0,
        outputs=outputs,
        scheduler_stats=SchedulerStats(num_running_reqs=BATCH, kv_cache_usage=0.42),
        timestamp=12345.678,
        weight_version="default",
    )


def add_request(prompt_len: int) -> EngineCoreRequest:
    params = SamplingParams(
        temperature=0.7,
        top_p=0.95,
        stop=[],
        stop_token_ids=[],
        max_tokens=512,
        eos_token_id=128001,
        all_stop_token_ids=[128001, 128008, 128009],
        bad_words=[],
        skip_reading_prefix_cache=False,
        output_kind=RequestOutputKind.DELTA,
    )
    return EngineCoreRequest(
        request_id=request_ids()[0],
        prompt_token_ids=list(range(1000, 1000 + prompt_len)),
        mm_features=None,
        sampling_params=params,
        pooling_params=None,
        arrival_time=1_700_000_000.25,
        lora_request=None,
        cache_salt=None,
        data_parallel_rank=None,
        external_req_id="cmpl-0",
    )


def measure(fn: Callable[[], object], inner: int, repeats: int = 300) -> tuple[float, float]:
    """(best, median) seconds per call of ``fn`` over ``repeats`` batches of ``inner`` calls.

    Many short batches: on a shared machine the best one approximates an undisturbed run.
    """
    for _ in range(inner):
        fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        samples.append((time.perf_counter() - start) / inner)
    return min(samples), statistics.median(samples)


def report(label: str, per: str, count: int, timing: tuple[float, float]) -> None:
    best, median = timing
    print(
        f"{label:<62} {best / count * 1e6:7.3f} µs/{per} best  {median / count * 1e6:7.3f} median"
    )


def decode_and_dispatch(frames: list[bytes], sinks: Sinks, read: str | None) -> None:
    """What the engine client's output loop does per message (plus, optionally, what the
    text layer does with each output's logprobs)."""
    for out in codec.decode_outputs(frames).outputs:
        sink = sinks.get(out.request_id)
        if sink is not None:
            sink.append(out)
            lp = out.new_logprobs
            if read is not None and lp is not None:
                getattr(lp.logprob_token_ids, read)()
                getattr(lp.logprobs, read)()
                getattr(lp.sampled_token_ranks, read)()
    for sink in sinks.values():
        sink.clear()


def decode_and_queue(frames: list[bytes], queues: Queues) -> None:
    for out in codec.decode_outputs(frames).outputs:
        queue = queues.get(out.request_id)
        if queue is not None:
            queue.put_nowait(out)
    for queue in queues.values():
        queue.get_nowait()


def main() -> None:
    print(
        f"python {platform.python_version()}, msgspec {msgspec.__version__}, "
        f"numpy {np.__version__}, {platform.machine()}, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    ids = request_ids()
    sinks: Sinks = {rid: [] for rid in ids}
    queues: Queues = {rid: asyncio.Queue() for rid in ids}

    for logprobs in (None, 5, 20):
        frames = [bytes(f) for f in codec.encode_outputs(outputs_message(logprobs))]
        kind = "no logprobs" if logprobs is None else f"logprobs={logprobs}"
        print(f"-- 256 outputs, {kind}: {len(frames)} frame(s), {len(frames[0])} B payload")
        report("decode", "output", BATCH, measure(partial(codec.decode_outputs, frames), 5))
        report("decode + dispatch (dict lookup, list append)", "output", BATCH,
               measure(partial(decode_and_dispatch, frames, sinks, None), 5))  # fmt: skip
        report("decode + dispatch (asyncio.Queue put_nowait + get_nowait)", "output", BATCH,
               measure(partial(decode_and_queue, frames, queues), 5))  # fmt: skip
        if logprobs is not None:
            for read in ("tolist", "numpy"):
                report(f"decode + dispatch + 3 logprobs arrays .{read}()", "output", BATCH,
                       measure(partial(decode_and_dispatch, frames, sinks, read), 3))  # fmt: skip

    print("-- requests and engine side")
    for prompt_len in (20, 1000):
        request = add_request(prompt_len)
        report(f"encode ADD ({prompt_len} prompt tokens)", "request", 1,
               measure(partial(codec.encode_request, request), 50))  # fmt: skip
    message = outputs_message(5)
    report("encode 256 outputs (logprobs=5; mock engine side)", "output", BATCH,
           measure(partial(codec.encode_outputs, message), 3))  # fmt: skip


if __name__ == "__main__":
    main()

"""Per-token CPU of the streaming pipeline inside one process, without sockets or an engine.

    .venv/bin/python bench/bench_pipeline.py [--concurrency 64] [--tokens 256] [--route chat]
        [--prefill-stats]

What runs is the frontend's own code from the engine client's per-request streams up to the SSE
bytes: ``RequestStream`` notifications, ``take`` and the token lane (the real engine-client
stream), the llm layer with its metrics, detokenizing, stop handling, chunk building and JSON
encoding in the completions or chat handler, and the HTTP layer's chunk framing. A driver plays
the engine: every "step" it pushes one new token to every running request, as the client's
output loop does for one engine message, then lets the event loop run the consumers (one step per
loop iteration, like 5 ms engine steps where nothing coalesces; ``--behind N`` for N). Left out:
ZMQ, msgpack decoding of engine messages and the socket writes, which bench/run.py measures end to
end. CPU time is this process's (``time.process_time``), so the figure is stable on a busy
machine, unlike the end-to-end benchmark's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import uvloop

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from tests.support.generation_app import generation_app
from tests.support.stream_client import StreamClient
from tests.support.tiny_model import tiny_model_dir

from vllm_frontend.engine.client import RequestStream
from vllm_frontend.engine.protocol import (
    EngineCoreOutput,
    EngineCoreRequest,
    FinishReason,
    PrefillStats,
)
from vllm_frontend.metrics.frontend import FrontendMetrics
from vllm_frontend.metrics.registry import MetricsRegistry
from vllm_frontend.server.app import App
from vllm_frontend.server.transport import PushedStreamingResponse, Request, StreamSink
from vllm_frontend.text.tokenizer import Tokenizer


class _Client(StreamClient):
    """Engine-client stand-in: real per-request streams, tokens pushed by :meth:`step`."""

    def __init__(self, token_ids: Sequence[int], prefill_stats: bool = False) -> None:
        super().__init__()
        self.token_ids = list(token_ids)
        self.prefill_stats = prefill_stats
        """A request's first output carries prefill stats, as the engines' (and the mock's)."""
        self.prompt_lens: dict[str, int] = {}

    def add_request(self, request: EngineCoreRequest) -> RequestStream:
        state, stream = self.open_stream(request.request_id)
        params = request.sampling_params
        assert params is not None and params.max_tokens is not None
        self.live[request.request_id] = (state, 0, params.max_tokens)
        if self.prefill_stats:
            self.prompt_lens[request.request_id] = len(request.prompt_token_ids or ())
        return stream

    def step(self) -> int:
        """One engine step: a token for every running request."""
        ids = self.token_ids
        for rid, (state, done, limit) in list(self.live.items()):
            tok = ids[done % len(ids)]
            out = EngineCoreOutput(rid, [tok])
            if not done and self.prefill_stats:
                prompt = self.prompt_lens.pop(rid)
                out.prefill_stats = PrefillStats(
                    num_prompt_tokens=prompt,
                    num_computed_tokens=prompt,
                    num_cache_creation_tokens=prompt // 16 * 16,
                )
            if done + 1 >= limit:
                del self.live[rid]
                out.finish_reason = FinishReason.LENGTH
                state.finish(out)
            else:
                self.live[rid] = (state, done + 1, limit)
                state.put(out)
        return len(ids)


def _metrics() -> FrontendMetrics | None:
    # The server records per-token metrics unless --disable-log-stats; so does the harness
    # unless BENCH_NO_METRICS is set.
    if os.environ.get("BENCH_NO_METRICS"):
        return None
    return FrontendMetrics("m", max_model_len=4096, registry=MetricsRegistry())


def _app(model: pathlib.Path, client: _Client) -> App:
    tokenizer = Tokenizer.from_dir(model)
    tokenizer.wait_for_fast_encoder(300)  # its load would share the CPU with the measurement
    return generation_app(
        model, client, max_model_len=4096, metrics=_metrics(), tokenizer=tokenizer
    )


class _FramingSink(StreamSink):
    """Counts the bytes the HTTP layer would write: each chunk framed for chunked encoding."""

    def __init__(self) -> None:
        self.size = 0

    def send(self, chunk: bytes) -> None:
        if chunk:
            self.size += len(b"%x\r\n%b\r\n" % (len(chunk), chunk))


async def _consume(app: App, path: str, body: bytes) -> int:
    response = await app(Request("POST", path, b"", {b"content-type": b"application/json"}, body))
    assert isinstance(response, PushedStreamingResponse), getattr(response, "body", response)
    sink = _FramingSink()
    await response.produce(sink)
    return sink.size


async def run(
    concurrency: int,
    tokens: int,
    route: str,
    rounds: int,
    pause: float = 0.0,
    sweep_mb: int = 0,
    steps_per_iteration: int = 1,
    prefill_stats: bool = False,
) -> None:
    """Print CPU microseconds per streamed token for ``rounds`` waves of ``concurrency``
    (``prefill_stats``: each request's first output carries them, as the engines' do)."""
    sweep = np.zeros(sweep_mb * 2**20 // 8) if sweep_mb else None
    model = tiny_model_dir()
    tok = Tokenizer.from_dir(model, use_fastokens=False)  # decodes only
    text = " The quick brown fox jumps over the lazy dog, and the story goes on." * 4
    client = _Client(tok.encode(text, add_special_tokens=False), prefill_stats)
    app = _app(model, client)
    if route == "chat":
        path = "/v1/chat/completions"
        payload: dict[str, Any] = {"messages": [{"role": "user", "content": "Tell a story."}]}
    else:
        path, payload = "/v1/completions", {"prompt": "Tell a story."}
    payload |= {"model": "m", "max_tokens": tokens, "stream": True, "ignore_eos": True}
    body = json.dumps(payload).encode()
    for r in range(rounds + 1):  # round 0 warms up
        tasks = [asyncio.create_task(_consume(app, path, body)) for _ in range(concurrency)]
        await asyncio.sleep(0)
        while not client.live:
            await asyncio.sleep(0)
        t0 = time.process_time()
        steps = 0
        swept = 0.0
        while client.live:
            for _ in range(steps_per_iteration):  # >1: the consumers fall behind
                client.step()
            steps += 1
            await asyncio.sleep(0)  # one loop iteration: every consumer handles its token
            if pause:
                time.sleep(pause)  # the process idles between engine steps, as in a server
            if sweep is not None:  # what other processes do to the caches meanwhile, uncounted
                t = time.process_time()
                sweep += 1.0
                swept += time.process_time() - t
        await asyncio.gather(*tasks)
        cpu = time.process_time() - t0 - swept
        if r:
            per_token = cpu / (concurrency * tokens) * 1e6
            print(f"{route} c{concurrency} round {r}: {per_token:.2f} µs CPU per token "
                  f"({steps} steps)")  # fmt: skip


def main() -> None:
    """Parse arguments and run on uvloop."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--route", choices=("completions", "chat"), default="completions")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--step-ms", type=float, default=0.0, help="sleep this long after each step")
    p.add_argument(
        "--sweep-mb",
        type=int,
        default=0,
        help="write this many MB after each step, outside the measured CPU time (cold caches, "
        "as after an idle period on a busy machine; steadier than --step-ms)",
    )
    p.add_argument(
        "--behind",
        type=int,
        default=1,
        help="engine steps per loop iteration (2+: the frontend reads several at once, as "
        "when it falls behind at 0 ms steps)",
    )
    p.add_argument(
        "--prefill-stats",
        action="store_true",
        help="each request's first output carries prefill stats, as the engines' (and the "
        "mock's) do",
    )
    args = p.parse_args()
    uvloop.run(
        run(
            args.concurrency,
            args.tokens,
            args.route,
            args.rounds,
            args.step_ms / 1e3,
            args.sweep_mb,
            args.behind,
            args.prefill_stats,
        )
    )


if __name__ == "__main__":
    main()

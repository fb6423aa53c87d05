"""CPU per non-streamed short request inside one process, without sockets or an engine.

    .venv/bin/python bench/bench_short.py [--route chat] [--concurrency 32] [--rounds 5]
        [--prefill-stats]

Issue 19's short rows (32-token prompts, 4 output tokens, ``temperature`` 0, not streamed) from
the route handler down to the engine client's per-request streams: JSON parsing and validation,
tokenization (or the chat template), the text and llm layers with their metrics, the final
output, the response body. A driver plays the engine as ``bench_pipeline`` does (one token per
running request per step, one loop iteration per step); a finished request is replaced at once,
so ``--concurrency`` requests are always in flight. Left out: the HTTP transport, the engine
client's encoding and sending, the engine's output decoding and routing, which bench/run.py
measures end to end. CPU time is this process's (``time.process_time``): steadier on a busy
machine than the end-to-end figures, though rounds still spread by ~10% there (read the
lowest).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pathlib
import random
import sys
import time

import uvloop

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from bench.bench_pipeline import _app, _Client
from tests.support.tiny_model import tiny_model_dir

from vllm_frontend.cmd.runner import set_serving_gc
from vllm_frontend.server.transport import Request, Response
from vllm_frontend.text.tokenizer import Tokenizer


def _bodies(model: pathlib.Path, route: str, n: int = 64) -> list[bytes]:
    tok = Tokenizer.from_dir(model, use_fastokens=False)
    rng = random.Random(0)
    vocab = tok.vocab_size
    bodies = []
    for _ in range(n):
        text = tok.decode([rng.randrange(1000, min(vocab, 100000)) for _ in range(32)])
        if route == "chat":
            payload: dict[str, object] = {"messages": [{"role": "user", "content": text}]}
        else:
            payload = {"prompt": text}
        payload |= {"model": "m", "max_tokens": 4, "ignore_eos": True, "temperature": 0}
        bodies.append(json.dumps(payload).encode())
    return bodies


async def run(
    route: str, concurrency: int, rounds: int, requests: int, prefill_stats: bool = False
) -> None:
    """Print CPU microseconds per request for ``rounds`` rounds of ``requests`` requests
    (``prefill_stats``: each request's first output carries them, as the engines' do)."""
    model = tiny_model_dir()
    client = _Client(list(range(1000, 1100)), prefill_stats)
    app = _app(model, client)
    path = "/v1/chat/completions" if route == "chat" else "/v1/completions"
    bodies = _bodies(model, route)
    headers = {b"content-type": b"application/json"}
    set_serving_gc()  # the cyclic GC as the server runs it
    left = 0
    done = 0

    async def one(body: bytes) -> None:
        nonlocal done
        response = await app(Request("POST", path, b"", headers, body))
        assert isinstance(response, Response) and response.status == 200, response
        done += 1

    def start(i: int) -> asyncio.Task[None]:
        return asyncio.get_running_loop().create_task(one(bodies[i % len(bodies)]))

    for r in range(rounds + 1):  # round 0 warms up
        left = requests
        done = 0
        tasks = {start(i) for i in range(concurrency)}
        left -= concurrency
        t0 = time.process_time()
        i = concurrency
        while tasks:
            await asyncio.sleep(0)
            client.step()
            await asyncio.sleep(0)
            finished = {t for t in tasks if t.done()}
            for t in finished:
                t.result()
            tasks -= finished
            for _ in finished:
                if left > 0:
                    tasks.add(start(i))
                    i += 1
                    left -= 1
        cpu = time.process_time() - t0
        if r:
            print(f"{route} c{concurrency} round {r}: {cpu / done * 1e6:.1f} µs CPU per request")


def main() -> None:
    """Parse the options and run."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--route", choices=("completions", "chat"), default="completions")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--requests", type=int, default=5000)
    p.add_argument(
        "--prefill-stats",
        action="store_true",
        help="each request's first output carries prefill stats, as the engines' (and the "
        "mock's) do (without: plain token outputs, as the earlier sessions measured)",
    )
    args = p.parse_args()
    uvloop.run(run(args.route, args.concurrency, args.rounds, args.requests, args.prefill_stats))


if __name__ == "__main__":
    main()

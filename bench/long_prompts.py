"""Streams while long prompts arrive: what a long prompt's encoding costs the running streams.

    .venv/bin/python bench/long_prompts.py [--frontends ours,vllm-rs] [--runs 2] [--chars 24000]

Each frontend in turn, in front of the waiting mock engine (5 ms steps), serves `vllm-rs bench
serve` streaming completions (32-token random prompts, 256 output tokens, concurrency 64, 256
requests) while a side client sends, one after another with 50 ms pauses, completions of one
token for a prompt of ``--chars`` characters of plain words (~6k tokens at the default). Printed
per run: the streams' inter-token latency (mean, p99) and TTFT (mean, p99), and the long
requests' count and mean and median latency; ``--no-long`` runs the streams alone, for the
baseline. Ours loads fastokens in the background once serving (vllm-rs before it answers /health):
the run starts when it has, so that the long requests are timed on the encoder each one serves with.
Compare code versions by putting another checkout's ``src`` on PYTHONPATH (ours only).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import random
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.request

from frontends import await_fastokens, served, tiny_model, vllm_rs_binary

_WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "and", "then"]


def _side_load(port: int, model: str, prompt: str, stop: threading.Event) -> list[float]:
    """Send the long prompt until ``stop``; the latencies, in seconds."""
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": 1}).encode()
    latencies: list[float] = []
    while not stop.is_set():
        t0 = time.monotonic()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                     {"Content-Type": "application/json"})  # fmt: skip
        with urllib.request.urlopen(req, timeout=60) as resp:
            resp.read()
        latencies.append(time.monotonic() - t0)
        stop.wait(0.05)
    return latencies


def run_once(name: str, model: pathlib.Path, prompt: str | None) -> dict[str, float]:
    """One run of ``name``: the streams' latencies and the long requests' (if any)."""
    with served(name, model) as (fe, _mock, port, _startup):
        if name.startswith("ours"):
            await_fastokens(fe.log)
        stop = threading.Event()
        latencies: list[float] = []
        side = None
        if prompt is not None:
            side = threading.Thread(
                target=lambda: latencies.extend(_side_load(port, str(model), prompt, stop))
            )
            side.start()
        with tempfile.TemporaryDirectory() as tmp:
            out = pathlib.Path(tmp) / "result.json"
            cmd = [str(vllm_rs_binary()), "bench", "serve", "--backend", "openai", "--port",
                   str(port), "--model", str(model), "--tokenizer", str(model), "--dataset-name",
                   "random", "--random-input-len", "32", "--random-output-len", "256",
                   "--ignore-eos", "--temperature", "0", "--max-concurrency", "64",
                   "--num-prompts", "256", "--seed", "0", "--disable-tqdm", "--save-result",
                   "--result-dir", tmp, "--result-filename", out.name]  # fmt: skip
            try:
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            finally:
                stop.set()
                if side is not None:
                    side.join(60)
            result = json.loads(out.read_text())
    row = {k: float(result[k]) for k in ("mean_itl_ms", "p99_itl_ms", "mean_ttft_ms",
                                          "p99_ttft_ms")}  # fmt: skip
    row["long_requests"] = float(len(latencies))
    row["long_latency_mean_ms"] = 1000 * sum(latencies) / len(latencies) if latencies else 0.0
    row["long_latency_p50_ms"] = 1000 * statistics.median(latencies) if latencies else 0.0
    return row


def main() -> int:
    """Run and print one line per frontend and run."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--frontends", default="ours,vllm-rs")
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--chars", type=int, default=24000)
    p.add_argument("--no-long", action="store_true", help="no side client: the baseline")
    args = p.parse_args()
    model = tiny_model()
    rng = random.Random(0)
    prompt = " ".join(rng.choice(_WORDS) for _ in range(args.chars))[: args.chars]
    for _ in range(args.runs):  # round-robin, so that a slow spell of the host hits all alike
        for name in args.frontends.split(","):
            row = run_once(name, model, None if args.no_long else prompt)
            print(name, {k: round(v, 1) for k, v in row.items()}, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

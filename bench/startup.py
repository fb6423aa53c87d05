"""Startup time to /health 200 and idle resident memory of each frontend, engine already waiting.

    .venv/bin/python bench/startup.py [--frontends ours,vllm-rs,vllm] [--runs 5]
        [--warmup 1] [--no-tokenizer-cache]

The mock engine is started first and waits in the handshake, so the time measured is the
frontend's own: process start, imports, tokenizer and template loading, handshake, listening.
Each frontend is first started ``--warmup`` times unmeasured: the files it reads are then in the
page cache for all three alike, and ours has built its tokenizer cache (the first start with a
new tokenizer.json loads the original and builds the cache in the background; see
vllm_frontend/text/tokenizer_cache.py). ``--no-tokenizer-cache`` measures ours without it.
RSS is taken after the frontend is healthy and has served one request (it includes the
frontend's non-engine children, e.g. vLLM's API-server process).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys
import time
import urllib.request

from frontends import FRONTENDS, served, tiny_model, tree_rss_bytes


def _one_request(port: int, model: str) -> None:
    body = json.dumps({"model": model, "prompt": "Hello", "max_tokens": 4}).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/completions",
        body,
        {"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        resp.read()


def _wait_for_tokenizer_cache(name: str, model: pathlib.Path, timeout: float = 60.0) -> None:
    """After ours started with no entry for ``model``, let its background builder finish."""
    if name != "ours" or os.environ.get("VLLM_FRONTEND_TOKENIZER_CACHE") == "0":
        return
    from vllm_frontend.text.tokenizer_cache import TokenizerCache

    cache = TokenizerCache.from_env()
    deadline = time.monotonic() + timeout
    while cache is not None and cache.lookup(model / "tokenizer.json") is None:
        if time.monotonic() > deadline:
            print("warning: the tokenizer cache was not built in time", file=sys.stderr)
            return
        time.sleep(0.2)


def main() -> int:
    """Measure and print a table (and JSON with --json)."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--frontends", default=",".join(FRONTENDS))
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1, help="unmeasured starts per frontend first")
    p.add_argument(
        "--no-tokenizer-cache",
        action="store_true",
        help="ours loads the original tokenizer.json (VLLM_FRONTEND_TOKENIZER_CACHE=0)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = p.parse_args()
    if args.no_tokenizer_cache:
        os.environ["VLLM_FRONTEND_TOKENIZER_CACHE"] = "0"
    model = tiny_model()
    results: dict[str, dict[str, float]] = {}
    for name in args.frontends.split(","):
        starts: list[float] = []
        rss: list[int] = []
        for run in range(args.warmup + args.runs):
            with served(name, model) as (fe, _mock, port, startup):
                _one_request(port, str(model))
                time.sleep(0.5)
                if run < args.warmup:
                    _wait_for_tokenizer_cache(name, model)
                    continue
                starts.append(startup)
                rss.append(tree_rss_bytes(fe.pid))
        results[name] = {
            "startup_s_median": statistics.median(starts),
            "startup_s_min": min(starts),
            "startup_s_max": max(starts),
            "idle_rss_mb_median": statistics.median(rss) / 2**20,
        }
        print(f"{name}: {results[name]}", file=sys.stderr)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print("| frontend | startup to /health (median, min-max) | idle RSS (median) |")
        print("|---|---:|---:|")
        for name, r in results.items():
            print(
                f"| {name} | {r['startup_s_median']:.2f} s ({r['startup_s_min']:.2f}-"
                f"{r['startup_s_max']:.2f}) | {r['idle_rss_mb_median']:.0f} MB |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Startup time to /health 200 and idle resident memory of each frontend, engine already waiting.

    .venv/bin/python bench/startup.py [--frontends ours,vllm-rs,vllm,ours-nocache] [--runs 5]
        [--warmup 1]

The mock engine is started first and waits in the handshake, so the time measured is the
frontend's own: process start, imports, tokenizer and template loading, handshake, listening.
Each frontend is first started ``--warmup`` times unmeasured, so the files it reads are in the
page cache for all alike. Our tokenizer cache entry is built before anything starts (the first
start of ours with a new tokenizer.json would build it in the background; see
vllm_frontend/text/tokenizer_cache.py); ``ours-nocache`` is ours without that cache. The
frontends take turns, run after run.
RSS is taken after the frontend is healthy and has served one request, and ours has loaded its
fastokens encoder (it includes the frontend's non-engine children, e.g. vLLM's API-server
process).
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

from frontends import FRONTENDS, await_fastokens, served, tiny_model, tree_rss_bytes

CHOICES = (*FRONTENDS, "ours-nocache")


def _one_request(port: int, model: str) -> None:
    body = json.dumps({"model": model, "prompt": "Hello", "max_tokens": 4}).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/completions",
        body,
        {"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        resp.read()


def _start_once(name: str, model: pathlib.Path) -> tuple[float, int]:
    """Start ``name`` (``ours-nocache``: ours without its tokenizer cache) once: (startup s,
    resident bytes after one request)."""
    no_cache = name == "ours-nocache"
    if no_cache:
        os.environ["VLLM_FRONTEND_TOKENIZER_CACHE"] = "0"
    try:
        with served("ours" if no_cache else name, model) as (fe, _mock, port, startup):
            _one_request(port, str(model))
            time.sleep(0.5)
            if name.startswith("ours") and os.environ.get("VLLM_USE_FASTOKENS") != "0":
                await_fastokens(fe.log)
            return startup, tree_rss_bytes(fe.pid)
    finally:
        os.environ.pop("VLLM_FRONTEND_TOKENIZER_CACHE", None)


def main() -> int:
    """Measure and print a table (and JSON with --json)."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--frontends", default=",".join(FRONTENDS), help=f"of {CHOICES}")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1, help="unmeasured starts per frontend first")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = p.parse_args()
    names = args.frontends.split(",")
    if unknown := set(names) - set(CHOICES):
        p.error(f"unknown frontends {sorted(unknown)}; choose from {CHOICES}")
    model = tiny_model()
    for _ in range(args.warmup):
        for name in names:
            _start_once(name, model)
    starts: dict[str, list[float]] = {name: [] for name in names}
    rss: dict[str, list[int]] = {name: [] for name in names}
    for _ in range(args.runs):  # round-robin, so that a slow spell of the host hits all alike
        for name in names:
            startup, resident = _start_once(name, model)
            starts[name].append(startup)
            rss[name].append(resident)
    results: dict[str, dict[str, float]] = {}
    for name in names:
        results[name] = {
            "startup_s_median": statistics.median(starts[name]),
            "startup_s_min": min(starts[name]),
            "startup_s_max": max(starts[name]),
            "idle_rss_mb_median": statistics.median(rss[name]) / 2**20,
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

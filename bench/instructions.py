"""Instructions per non-streamed short request (``bench/bench_short.py``) under valgrind: a CPU
A/B that other processes' load does not move.

    .venv/bin/python bench/instructions.py [--baseline main] [--route chat] [--requests 1000]

On a machine others load, CPU-time figures spread by 10-40% from run to run (BENCHMARKS.md,
twenty-sixth session) and this VM exposes no hardware counters (``perf stat`` reports
instructions as not supported). Valgrind's cachegrind counts the instructions the process
executes instead: ``bench_short.py`` runs twice per source tree, with ``--base-requests`` and
with ``--base-requests + --requests`` requests, and the difference over ``--requests`` is the
instructions per request, startup excluded. With ``PYTHONHASHSEED=0`` the same code measured
815-831 thousand instructions per completion in four runs (±1%; take the lowest of a few with
``--repeat``), where CPU time spread 69-101 µs in three rounds of one run. Instructions are not
time (cache misses, syscalls' kernel work and the HTTP transport, which bench_short leaves out,
are not in them), so use it to compare changes to the Python request path, and the end-to-end
runs for the rest. Each run takes 1-3 minutes; the two runs of a tree go in parallel.
"""

from __future__ import annotations

import argparse
import atexit
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]
_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


def source_tree(ref: str | None) -> pathlib.Path:
    """``src`` of this checkout (None) or of git ``ref`` (extracted to a temporary directory)."""
    if ref is None:
        return REPO / "src"
    out = pathlib.Path(tempfile.mkdtemp(prefix="vllm-frontend-instr-"))
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", ref, "src"], check=True, capture_output=True
    )
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive.stdout, check=True)
    return out / "src"


def _start(src: pathlib.Path, requests: int, extra: list[str]) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONHASHSEED="0", PYTHONPATH=str(src))
    argv = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
            sys.executable, str(REPO / "bench" / "bench_short.py"), "--rounds", "1",
            "--requests", str(requests), *extra]  # fmt: skip
    return subprocess.Popen(
        argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )


def _instructions(proc: subprocess.Popen[str]) -> int:
    _, err = proc.communicate()
    match = _REFS.search(err)
    if proc.returncode != 0 or match is None:
        raise SystemExit(f"valgrind run failed:\n{err[-2000:]}")
    return int(match.group(1).replace(",", ""))


def per_request(src: pathlib.Path, base: int, requests: int, extra: list[str]) -> float:
    """Instructions per request of ``src``'s request path (two runs in parallel)."""
    small, large = _start(src, base, extra), _start(src, base + requests, extra)
    return (_instructions(large) - _instructions(small)) / requests


def main() -> None:
    """Print instructions per request for this checkout (and ``--baseline``) and the ratio."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--baseline", default=None, help="git ref to compare with")
    p.add_argument("--route", choices=("completions", "chat"), default="completions")
    p.add_argument("--requests", type=int, default=1000)
    p.add_argument("--base-requests", type=int, default=300)
    p.add_argument("--repeat", type=int, default=1, help="measure each tree this many times")
    args = p.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed")
    extra = ["--route", args.route, "--prefill-stats"]
    trees = {"ours": source_tree(None)}
    if args.baseline is not None:
        trees[f"base ({args.baseline})"] = source_tree(args.baseline)
    results: dict[str, list[float]] = {name: [] for name in trees}
    for _ in range(args.repeat):
        for name, src in trees.items():
            results[name].append(per_request(src, args.base_requests, args.requests, extra))
            print(f"{name}: {results[name][-1]:,.0f} instructions per request", flush=True)
    if args.baseline is not None:
        ours, base = (min(v) for v in results.values())
        print(f"ours ÷ base: {ours / base:.4f} (lowest of {args.repeat} each)")


if __name__ == "__main__":
    main()

"""Where a short request's turnaround goes between engine steps (issue 19's short rows).

    .venv/bin/python bench/turnaround.py [--frontends ours,vllm-rs] [--rounds 2]
        [--workload cmpl-short-o4-c32-1ms] [--seconds 3] [--precise-mock]
    .venv/bin/python bench/turnaround.py --analyze DIR   # a run's traces again

Runs ``bench/run.py`` once per frontend and round with ``bench/turnaround/`` on ``PYTHONPATH``,
so the mock engine (every frontend) and our frontend record timestamped events (see that
folder's ``sitecustomize.py``), then reads the traces over the load's steady part.

Mock side, every frontend: the step clock, requests in flight at each step, requests finished
per step, steps per request (concurrency ÷ finished per step: 4 is the minimum with 4 output
tokens, when each replacement joins the very next step), when each step's outputs went out.

Our side: when the frontend reads each step's outputs after the mock sent them, when responses
are written, wrk's turnaround (response written to the next request's bytes read on that
connection), request read to the engine write (linked in order), the send burst's hold
(``engine/outbox.py``) and how many requests a step began during, and how many steps each
replacement missed (by how much).

The tracing costs our frontend a few per cent of its CPU (about eight recorded events per
request) and vllm-rs nothing: compare requests/s from untraced ``bench/run.py`` runs. On a
machine others load, ``chrt -f 10`` in front of the command (SCHED_FIFO for every process of the
run alike) gives figures close to a quiet machine's (BENCHMARKS.md, twenty-sixth session).
"""

from __future__ import annotations

import argparse
import bisect
import collections
import json
import marshal
import os
import pathlib
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[1]
TRACER = REPO / "bench" / "turnaround"


def load(path: pathlib.Path) -> list[tuple[Any, ...]]:
    """The events of one process's trace file, in the order recorded."""
    events: list[tuple[Any, ...]] = []
    with path.open("rb") as f:
        while True:
            try:
                events += marshal.load(f)
            except EOFError:
                return events


def _pct(values: Sequence[float], qs: Sequence[int] = (10, 50, 90)) -> str:
    if not values:
        return "-"
    xs = sorted(values)
    parts = [f"p{q} {xs[min(len(xs) - 1, len(xs) * q // 100)]:.0f}" for q in qs]
    return " / ".join(parts) + f" (n {len(xs)})"


def analyze(directory: pathlib.Path, window_s: float, concurrency: int = 32) -> dict[str, Any]:
    """The turnaround figures of one traced run (one mock trace, at most one of ours)."""
    mocks = sorted(directory.glob("mock-*.trace"))
    if len(mocks) != 1:
        raise SystemExit(f"{directory}: expected one mock trace, found {len(mocks)}")
    mock = load(mocks[0])
    steps = [e for e in mock if e[0] == "S" and e[3] > 0]
    starts = [e[1] for e in steps]
    sent = sorted(e[2] for e in mock if e[0] == "O")
    # The steady load: from shortly after the first step with most requests in flight.
    first = next(e[1] for e in steps if e[3] >= concurrency * 3 // 4)
    t0, t1 = first + 0.3, first + 0.3 + window_s
    window = [i for i, e in enumerate(steps) if t0 <= e[1] <= t1]
    out: dict[str, Any] = {}
    finished = [steps[i][3] - steps[i][4] for i in window]
    in_flight = [steps[i][3] for i in window]
    out["step interval us"] = _pct([(starts[i + 1] - starts[i]) * 1e6 for i in window[:-1]])
    out["in flight at step (mean)"] = f"{statistics.mean(in_flight):.1f}"
    out["steps with all in flight"] = (
        f"{sum(n >= concurrency for n in in_flight) / len(window):.2f}"
    )
    out["finished per step (mean)"] = f"{statistics.mean(finished):.2f}"
    out["steps per request"] = f"{concurrency / statistics.mean(finished):.2f}"
    out["outputs sent after their step began us"] = _pct(
        [(t - starts[bisect.bisect_right(starts, t) - 1]) * 1e6 for t in sent if t0 <= t <= t1]
    )
    fronts = sorted(directory.glob("frontend-*.trace"))
    fe = [e for f in fronts for e in load(f)]
    if not fe:
        return out

    def inside(t: float) -> bool:
        return bool(t0 <= t <= t1)

    def step_before(t: float) -> int:
        return bisect.bisect_right(starts, t) - 1

    read_delay = []
    for e in fe:
        if e[0] == "D" and inside(e[1]):
            j = bisect.bisect_right(sent, e[1]) - 1
            if j >= 0:
                read_delay.append((e[1] - sent[j]) * 1e6)
    out["outputs read after the mock sent them us"] = _pct(read_delay)
    delivered = sorted(e[1] for e in fe if e[0] == "D")

    def step_of_write(w: float) -> int:
        """The step whose outputs a response written at ``w`` answers: the step before the
        mock's last send before our last read of outputs before ``w``."""
        d = bisect.bisect_right(delivered, w) - 1
        o = bisect.bisect_right(sent, delivered[d]) - 1 if d >= 0 else -1
        return step_before(sent[o]) if o >= 0 else -1

    out["response written after its step began us"] = _pct(
        [(e[1] - starts[step_of_write(e[1])]) * 1e6 for e in fe if e[0] == "W" and inside(e[1])]
    )
    out["response written after its outputs were read us"] = _pct(
        [
            (e[1] - delivered[bisect.bisect_right(delivered, e[1]) - 1]) * 1e6
            for e in fe
            if e[0] == "W" and inside(e[1])
        ]
    )
    notified = sorted(e[1] for e in fe if e[0] == "N" and e[2])
    out["Notifier ran after outputs were read us"] = _pct(
        [
            (t - delivered[bisect.bisect_right(delivered, t) - 1]) * 1e6
            for t in notified
            if inside(t) and bisect.bisect_right(delivered, t) > 0
        ]
    )
    out["response written after the Notifier ran us"] = _pct(
        [
            (e[1] - notified[bisect.bisect_right(notified, e[1]) - 1]) * 1e6
            for e in fe
            if e[0] == "W" and inside(e[1]) and bisect.bisect_right(notified, e[1]) > 0
        ]
    )
    # Link each request's events in the order our loop made them: a request's bytes (one read
    # each on these rows; smaller reads, such as health checks, are not requests here) are
    # handed to the send burst in arrival order, and the burst writes in hand-off order.
    reads: collections.deque[tuple[Any, ...]] = collections.deque()
    handed: collections.deque[tuple[tuple[Any, ...], float]] = collections.deque()
    linked: list[tuple[tuple[Any, ...], float, float]] = []  # (read event, handed, written)
    for e in fe:
        if e[0] == "R" and e[2] >= 300:
            reads.append(e)
        elif e[0] == "C" and reads:
            handed.append((reads.popleft(), e[1]))
        elif e[0] == "P":
            for _ in range(min(e[3], len(handed))):
                read, c = handed.popleft()
                linked.append((read, c, e[1]))
    by_read = {id(r): (c, p) for r, c, p in linked}
    last_write: dict[int, float] = {}
    wrk, handling, holds, missed, late, crossed = [], [], [], [], [], 0
    for e in sorted([x for x in fe if x[0] == "W"] + [r for r, _, _ in linked], key=lambda x: x[1]):
        if e[0] == "W":
            last_write[e[-1]] = e[1]
            continue
        w = last_write.pop(e[-1], None)
        if w is None or not inside(e[1]):
            continue
        c, p = by_read[id(e)]
        k = step_of_write(w)
        joined = bisect.bisect_left(starts, p)
        if k < 0 or joined >= len(starts) or k + 1 >= len(starts):
            continue
        wrk.append((e[1] - w) * 1e6)
        handling.append((c - e[1]) * 1e6)
        holds.append((p - c) * 1e6)
        missed.append(joined - (k + 1))
        if joined > k + 1:
            late.append((p - starts[k + 1]) * 1e6)
            if c < starts[k + 1]:
                crossed += 1  # handed to the burst before the step began, written after
    out["wrk: response written to next request read us"] = _pct(wrk)
    out["request read to handed to the send burst us"] = _pct(handling)
    out["burst hold us"] = _pct(holds, (50, 75, 90))
    counts = collections.Counter(missed)
    out["steps missed 0/1/2/3+ (share)"] = " / ".join(
        f"{c / max(len(missed), 1):.2f}"
        for c in (counts[0], counts[1], counts[2], sum(v for k, v in counts.items() if k >= 3))
    )
    out["missed ones: ADD written after the next step began us"] = _pct(late)
    out["missed the next step only in the burst (share of requests)"] = (
        f"{crossed / max(len(missed), 1):.3f}"
    )
    return out


def run_round(
    frontend: str, workload: str, seconds: float, precise: bool, directory: pathlib.Path
) -> dict[str, Any]:
    """One traced ``bench/run.py`` run of ``frontend``; its result row."""
    directory.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["TURNAROUND_TRACE_DIR"] = str(directory)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TRACER), env.get("PYTHONPATH")]))
    argv = [sys.executable, str(REPO / "bench" / "run.py"), "--frontends", frontend,
            "--api-server-count", "1", "--workloads", workload, "--seconds", f"{seconds:g}",
            "--out", str(directory / "run.json")]  # fmt: skip
    if precise:
        argv.append("--precise-mock")
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.6)  # the tracers' last flush
    rows = json.loads((directory / "run.json").read_text())["runs"]
    row: dict[str, Any] = rows[0]
    return row


def main() -> None:
    """Run the traced rounds (or analyze a directory of them) and print the figures."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--frontends", default="ours,vllm-rs")
    p.add_argument("--workload", default="cmpl-short-o4-c32-1ms")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--precise-mock", action="store_true")
    p.add_argument("--out", type=pathlib.Path, default=None, help="traces' directory")
    p.add_argument("--analyze", type=pathlib.Path, default=None, help="only read DIR's traces")
    args = p.parse_args()
    window = max(args.seconds - 0.6, 0.5)
    if args.analyze is not None:
        for d in sorted(x for x in args.analyze.iterdir() if x.is_dir()):
            print(f"\n## {d.name}")
            for k, v in analyze(d, window).items():
                print(f"- {k}: {v}")
        return
    out = args.out or REPO / "bench" / "results" / time.strftime("turnaround-%Y%m%d-%H%M%S")
    for r in range(args.rounds):
        for fe in args.frontends.split(","):
            d = out / f"{fe}-{r + 1}"
            row = run_round(fe, args.workload, args.seconds, args.precise_mock, d)
            print(f"\n## {d.name}: {row.get('requests_s', 0):.0f} requests/s, "
                  f"load {os.getloadavg()[0]:.1f}")  # fmt: skip
            for k, v in analyze(d, window).items():
                print(f"- {k}: {v}")


if __name__ == "__main__":
    main()

"""bench/turnaround.py's analysis on hand-made traces whose timeline is known by construction."""

from __future__ import annotations

import marshal
import pathlib
import sys
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

from turnaround import analyze  # noqa: E402

MS = 1e-3
US = 1e-6
STEPS = 1000  # 1 s of 1 ms steps, 32 in flight, 8 finishing per step: 4 steps per request


def _write(path: pathlib.Path, events: list[tuple[Any, ...]]) -> None:
    with path.open("wb") as f:
        marshal.dump(events[: len(events) // 2], f)  # two chunks, as the tracer appends them
        marshal.dump(events[len(events) // 2 :], f)


def _mock() -> list[tuple[Any, ...]]:
    events: list[tuple[Any, ...]] = []
    for k in range(STEPS):
        start = 100.0 + k * MS
        events.append(("S", start, start + 50 * US, 32, 24, k + 1))
        events.append(("O", start + 60 * US, start + 80 * US, 1))
    return events


def _frontend() -> list[tuple[Any, ...]]:
    """Per step: outputs read at +100 µs; connection 1's response at +200, its next request
    read at +300, handed over at +400 and written at +450 (it joins the next step); connection
    2's response at +250, its next request read at +900, handed over at +950, written with a
    later request at +1050, after the next step began at +1000 (one step missed, in the burst
    only). A health check (a small read) and a startup write without a hand-off come first."""
    events: list[tuple[Any, ...]] = [("R", 99.0, 80, 7), ("P", 99.5, 99.5001, 1)]
    for k in range(STEPS - 2):
        s = 100.0 + k * MS
        events += [
            ("D", s + 100 * US, 1),
            ("N", s + 150 * US, 2),
            ("W", s + 200 * US, s + 210 * US, 400, 1),
            ("W", s + 250 * US, s + 260 * US, 400, 2),
            ("R", s + 300 * US, 500, 1),
            ("C", s + 400 * US),
            ("P", s + 450 * US, s + 460 * US, 1),
            ("R", s + 900 * US, 500, 2),
            ("C", s + 950 * US),
        ]
        # connection 2's request goes out with the next step's first one (below at +1050)
        events.append(("P", s + 1050 * US, s + 1060 * US, 1))
    return events


def test_figures_of_a_known_timeline(tmp_path: pathlib.Path) -> None:
    _write(tmp_path / "mock-1.trace", _mock())
    _write(tmp_path / "frontend-2.trace", _frontend())
    out = analyze(tmp_path, window_s=0.5)
    assert out["steps per request"] == "4.00"
    assert out["in flight at step (mean)"] == "32.0"
    assert out["steps with all in flight"] == "1.00"
    assert out["outputs sent after their step began us"].startswith("p10 80 / p50 80 / p90 80")
    assert out["outputs read after the mock sent them us"].startswith("p10 20 / p50 20")
    assert out["response written after its step began us"].startswith("p10 200 / p50 250")
    assert out["response written after its outputs were read us"].startswith("p10 100 / p50 150")
    assert out["Notifier ran after outputs were read us"].startswith("p10 50 / p50 50")
    # connection 1: 300 - 200 = 100; connection 2: 900 - 250 = 650
    assert out["wrk: response written to next request read us"].startswith("p10 100 / p50 650")
    assert out["request read to handed to the send burst us"].startswith("p10 50 / p50 100")
    assert out["burst hold us"].startswith("p50 100 / p75 100")  # 50 and 100 µs
    assert out["steps missed 0/1/2/3+ (share)"] == "0.50 / 0.50 / 0.00 / 0.00"
    late = out["missed ones: ADD written after the next step began us"]
    assert late.startswith("p10 50 / p50 50")
    assert out["missed the next step only in the burst (share of requests)"] == "0.500"


def test_no_frontend_trace_gives_the_mock_side_only(tmp_path: pathlib.Path) -> None:
    _write(tmp_path / "mock-1.trace", _mock())
    out = analyze(tmp_path, window_s=0.5)
    assert out["steps per request"] == "4.00"
    assert "burst hold us" not in out

"""Smoke run of the image chat benchmark (bench/multimodal.py --quick): ours behind the mock
engine with the tiny Qwen2-VL. Checks that one command produces every figure the comparison
needs and that every image request succeeded, not how fast anything is."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
FIGURES = (
    "wall_s", "images_per_s", "cpu_ms_per_request", "cpu_user_s", "cpu_sys_s", "ttft_p50_ms",
    "latency_p50_ms", "peak_rss_mb", "startup_s",
)  # fmt: skip


def test_quick_run_reports_every_figure(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "mm.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "multimodal.py"), "--quick", "--output", str(out)],
        capture_output=True, text=True, timeout=600, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    [row] = json.loads(out.read_text())["rows"]
    assert row["frontend"] == "ours" and row["workload"] == "distinct-c4"
    assert row["ok"] == row["requests"] == 8
    missing = [k for k in FIGURES if not isinstance(row.get(k), int | float)]
    assert not missing, (missing, row)
    assert row["cpu_ms_per_request"] > 0 and row["peak_rss_mb"] > 0
    assert 0 < row["ttft_p50_ms"] <= row["latency_p50_ms"]
    assert "| distinct-c4 | ours | 8/8 |" in done.stdout

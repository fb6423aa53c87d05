"""Smoke run of the frontend benchmark suite (bench/run.py --quick): ours behind the mock engine.

Checks that one command produces every figure the comparison needs, not how fast anything is.
Skipped when vllm-rs (whose `bench serve` is the load client) cannot be fetched.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
from typing import Any

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]

STREAM_FIGURES = (
    "output_tok_s", "requests_s", "ttft_mean_ms", "ttft_p50_ms", "ttft_p99_ms", "itl_mean_ms",
    "itl_p99_ms", "frontend_cpu_s", "frontend_cpu_us_per_token", "client_cpu_s", "peak_rss_mb",
    "startup_s", "loadavg_start",
)  # fmt: skip
SHORT_FIGURES = (
    "output_tok_s", "requests_s", "latency_mean_ms", "latency_p99_ms", "frontend_cpu_us_per_token",
    "peak_rss_mb", "startup_s",
)  # fmt: skip


@pytest.fixture(scope="module")
def quick_report(vllm_rs: pathlib.Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The JSON report of one `bench/run.py --quick --frontends ours` (plus its stdout)."""
    out = tmp_path_factory.mktemp("bench") / "report.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "run.py"), "--quick", "--frontends", "ours",
         "--out", str(out)],
        capture_output=True, text=True, timeout=600, cwd=REPO,
        env={**os.environ, "VLLM_RS": str(vllm_rs)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads(out.read_text())
    report["stdout"] = done.stdout
    return report


def test_quick_run_reports_streaming_figures_for_completions_and_chat(
    quick_report: dict[str, Any],
) -> None:
    runs = {r["workload"]: r for r in quick_report["runs"]}
    for name in ("cmpl-stream-c8-5ms", "chat-stream-c8-5ms"):
        run = runs[name]
        assert "error" not in run, run
        assert run["frontend"] == "ours"
        assert run["failed"] == 0 and run["completed"] == 16
        assert run["output_tokens"] == 16 * 32  # ignore_eos: every request ran to max_tokens
        missing = [k for k in STREAM_FIGURES if not isinstance(run.get(k), int | float)]
        assert not missing, (missing, run)
        assert run["output_tok_s"] > 0 and run["peak_rss_mb"] > 0 and run["startup_s"] > 0


def test_quick_run_reports_short_non_streaming_requests(quick_report: dict[str, Any]) -> None:
    run = next(r for r in quick_report["runs"] if r["workload"] == "cmpl-short-c16-5ms")
    if shutil.which("wrk") is None:
        assert "wrk" in run["skipped"]
        pytest.skip("wrk not installed")
    assert "error" not in run, run
    assert run["checked_completion_tokens"] == 8
    assert run["failed"] == 0 and run["completed"] > 0
    missing = [k for k in SHORT_FIGURES if not isinstance(run.get(k), int | float)]
    assert not missing, (missing, run)


def test_quick_run_prints_a_markdown_table_with_every_run(quick_report: dict[str, Any]) -> None:
    lines = quick_report["stdout"].splitlines()
    assert any(x.startswith("| workload | frontend | out tok/s") for x in lines)
    for run in quick_report["runs"]:
        assert any(x.startswith(f"| {run['workload']} | ours ") for x in lines), run["workload"]
    assert quick_report["command"].startswith(".venv/bin/python bench/run.py --quick")
    assert len(quick_report["machine"]["loadavg_start"]) == 3


def test_quick_run_carries_issue_19s_short_and_long_prompt_rows(
    quick_report: dict[str, Any],
) -> None:
    runs = {r["workload"]: r for r in quick_report["runs"]}
    for name, num_prompts in (
        ("cmpl-stream-o4-c32-1ms", 400),
        ("chat-stream-o4-c32-1ms", 400),
        ("cmpl-stream-i2k-c8-1ms", 16),
        ("chat-stream-i2k-c8-1ms", 16),
    ):
        run = runs[name]
        assert "error" not in run, run
        assert run["failed"] == 0 and run["completed"] == num_prompts, run
        assert run["output_tokens"] == num_prompts * run["output_len"]
        # A number; not necessarily positive in a run this short on a busy host (the idle rate
        # taken off for the client's set-up can exceed the little CPU 16 requests cost).
        assert isinstance(run["frontend_cpu_us_per_request"], float)
    assert runs["cmpl-stream-i2k-c8-1ms"]["input_len"] == 2000
    for name in ("cmpl-short-o4-c32-1ms", "chat-short-o4-c32-1ms"):
        run = runs[name]
        if shutil.which("wrk") is None:
            assert "wrk" in run["skipped"]
            continue
        assert "error" not in run, run
        assert run["checked_completion_tokens"] == 4
        assert run["failed"] == 0 and run["completed"] > 0


def test_quick_run_carries_the_over_long_prompts_refusal_rows(quick_report: dict[str, Any]) -> None:
    runs = {r["workload"]: r for r in quick_report["runs"]}
    for name in ("cmpl-refuse-i16k-c8-1ms", "chat-refuse-i16k-c8-1ms"):
        run = runs[name]
        if shutil.which("wrk") is None:
            assert "wrk" in run["skipped"]
            continue
        assert "error" not in run, run
        assert "maximum context length is 8192 tokens" in run["checked_refusal"]
        # every answer was the 400: none served, none failed otherwise
        assert run["not_refused"] == 0 and run["failed"] == 0 and run["completed"] > 0, run
        assert run["output_tokens"] == 0 and run["input_len"] == 16000
        assert isinstance(run["latency_p50_ms"], float)

"""`vllm-frontend mock-engine` as a process: signals, fault injection, CPU report."""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from vllm.v1.engine import FinishReason

from tests.mock.fake_frontend import DEAD, FakeFrontend, make_request
from vllm_frontend.mock.cli import _options, add_arguments

pytestmark = pytest.mark.oracle  # imports vLLM or transformers as the reference


@contextmanager
def mock_engine_process(frontend: FakeFrontend, *flags: str) -> Iterator[subprocess.Popen[str]]:
    """`vllm-frontend mock-engine` joined to `frontend` (killed if the test leaves it running)."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vllm_frontend",
            "mock-engine",
            "--handshake-address",
            frontend.handshake_address,
            *flags,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        frontend.handshake(timeout=60)
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def test_sigterm_aborts_in_flight_requests_and_writes_the_cpu_report(tmp_path: Path) -> None:
    stats_file = tmp_path / "stats.json"
    frontend = FakeFrontend(engines=(0, 1))
    try:
        with mock_engine_process(
            frontend,
            "--engine-count", "2",
            "--step-ms", "2",
            "--stats-file", str(stats_file),
            "--report-interval", "0.2",
        ) as proc:  # fmt: skip
            frontend.add(make_request("short", [1, 2], max_tokens=5), engine=0)
            frontend.run_until_finished(["short"])
            frontend.add(make_request("long", [1, 2], max_tokens=1_000_000), engine=1)
            frontend.recv()
            proc.send_signal(signal.SIGTERM)
            per_request, _ = frontend.run_until_finished(["long"])
            _, stderr = proc.communicate(timeout=30)
            assert proc.returncode == 0, stderr
    finally:
        frontend.close()
    assert per_request["long"][-1].finish_reason == FinishReason.ABORT
    report = json.loads(stats_file.read_text())
    assert report["final"] is True
    assert report["requests"] == 2
    assert report["output_tokens"] >= 6
    assert report["cpu_seconds"] == pytest.approx(report["utime"] + report["stime"])
    assert report["cpu_seconds"] > 0
    assert 0 <= report["cpu_seconds_serving"] <= report["cpu_seconds"]
    assert report["engines"]["0"]["requests"] == 1
    assert report["engines"]["1"]["requests"] == 1
    assert "mock-engine cpu:" in stderr and "(exit)" in stderr


def test_die_after_requests_sends_engine_core_dead_and_exits_nonzero() -> None:
    frontend = FakeFrontend()
    try:
        with mock_engine_process(frontend, "--die-after-requests", "2", "--step-ms", "5") as proc:
            frontend.add(make_request("a", [1], max_tokens=1000))
            frontend.add(make_request("b", [1], max_tokens=1000))
            seen = []
            while (msg := frontend.recv(timeout=30)) != DEAD:
                seen.append(msg)
            assert proc.wait(timeout=30) == 1
    finally:
        frontend.close()
    # The in-flight streams got tokens before the engine died (a step ran after the quota).
    assert {o.request_id for m in seen for o in m.outputs} == {"a", "b"}


@pytest.mark.parametrize(
    "flags",
    [
        ["--handshake-address", "tcp://127.0.0.1:1", "--engine-count", "0"],
        ["--handshake-address", "127.0.0.1:1"],
        ["--handshake-address", "tcp://127.0.0.1:1", "--step-ms", "-1"],
    ],
)
def test_bad_flags_exit_with_a_clear_message(flags: list[str]) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "vllm_frontend", "mock-engine", *flags],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0
    assert "mock-engine:" in out.stderr


@pytest.mark.parametrize(("flags", "precise"), [([], False), (["--precise-steps"], True)])
def test_precise_steps_flag_reaches_the_options(flags: list[str], precise: bool) -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--handshake-address", "tcp://127.0.0.1:1", *flags])
    assert _options(args).precise_steps is precise

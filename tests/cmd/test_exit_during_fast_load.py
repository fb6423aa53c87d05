"""A serving process stopped while its tokenizer's fastokens load still runs exits at once, with
its exit code and its ``atexit`` work done (``vllm_frontend.cmd.process.exit_code``), instead of
waiting for the load as the interpreter's finalisation must (``_EXIT_WAIT_S``).

Each process here gets a load that does not end (it sleeps where ``load_fastokens`` would run)
and an exit wait of 10 minutes: a process that waited for the load would not exit within the
tests' minute. An ``atexit`` handler of its own stands for the process's cleanup."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from tests.support.engines import free_port, http_status

# Run first in each child: the endless load, the long exit wait, the cleanup's mark.
_SETUP = """
import atexit, sys, threading, time
import vllm_frontend.text.tokenizer as tokenizer_module

started = threading.Event()

def endless_load(*args, **kwargs):
    print("load started", file=sys.stderr, flush=True)
    started.set()
    time.sleep(3600)

tokenizer_module.load_fastokens = endless_load
tokenizer_module._EXIT_WAIT_S = 600.0
atexit.register(lambda: print("cleanup ran"))  # (stdout is a file: flushed at the exit)
"""

EXIT_TIMEOUT_S = 60.0


def _run(script: str, tmp_path: pathlib.Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "VLLM_USE_FASTOKENS"}
    with (tmp_path / "out.log").open("wb") as out, (tmp_path / "err.log").open("wb") as err:
        return subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(_SETUP) + textwrap.dedent(script)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            env=env,
        )


def _finish(proc: subprocess.Popen[bytes], tmp_path: pathlib.Path) -> tuple[int, str, str]:
    try:
        code = proc.wait(EXIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        err = (tmp_path / "err.log").read_text(errors="replace")
        pytest.fail(f"still running {EXIT_TIMEOUT_S:.0f} s on (waiting for the load?):\n{err}")
    out = (tmp_path / "out.log").read_text(errors="replace")
    return code, out, (tmp_path / "err.log").read_text(errors="replace")


def test_a_render_server_stopped_during_the_load_exits_at_once_with_0(
    tiny_model: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    port = free_port()
    proc = _run(
        f"""
        from vllm_frontend.cli import main
        raise SystemExit(main(["render", {str(tiny_model)!r}, "--port", "{port}"]))
        """,
        tmp_path,
    )
    try:
        deadline = time.monotonic() + 120
        while "load started" not in (tmp_path / "err.log").read_text(errors="replace"):
            assert proc.poll() is None, (tmp_path / "err.log").read_text(errors="replace")
            assert time.monotonic() < deadline, "the load never started"
            time.sleep(0.1)
        assert http_status(port) == 200
        proc.send_signal(signal.SIGTERM)
        code, out, err = _finish(proc, tmp_path)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 0, err
    assert out == "cleanup ran\n"
    assert "shutting down" in err
    assert "Traceback" not in err


def test_exit_code_ends_the_process_with_its_code_while_the_load_runs(
    tiny_model: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    proc = _run(
        f"""
        from vllm_frontend.cmd.process import exit_code
        from vllm_frontend.text.tokenizer import Tokenizer
        tokenizer = Tokenizer.from_dir({str(tiny_model)!r}, use_fastokens=True)
        started.wait(60)
        raise SystemExit(exit_code(3))
        """,
        tmp_path,
    )
    code, out, err = _finish(proc, tmp_path)
    assert code == 3, err
    assert out == "cleanup ran\n"


def test_exit_code_returns_the_code_without_a_running_load(
    tiny_model: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    proc = _run(
        f"""
        from vllm_frontend.cmd.process import exit_code
        from vllm_frontend.text.tokenizer import Tokenizer
        tokenizer = Tokenizer.from_dir({str(tiny_model)!r}, use_fastokens=False)
        code = exit_code(5)
        print("returned", code, flush=True)
        raise SystemExit(code)
        """,
        tmp_path,
    )
    code, out, err = _finish(proc, tmp_path)
    assert code == 5, err
    assert out == "returned 5\ncleanup ran\n"

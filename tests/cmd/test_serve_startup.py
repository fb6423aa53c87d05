"""`vllm-frontend serve … --data-parallel-size-local 0` startup, in front of the mock engine.

The frontend binds the engines' handshake before it loads the model, so an engine that is
already waiting joins during the load; these tests check that startup still serves, and that
each way it can fail ends the process with status 1 and a message saying why.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence

import pytest
from tests.support.engines import free_port, http_status


def _frontend(model: str, port: int, rpc: int, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "vllm_frontend", "serve", model, "--port", str(port),
        "--data-parallel-size-local", "0", "--data-parallel-rpc-port", str(rpc), *extra,
    ]  # fmt: skip


@contextlib.contextmanager
def _process(argv: Sequence[str], quiet: bool = False) -> Iterator[subprocess.Popen[str]]:
    out = subprocess.DEVNULL if quiet else subprocess.PIPE
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=out,
        text=True,
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)


def _mock_engine(rpc: int) -> list[str]:
    return [
        sys.executable, "-m", "vllm_frontend", "mock-engine",
        "--handshake-address", f"tcp://127.0.0.1:{rpc}", "--max-model-len", "256",
    ]  # fmt: skip


def _wait_healthy(proc: subprocess.Popen[str], port: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"frontend exited: {proc.communicate()[1][-2000:]}"
        if http_status(port, "/health") == 200:
            return
        time.sleep(0.05)
    raise AssertionError(f"frontend not healthy after {timeout} s")


def _complete(port: int, model: str) -> dict[str, object]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        body = json.dumps({"model": model, "prompt": "Hello there", "max_tokens": 3})
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        data: dict[str, object] = json.loads(resp.read())
        assert resp.status == 200, data
        return data
    finally:
        conn.close()


@pytest.mark.parametrize("engine_first", [True, False], ids=["engine-waiting", "engine-later"])
def test_serve_answers_requests_once_healthy_whether_the_engine_came_first_or_later(
    tiny_model: pathlib.Path, engine_first: bool
) -> None:
    port, rpc = free_port(), free_port()
    model = str(tiny_model)
    with contextlib.ExitStack() as stack:
        if engine_first:
            stack.enter_context(_process(_mock_engine(rpc), quiet=True))
            time.sleep(0.5)  # the engine waits in its handshake, retrying its connection
        frontend = stack.enter_context(_process(_frontend(model, port, rpc)))
        if not engine_first:
            stack.enter_context(_process(_mock_engine(rpc), quiet=True))
        _wait_healthy(frontend, port)
        out = _complete(port, model)
        assert out["usage"]["completion_tokens"] == 3  # type: ignore[index]
        frontend.send_signal(signal.SIGTERM)
        assert frontend.wait(30) == 0


def test_the_first_start_builds_the_tokenizer_cache_and_the_next_start_loads_it(
    tiny_model: pathlib.Path, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vllm_frontend.text.tokenizer_cache import TokenizerCache

    monkeypatch.setenv("VLLM_FRONTEND_CACHE_ROOT", str(tmp_path / "cache"))
    monkeypatch.delenv("VLLM_FRONTEND_TOKENIZER_CACHE", raising=False)
    cache = TokenizerCache.from_env()
    assert cache is not None
    source = tiny_model / "tokenizer.json"
    model = str(tiny_model)
    logs = []
    for _ in range(2):
        port, rpc = free_port(), free_port()
        with (
            _process(_mock_engine(rpc), quiet=True),
            _process(_frontend(model, port, rpc)) as frontend,
        ):
            _wait_healthy(frontend, port)
            assert _complete(port, model)["usage"]["completion_tokens"] == 3  # type: ignore[index]
            frontend.send_signal(signal.SIGTERM)
            logs.append(frontend.communicate(timeout=30)[1])
            assert frontend.returncode == 0
        deadline = time.monotonic() + 120
        while cache.lookup(source) is None:  # the first start's background builder
            assert time.monotonic() < deadline, "no tokenizer cache entry after the first start"
            time.sleep(0.2)
    assert "from its cached copy" not in logs[0]
    assert "from its cached copy" in logs[1]


def test_a_model_directory_without_a_tokenizer_stops_startup_with_status_1(
    tmp_path: pathlib.Path,
) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 128}))
    port, rpc = free_port(), free_port()
    with _process(_frontend(str(tmp_path), port, rpc)) as proc:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 1
    assert "cannot load model" in err
    assert "tokenizer.json" in err
    assert "Traceback" not in err


def test_engines_that_never_come_stop_startup_after_the_ready_timeout(
    tiny_model: pathlib.Path,
) -> None:
    port, rpc = free_port(), free_port()
    argv = _frontend(str(tiny_model), port, rpc, "--engine-ready-timeout-secs", "1")
    with _process(argv) as proc:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 1
    assert "could not connect to the engines" in err
    assert "engine 0 (no HELLO" in err


def test_a_taken_handshake_port_stops_startup_naming_the_address(
    tiny_model: pathlib.Path,
) -> None:
    port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        rpc = taken.getsockname()[1]
        with _process(_frontend(str(tiny_model), port, rpc)) as proc:
            _, err = proc.communicate(timeout=60)
            assert proc.returncode == 1
    assert f"tcp://127.0.0.1:{rpc}" in err
    assert "Traceback" not in err


def test_server_imports_start_no_blas_threads_and_leave_environment_and_gc_as_they_were() -> None:
    code = (
        "import gc, os\n"
        "from vllm_frontend.cli import _server_imports\n"
        "threads = len(os.listdir('/proc/self/task'))\n"
        "with _server_imports():\n"
        "    import vllm_frontend.cmd.runner\n"
        "    import numpy\n"
        "print(len(os.listdir('/proc/self/task')) - threads, "
        "os.environ.get('OPENBLAS_NUM_THREADS'), gc.isenabled())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "None", "True"]

"""The `vllm-frontend` executable in front of real vLLM CPU engines, started the three ways a user
starts it: by `vllm serve` as its Rust-frontend drop-in, by `serve` with managed engines, and by
`serve --data-parallel-size-local 0` joining external headless engines (data parallel 2).
"""

from __future__ import annotations

import http.client
import os
import pathlib
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence

import openai
import psutil
import pytest
from tests.support.engines import (
    BASE_ENGINE_ARGS,
    engine_env,
    free_port,
    log_dir,
    start_headless_engines,
    start_vllm,
)
from tests.support.reference import declare_reference

pytestmark = pytest.mark.engine

FRONTEND = pathlib.Path(sys.executable).with_name("vllm-frontend")
PROMPT = [128000, 9906, 11, 856, 836, 374]  # "<|begin_of_text|>Hello, my name is"
REFERENCE = declare_reference([PROMPT], {"temperature": 0.0, "max_tokens": 8})


class Frontend:
    """`vllm-frontend ARGS` in its own process group, output in a log file."""

    def __init__(self, name: str, args: Sequence[str], port: int) -> None:
        self.port = port
        self.log = log_dir() / f"{name}-{time.strftime('%H%M%S')}-{os.getpid()}.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [str(FRONTEND), *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=engine_env(),
                start_new_session=True,
            )

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-40:])

    def stop(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.proc.pid, sig)
                self.proc.wait(20)
                return
            except (ProcessLookupError, subprocess.TimeoutExpired):
                continue


def http_get(port: int, path: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


def wait_healthy(
    port: int, alive: subprocess.Popen[bytes], describe: str, timeout: float = 600
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if alive.poll() is not None:
            raise AssertionError(f"exited with {alive.returncode} before ready:\n{describe}")
        try:
            if http_get(port, "/health")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"not healthy after {timeout} s:\n{describe}")


def client(port: int) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)


def assert_greedy_completion_matches_reference(port: int, model: str) -> None:
    ref = REFERENCE.results()[0]
    out = client(port).completions.create(model=model, prompt=PROMPT, max_tokens=8, temperature=0.0)
    assert out.choices[0].text == ref.outputs[0].text
    assert out.usage is not None and out.usage.completion_tokens == len(ref.token_ids)


@pytest.fixture
def ports() -> Iterator[tuple[int, int]]:
    yield free_port(), free_port()


def test_vllm_serve_runs_our_executable_as_its_frontend(tiny_model: pathlib.Path) -> None:
    port = free_port()
    proc = start_vllm(
        "dropin",
        ["serve", str(tiny_model), "--host", "127.0.0.1", "--port", str(port),
         "--served-model-name", "tiny", *BASE_ENGINE_ARGS],
        env={"VLLM_USE_RUST_FRONTEND": "1", "VLLM_RUST_FRONTEND_PATH": str(FRONTEND)},
    )  # fmt: skip
    try:
        wait_healthy(port, proc.popen, proc.log_path.as_posix())
        frontends = [
            p
            for p in psutil.Process(proc.pid).children(recursive=True)
            if "frontend" in p.cmdline() and str(FRONTEND) in " ".join(p.cmdline())
        ]
        assert frontends, "vllm serve did not launch vllm-frontend"
        assert_greedy_completion_matches_reference(port, "tiny")
        chat = client(port).chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "Hi"}], max_tokens=4
        )
        assert chat.choices[0].finish_reason in ("length", "stop")
        assert chat.usage is not None and chat.usage.completion_tokens >= 1
    finally:
        proc.stop()


def test_serve_with_managed_engines_stops_them_on_sigterm(
    tiny_model: pathlib.Path, ports: tuple[int, int]
) -> None:
    port, handshake = ports
    fe = Frontend(
        "serve-managed",
        ["serve", str(tiny_model), "--port", str(port), "--data-parallel-rpc-port",
         str(handshake), "--", *BASE_ENGINE_ARGS],
        port,
    )  # fmt: skip
    try:
        wait_healthy(port, fe.proc, fe.tail())
        engines = psutil.Process(fe.proc.pid).children(recursive=True)
        assert engines, "no managed engine processes"
        assert_greedy_completion_matches_reference(port, str(tiny_model))
        fe.proc.send_signal(signal.SIGTERM)
        assert fe.proc.wait(60) == 0, fe.tail()
        _, alive = psutil.wait_procs(engines, timeout=30)
        assert not alive, f"engine processes left running: {alive}"
    finally:
        fe.stop()


def _served_by_engine(metrics: str) -> dict[str, float]:
    counts: dict[str, float] = {}
    for m in re.finditer(r"^vllm:request_success_total\{([^}]*)\} (\S+)$", metrics, re.M):
        engine = re.search(r'engine="(\d+)"', m.group(1))
        if engine:
            counts[engine.group(1)] = counts.get(engine.group(1), 0.0) + float(m.group(2))
    return counts


def test_serve_joins_two_external_engines_and_reports_their_death(
    tiny_model: pathlib.Path, ports: tuple[int, int]
) -> None:
    port, handshake = ports
    fe = Frontend(
        "serve-external",
        ["serve", str(tiny_model), "--port", str(port), "--data-parallel-size-local", "0",
         "--data-parallel-size", "2", "--data-parallel-rpc-port", str(handshake)],
        port,
    )  # fmt: skip
    engines = start_headless_engines(handshake, count=2)
    try:
        wait_healthy(port, fe.proc, fe.tail() + "\n" + engines.logs())
        c = client(port)
        for i in range(6):
            c.completions.create(model=str(tiny_model), prompt=[*PROMPT, i], max_tokens=2)
        pinned = c.completions.create(
            model=str(tiny_model), prompt=PROMPT, max_tokens=2,
            extra_headers={"X-data-parallel-rank": "1"},
        )  # fmt: skip
        assert pinned.choices[0].finish_reason == "length"
        served = _served_by_engine(http_get(port, "/metrics")[1])
        assert served.get("0", 0) >= 1 and served.get("1", 0) >= 1, served

        # A long stream on engine 1 is in flight when that engine is killed.
        stream = c.completions.create(
            model=str(tiny_model), prompt=PROMPT, max_tokens=1500, stream=True,
            extra_body={"ignore_eos": True}, extra_headers={"X-data-parallel-rank": "1"},
        )  # fmt: skip
        chunks = iter(stream)
        next(chunks)
        engines.kill_engine(1, signal.SIGKILL)
        with pytest.raises(openai.APIError):
            for _ in chunks:
                pass
        deadline = time.monotonic() + 30
        while http_get(port, "/health")[0] != 503:
            assert time.monotonic() < deadline, "/health still 200 after an engine was killed"
            time.sleep(0.2)
        with pytest.raises(openai.APIStatusError) as err:
            c.completions.create(model=str(tiny_model), prompt=PROMPT, max_tokens=2)
        assert err.value.status_code >= 500
        # External engines are not ours: we stay up, unhealthy, until told to stop.
        assert fe.proc.poll() is None
        assert http_get(port, "/health")[0] == 503
    finally:
        fe.stop()
        engines.stop()

"""The unmodified mock engine behind vLLM 0.32's own Python frontend, vllm-rs 0.32 and ours.

Each frontend is the handshake owner for two external engines (`--data-parallel-size-local 0
--data-parallel-size 2`); one `vllm-frontend mock-engine --engine-count 2` process joins it.
Completions and chats are streamed with the `openai` SDK.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.support.engines import (
    VllmServer,
    engine_env,
    free_port,
    log_dir,
    start_vllm_server,
    stop_all,
    stop_group,
)
from tests.support.tiny_model import tiny_model_dir
from tests.support.vllm_rs import vllm_rs_path

pytestmark = pytest.mark.engine

ENGINES = 2
MAX_MODEL_LEN = 2048


@dataclass
class Deployment:
    """A frontend serving the mock engines."""

    name: str
    port: int
    model: str
    stats_file: Path
    mock: subprocess.Popen[bytes]

    @property
    def client(self) -> openai.OpenAI:
        """An OpenAI SDK client for this frontend."""
        return openai.OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1", api_key="x")

    def mock_stats(self) -> dict[str, Any]:
        """The mock engine's latest stats file."""
        return json.loads(self.stats_file.read_text())

    def metrics(self) -> str:
        """The frontend's Prometheus /metrics text."""
        return _http_get(self.port, "/metrics")[1]


def _http_get(port: int, path: str) -> tuple[int | None, str]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read().decode()
    except OSError:
        return None, ""
    finally:
        connection.close()


def _start(
    argv: list[str], name: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    log = (log_dir() / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log").open("wb")
    with log:
        return subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )


def _wait_healthy(port: int, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"frontend exited with {proc.returncode}"
        if _http_get(port, "/health")[0] == 200:
            return
        time.sleep(0.3)
    raise TimeoutError(f"frontend on port {port} not healthy after {timeout}s")


def _mock(name: str, rpc: int, stats_file: Path) -> subprocess.Popen[bytes]:
    return _start(
        [
            sys.executable,
            "-m",
            "vllm_frontend",
            "mock-engine",
            "--handshake-address", f"tcp://127.0.0.1:{rpc}",
            "--engine-count", str(ENGINES),
            "--step-ms", "2",
            "--max-model-len", str(MAX_MODEL_LEN),
            "--stats-file", str(stats_file),
            "--report-interval", "0.2",
        ],
        f"mock-engine-{name}",
    )  # fmt: skip


def _external(rpc: int) -> list[str]:
    return [
        "--data-parallel-size-local", "0",
        "--data-parallel-rpc-port", str(rpc),
        "--data-parallel-size", str(ENGINES),
    ]  # fmt: skip


@dataclass
class VllmStack:
    """vLLM's server and the mock engine joined to it, started (not yet waited for)."""

    server: VllmServer
    mock: subprocess.Popen[bytes]
    stats_file: Path | None

    @contextlib.contextmanager
    def serving(self) -> Iterator[int]:
        """The server's port once it is ready; both stopped afterwards (the mock engine exits
        cleanly, status 0, on SIGTERM)."""
        try:
            try:
                self.server.wait_ready(600)
                yield self.server.port
            finally:
                self.server.stop()
        finally:
            assert stop_group(self.mock) == 0

    def stop(self) -> None:
        """Stop both, whatever their state (the session's end, for a stack never used)."""
        stop_all([self.server, self.mock])


def vllm_stack(tmp: Path) -> VllmStack:
    """This module's vLLM stack (see the session fixture ``mock_vllm_stacks``)."""
    rpc = free_port()
    stats_file = tmp / "mock-stats.json"
    mock = _mock("vllm", rpc, stats_file)
    server = start_vllm_server(
        model=str(tiny_model_dir()),
        extra_args=[*_external(rpc), "--data-parallel-address", "127.0.0.1"],
    )
    return VllmStack(server, mock, stats_file)


@pytest.fixture(scope="module", params=["ours", "vllm-rs", "vllm"])
def deployment(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    mock_vllm_stacks: dict[str, VllmStack],
) -> Iterator[Deployment]:
    """A frontend (vLLM's Python one, vllm-rs or ours) with the mock engines joined to it.
    vLLM's (a minute to start on a busy machine) comes last: it has been starting since the
    first of the mock modules began (``mock_vllm_stacks``)."""
    name = request.param
    model = str(tiny_model_dir())
    if name == "vllm":
        stack = mock_vllm_stacks.pop("behind")
        assert stack.stats_file is not None
        with stack.serving() as port:
            yield Deployment(name, port, model, stack.stats_file, stack.mock)
        return
    rpc = free_port()
    stats_file = tmp_path_factory.mktemp(name) / "mock-stats.json"
    mock = _mock(name, rpc, stats_file)
    try:
        with serving_frontend(name, model, _external(rpc)) as port:
            yield Deployment(name, port, model, stats_file, mock)
    finally:
        # The mock engine exits cleanly (status 0) on SIGTERM.
        assert stop_group(mock) == 0


@contextlib.contextmanager
def serving_frontend(name: str, model: str, external: list[str]) -> Iterator[int]:
    """The port of a healthy ``name`` frontend (vllm, vllm-rs or ours) serving ``model``, with
    ``external`` arguments (the engines' handshake, limits); stopped afterwards."""
    if name == "vllm":
        server = start_vllm_server(
            model=model, extra_args=[*external, "--data-parallel-address", "127.0.0.1"]
        )
        try:
            server.wait_ready(600)
            yield server.port
        finally:
            server.stop()
        return
    port = free_port()
    binary = [str(vllm_rs_path())] if name == "vllm-rs" else [sys.executable, "-m", "vllm_frontend"]
    proc = _start(
        [*binary, "serve", model, "--port", str(port), *external], f"{name}-mock", env=engine_env()
    )
    try:
        _wait_healthy(port, proc, 120)
        yield port
    finally:
        stop_group(proc)


def test_streamed_completion_gets_max_tokens_and_finishes_with_length(
    deployment: Deployment,
) -> None:
    stream = deployment.client.completions.create(
        model=deployment.model,
        prompt="The quick brown fox",
        max_tokens=25,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "length"
    assert all(f is None for f in finishes[:-1])
    assert "".join(c.choices[0].text for c in chunks if c.choices)
    usage = chunks[-1].usage
    assert usage is not None
    assert usage.completion_tokens == 25
    assert usage.prompt_tokens == 5  # BOS + 4 words


def test_streamed_chat_gets_max_tokens_and_finishes_with_length(deployment: Deployment) -> None:
    stream = deployment.client.chat.completions.create(
        model=deployment.model,
        messages=[{"role": "user", "content": "Tell me a story."}],
        max_completion_tokens=17,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "length"
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens == 17


def test_chat_logprobs_reach_the_client(deployment: Deployment) -> None:
    response = deployment.client.chat.completions.create(
        model=deployment.model,
        messages=[{"role": "user", "content": "Hi"}],
        max_completion_tokens=8,
        logprobs=True,
        top_logprobs=3,
    )
    choice = response.choices[0]
    assert choice.finish_reason == "length"
    assert choice.logprobs is not None and len(choice.logprobs.content) == 8
    for token in choice.logprobs.content:
        assert token.logprob <= 0
        tops = [t.logprob for t in token.top_logprobs]
        assert len(tops) == 3
        assert all(t <= 0 for t in tops)
        assert max(tops) >= token.logprob  # nothing beats the top candidate


def test_prompt_logprobs_reach_the_client(deployment: Deployment) -> None:
    response = deployment.client.completions.create(
        model=deployment.model,
        prompt="one two three four",
        max_tokens=2,
        extra_body={"prompt_logprobs": 1},
    )
    prompt_logprobs = response.choices[0].model_extra["prompt_logprobs"]
    assert prompt_logprobs[0] is None  # the first prompt token has none
    assert len(prompt_logprobs) == 5
    for position in prompt_logprobs[1:]:
        assert all(entry["logprob"] <= 0 and entry["rank"] >= 1 for entry in position.values())


def test_concurrent_requests_all_complete_across_both_engines(deployment: Deployment) -> None:
    before = _settled(deployment)["engines"]

    def complete(i: int) -> tuple[str | None, int]:
        response = deployment.client.completions.create(
            model=deployment.model, prompt=f"request {i}", max_tokens=40
        )
        assert response.usage is not None
        return response.choices[0].finish_reason, response.usage.completion_tokens

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(complete, range(32)))
    assert results == [("length", 40)] * 32
    after = _settled(deployment)["engines"]
    added = {e: after[e]["requests"] - before[e]["requests"] for e in after}
    assert sum(added.values()) == 32
    # Both frontends balance over the engines using their load (scheduler stats / in-flight).
    assert all(count > 0 for count in added.values()), added


def _running(metrics: str) -> float | None:
    values = re.findall(r"^vllm:num_requests_running\{[^}]*\} ([0-9.e+-]+)$", metrics, re.M)
    return sum(float(v) for v in values) if values else None


def _settled(deployment: Deployment) -> dict[str, Any]:
    # The stats file is rewritten every 0.2 s: read it until two reports agree.
    previous = None
    while True:
        time.sleep(0.5)
        stats = deployment.mock_stats()
        key = (stats["engines"], stats["output_tokens"])
        if key == previous:
            return stats
        previous = key


def test_a_dropped_stream_is_aborted_and_metrics_return_to_idle(deployment: Deployment) -> None:
    tokens_before = _settled(deployment)["output_tokens"]
    stream = deployment.client.completions.create(
        model=deployment.model, prompt="never ending", max_tokens=2000, stream=True
    )
    for received, _ in enumerate(stream, 1):
        if received == 5:
            break
    running_during = _running(deployment.metrics())
    stream.close()  # the client goes away; the frontend must abort the engine request
    settled = _settled(deployment)
    # The engine side: nothing runs any more, and generation stopped short of max_tokens.
    assert all(e["running"] == 0 and e["waiting"] == 0 for e in settled["engines"].values())
    assert settled["output_tokens"] - tokens_before < 2000
    if running_during is None:
        return  # this frontend does not export vLLM's scheduler gauges
    # The frontend's gauge comes from the mock's scheduler stats and falls back to zero.
    assert running_during >= 1
    deadline = time.monotonic() + 20
    while (running := _running(deployment.metrics())) != 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert running == 0

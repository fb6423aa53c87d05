"""Queue limits (``--max-num-queued-reqs``, ``--max-num-queued-tokens``): as vLLM refuses.

vLLM 0.32's Python frontend and ours each serve one mock engine that runs one request at a time
(``--max-num-seqs 1``), with both limits set. A long stream holds the engine; a second request
waits in the engine's queue, its prompt still in the prefill backlog; then a third request
(refused: backlog) and one with ``n=2`` (refused: in-flight requests) must get the same 503
bodies from both frontends, and the rejection counters must say so. Once the long stream is
closed everything drains and requests are admitted again. (vllm-rs 0.32 has no such limits.)
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.mock.test_behind_frontends import VllmStack, _http_get, _start, serving_frontend
from tests.support.engines import free_port, start_vllm_server, stop_group
from tests.support.tiny_model import tiny_model_dir

pytestmark = pytest.mark.engine

MAX_REQS = 3
MAX_TOKENS = 10
LIMITS = ["--max-num-queued-reqs", str(MAX_REQS), "--max-num-queued-tokens", str(MAX_TOKENS)]
LONG_PROMPT = "one two three four five six seven eight nine ten eleven twelve"  # > MAX_TOKENS


@dataclass
class Frontend:
    """A frontend with admission limits in front of a one-request-at-a-time mock engine."""

    name: str
    port: int
    model: str

    def client(self) -> openai.OpenAI:
        """An SDK client that does not retry (the SDK retries 503 by default)."""
        return openai.OpenAI(
            base_url=f"http://127.0.0.1:{self.port}/v1", api_key="x", max_retries=0
        )

    def metric(self, name: str, **labels: str) -> float:
        """The value of one sample of /metrics (0 when absent)."""
        text = _http_get(self.port, "/metrics")[1]
        for line in text.splitlines():
            if not line.startswith(name + "{"):
                continue
            found = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
            if all(found.get(k) == v for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
        return 0.0


def _mock(name: str, rpc: int) -> subprocess.Popen[bytes]:
    return _start(
        [sys.executable, "-m", "vllm_frontend", "mock-engine",
         "--handshake-address", f"tcp://127.0.0.1:{rpc}", "--engine-count", "1",
         "--step-ms", "20", "--max-num-seqs", "1", "--max-model-len", "2048"],
        f"mock-engine-admission-{name}",
    )  # fmt: skip


def _external(rpc: int) -> list[str]:
    return ["--data-parallel-size-local", "0", "--data-parallel-rpc-port", str(rpc),
            "--data-parallel-size", "1", *LIMITS]  # fmt: skip


def vllm_stack(tmp: Path) -> VllmStack:
    """This module's vLLM stack (see the session fixture ``mock_vllm_stacks``)."""
    rpc = free_port()
    mock = _mock("vllm", rpc)
    server = start_vllm_server(
        model=str(tiny_model_dir()),
        extra_args=[*_external(rpc), "--data-parallel-address", "127.0.0.1"],
    )
    return VllmStack(server, mock, None)


@pytest.fixture(scope="module", params=["ours", "vllm"])
def frontend(
    request: pytest.FixtureRequest, mock_vllm_stacks: dict[str, VllmStack]
) -> Iterator[Frontend]:
    """vLLM's frontend or ours, limits set, one mock engine with ``--max-num-seqs 1``. vLLM's
    (a minute to start on a busy machine) comes last: it has been starting since this module
    began (``mock_vllm_stacks``)."""
    name = request.param
    model = str(tiny_model_dir())
    if name == "vllm":
        with mock_vllm_stacks.pop("admission").serving() as port:
            yield Frontend(name, port, model)
        return
    rpc = free_port()
    mock = _mock(name, rpc)
    try:
        with serving_frontend(name, model, _external(rpc)) as port:
            yield Frontend(name, port, model)
    finally:
        assert stop_group(mock) == 0


def _wait_for(predicate: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def _refusal(call: Callable[[], Any]) -> tuple[int, Any]:
    with pytest.raises(openai.APIStatusError) as info:
        call()
    return info.value.status_code, info.value.body


REFUSALS: dict[str, dict[str, tuple[int, Any]]] = {}


def test_limits_refuse_with_503_and_release_when_requests_end(frontend: Frontend) -> None:
    client = frontend.client()
    model = frontend.model
    long = client.completions.create(
        model=model, prompt="hi", max_tokens=1500, stream=True, extra_body={"ignore_eos": True}
    )
    with ThreadPoolExecutor(1) as pool:
        try:
            next(iter(long))  # running: its prompt has left the backlog
            waiting = pool.submit(
                client.completions.create, model=model, prompt=LONG_PROMPT, max_tokens=3
            )
            _wait_for(
                lambda: frontend.metric("vllm:num_requests_waiting") >= 1,
                "the second request to wait in the engine",
            )
            assert not waiting.done()
            refusals = {
                "backlog": _refusal(
                    lambda: client.completions.create(model=model, prompt="a", max_tokens=2)
                ),
                "requests": _refusal(
                    lambda: client.chat.completions.create(
                        model=model, messages=[{"role": "user", "content": "a"}], n=2,
                        max_tokens=2,
                    )
                ),
                "requests-stream": _refusal(
                    lambda: client.completions.create(
                        model=model, prompt="a", max_tokens=2, n=2, stream=True
                    )
                ),
            }  # fmt: skip
        finally:
            long.close()
        assert waiting.result(timeout=60).choices[0].text is not None
    REFUSALS[frontend.name] = refusals
    for status, body in refusals.values():
        assert status == 503
        assert body["type"] == "Service Unavailable" and body["code"] == 503
    assert "backlog" in refusals["backlog"][1]["message"]
    assert "busy" in refusals["requests"][1]["message"]
    rejections = {
        reason: frontend.metric("vllm:admission_rejections_total", reason=reason)
        for reason in ("max_num_queued_reqs", "max_num_queued_tokens")
    }
    assert rejections == {"max_num_queued_reqs": 2.0, "max_num_queued_tokens": 1.0}
    # Drained: admitted again, n=2 included.
    done = client.completions.create(model=model, prompt="a", max_tokens=2, n=2)
    assert len(done.choices) == 2


def test_refusals_are_the_same_bytes_as_vllms() -> None:
    # Runs after the scenario has run on both frontends (see the module-scoped fixture).
    assert REFUSALS.keys() == {"vllm", "ours"}, "the scenario did not run on both frontends"
    assert REFUSALS["ours"] == REFUSALS["vllm"]

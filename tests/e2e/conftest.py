"""Session fixtures for the differential tests: our frontend and vLLM's own, each in front of
an identical fresh engine, started once (concurrently) and shared by every test."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.ours import start_our_server
from tests.support.engines import (
    HeadlessEngines,
    free_port,
    log_dir,
    start_headless_engines,
    start_vllm_server,
    stop_all,
)
from tests.support.otlp_collector import Collector, grpc_collector
from tests.support.tiny_lora import RANK as LORA_RANK
from tests.support.tiny_lora import tiny_lora_dir

# Both engines get exactly these arguments (after tests/support/engines.py's BASE_ENGINE_ARGS):
# a short context keeps the context-limit tests cheap, a small memory share leaves room for the
# other engine and the test processes; LoRA is on for tests/e2e/test_lora.py (rank up to
# tiny_lora's, two adapters per batch).
MAX_MODEL_LEN = 256
ENGINE_ARGS = ("--max-model-len", str(MAX_MODEL_LEN), "--gpu-memory-utilization", "0.1",
               "--enable-lora", "--max-lora-rank", str(LORA_RANK), "--max-loras", "2")  # fmt: skip
LORA_NAME = "tiny-lora"
"""The adapter both frontends load at startup (``--lora-modules``)."""
# Both frontends serve /v1/load_lora_adapter and /v1/unload_lora_adapter, and export their
# request spans to a collector in this process (--otlp-traces-endpoint, tests/e2e/
# test_tracing.py) within 0.1 s of a request's end.
FRONTEND_ENV = {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1", "OTEL_BSP_SCHEDULE_DELAY": "100"}
# Frontend options both servers get (ours as config_from_args keys): the render routes, and
# usage with the prompt tokens read from and written to the prefix cache.
FRONTEND_ARGS = ("--enable-scale-out", "--enable-prompt-tokens-details")
OUR_ARGS = {"enable_scale_out": True, "enable_prompt_tokens_details": True}
# Our engine runs at a lower CPU priority than the test process, which also runs our frontend
# (see tests/support/engines.py, _lower_priority): otherwise, on 2 cores, the busy engine starves
# that process for up to a second and streams arrive in a few coalesced chunks.
OUR_ENGINE_NICE = 10


@dataclass
class Frontends:
    """Base URLs of the two servers under comparison."""

    ours: str
    vllm: str
    model: str
    max_model_len: int
    our_engine_client: Any = None
    """Our in-process ``EngineCoreClient`` (None when our server runs as a CLI process)."""
    our_engines: HeadlessEngines | None = None
    """The headless engine behind our server (None for servers started elsewhere)."""
    spans: Collector | None = None
    """The OTLP collector both servers export their spans to (None: servers started elsewhere)."""


def _start_cli_server(
    model: pathlib.Path, handshake_port: int, port: int, lora: str, otlp: str
) -> subprocess.Popen[bytes]:
    """``vllm-frontend serve MODEL --data-parallel-size-local 0 …``: the shipped CLI in front of
    the external headless engine."""
    exe = pathlib.Path(sys.executable).with_name("vllm-frontend")
    argv = [str(exe), "serve", str(model), "--host", "127.0.0.1", "--port", str(port),
            "--data-parallel-size-local", "0", "--data-parallel-address", "127.0.0.1",
            "--data-parallel-rpc-port", str(handshake_port), "--lora-modules", lora,
            "--otlp-traces-endpoint", otlp, *FRONTEND_ARGS]  # fmt: skip
    log = (log_dir() / f"ours-cli-{port}.log").open("wb")
    return subprocess.Popen(
        argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, **FRONTEND_ENV},
    )  # fmt: skip


def _wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"vllm-frontend exited with {proc.returncode}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{url} not healthy after {timeout} s")


# Package scope: the two engines (~3-4 GB each) are stopped before other test packages start theirs.
@pytest.fixture(scope="package")
def frontends(tiny_model: pathlib.Path) -> Iterator[Frontends]:
    """Our server and vLLM's server, each with its own fresh engine (same engine arguments).

    Ours runs in-process by default (the tests can then watch its engine client); with
    ``E2E_OURS=cli`` it is the shipped ``vllm-frontend serve`` CLI joining the headless engine.
    ``E2E_OURS_URL`` + ``E2E_VLLM_URL`` point the tests at servers already running (started with
    ENGINE_ARGS) instead, to iterate quickly.
    """
    if os.environ.get("E2E_OURS_URL") and os.environ.get("E2E_VLLM_URL"):
        yield Frontends(
            os.environ["E2E_OURS_URL"], os.environ["E2E_VLLM_URL"], str(tiny_model), MAX_MODEL_LEN
        )
        return
    with grpc_collector() as spans:  # before the servers: they export to it as they serve
        handshake = free_port()
        engines = start_headless_engines(
            handshake, 1, model=tiny_model, extra_args=ENGINE_ARGS, nice=OUR_ENGINE_NICE
        )
        lora = f"{LORA_NAME}={tiny_lora_dir()}"
        reference = start_vllm_server(
            model=tiny_model,
            extra_args=(
                *ENGINE_ARGS,
                "--lora-modules",
                lora,
                *FRONTEND_ARGS,
                "--otlp-traces-endpoint",
                spans.endpoint,
            ),
            env=FRONTEND_ENV,
        )
        ours = None
        cli = None
        try:
            if os.environ.get("E2E_OURS") == "cli":
                port = free_port()
                cli = _start_cli_server(tiny_model, handshake, port, lora, spans.endpoint)
                url, client = f"http://127.0.0.1:{port}", None
                _wait_http(url, cli, 600)
            else:
                ours = start_our_server(
                    tiny_model, engines.handshake_address, free_port(),
                    args={"lora_modules": [lora], "otlp_traces_endpoint": spans.endpoint,
                          **OUR_ARGS},
                    env=FRONTEND_ENV,
                )  # fmt: skip
                url, client = ours.base_url, ours.client
            reference.wait_ready(600)
            yield Frontends(
                url, reference.base_url, str(tiny_model), MAX_MODEL_LEN, client, engines, spans
            )
        finally:
            if ours is not None:
                ours.stop()
            stop_all([*([cli] if cli is not None else []), reference, engines])


@pytest.fixture(scope="module")
def sdk(frontends: Frontends) -> Iterator[dict[str, openai.OpenAI]]:
    """OpenAI SDK clients for both servers."""
    clients = {
        name: openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)
        for name, url in (("ours", frontends.ours), ("vllm", frontends.vllm))
    }
    yield clients
    for c in clients.values():
        c.close()

"""Session fixtures for the differential tests: our frontend and vLLM's own, each in front of
an identical fresh engine, started once (concurrently) and shared by every test."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.e2e.ours import start_our_server
from tests.support.engines import free_port, start_headless_engines, start_vllm_server

# Both engines get exactly these arguments (after tests/support/engines.py's BASE_ENGINE_ARGS):
# a short context keeps the context-limit tests cheap, a small memory share leaves room for the
# other engine and the test processes.
MAX_MODEL_LEN = 256
ENGINE_ARGS = ("--max-model-len", str(MAX_MODEL_LEN), "--gpu-memory-utilization", "0.1")


@dataclass
class Frontends:
    """Base URLs of the two servers under comparison."""

    ours: str
    vllm: str
    model: str
    max_model_len: int


@pytest.fixture(scope="session")
def frontends(tiny_model: pathlib.Path) -> Iterator[Frontends]:
    """Our server and vLLM's server, each with its own fresh engine (same engine arguments).

    ``E2E_OURS_URL`` + ``E2E_VLLM_URL`` point the tests at servers already running (started with
    ENGINE_ARGS) instead, to iterate quickly.
    """
    if os.environ.get("E2E_OURS_URL") and os.environ.get("E2E_VLLM_URL"):
        yield Frontends(
            os.environ["E2E_OURS_URL"], os.environ["E2E_VLLM_URL"], str(tiny_model), MAX_MODEL_LEN
        )
        return
    handshake = free_port()
    engines = start_headless_engines(handshake, 1, model=tiny_model, extra_args=ENGINE_ARGS)
    reference = start_vllm_server(model=tiny_model, extra_args=ENGINE_ARGS)
    ours = None
    try:
        ours = start_our_server(tiny_model, engines.handshake_address, free_port())
        reference.wait_ready(600)
        yield Frontends(ours.base_url, reference.base_url, str(tiny_model), MAX_MODEL_LEN)
    finally:
        if ours is not None:
            ours.stop()
        reference.stop()
        engines.stop()

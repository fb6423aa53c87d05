"""Shared fixtures: the tiny Llama 3 test model, real vLLM engines, vllm-rs (see tests/support/)."""

from __future__ import annotations

import os
import pathlib
import shutil
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support.engines import HeadlessEngines, start_headless_engines
from tests.support.tiny_model import tiny_model_dir

# The frontends that tests start keep their tokenizer cache (vllm_frontend.text.tokenizer_cache)
# in a directory of this run's, not in the user's ~/.cache.
_CACHE_ROOT = tempfile.mkdtemp(prefix="vllm-frontend-test-cache-")
os.environ.setdefault("VLLM_FRONTEND_CACHE_ROOT", _CACHE_ROOT)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove this run's tokenizer cache."""
    shutil.rmtree(_CACHE_ROOT, ignore_errors=True)


@pytest.fixture(scope="session")
def tiny_model() -> pathlib.Path:
    """Directory of the tiny HF-format Llama 3 checkpoint (built once, cached between runs)."""
    return tiny_model_dir()


@pytest.fixture
def start_engines(
    request: pytest.FixtureRequest, tiny_model: pathlib.Path
) -> Iterator[Callable[..., HeadlessEngines]]:
    """`start_engines(handshake_port, count=1, **options)`: engines stopped after the test.

    Takes the options of tests.support.engines.start_headless_engines. The engines' log tails
    appear in the report of a failed test. Engines shared by many tests belong in a
    session-scoped fixture using `headless_engines(...)` instead.
    """
    started: list[HeadlessEngines] = []

    def start(handshake_port: int, count: int = 1, **options: Any) -> HeadlessEngines:
        options.setdefault("model", tiny_model)
        engines = start_headless_engines(handshake_port, count, **options)
        started.append(engines)
        return engines

    yield start
    for engines in started:
        engines.stop()
        request.node.add_report_section("teardown", "vLLM engine logs", engines.logs())


@pytest.fixture(scope="session")
def vllm_rs() -> pathlib.Path:
    """Path of vLLM's Rust frontend binary (downloaded once); skips the test if unavailable."""
    from tests.support.vllm_rs import VllmRsUnavailable, vllm_rs_path

    try:
        return vllm_rs_path()
    except VllmRsUnavailable as e:
        pytest.skip(f"vllm-rs unavailable: {e}")


@pytest.fixture
def created_series() -> Iterator[Callable[[bool], None]]:
    """Switches prometheus_client's ``_created`` series on or off; restores the setting after."""
    from tests.support.exposition import created_series_switch

    with created_series_switch() as switch:
        yield switch

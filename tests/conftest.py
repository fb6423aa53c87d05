"""Shared fixtures: the tiny Llama 3 test model and real vLLM engines (see tests/support/)."""

from __future__ import annotations

import pathlib

import pytest

from tests.support.tiny_model import tiny_model_dir


@pytest.fixture(scope="session")
def tiny_model() -> pathlib.Path:
    """Directory of the tiny HF-format Llama 3 checkpoint (built once, cached between runs)."""
    return tiny_model_dir()


@pytest.fixture(scope="session")
def vllm_rs() -> pathlib.Path:
    """Path of vLLM's Rust frontend binary (downloaded once); skips the test if unavailable."""
    from tests.support.vllm_rs import VllmRsUnavailable, vllm_rs_path

    try:
        return vllm_rs_path()
    except VllmRsUnavailable as e:
        pytest.skip(f"vllm-rs unavailable: {e}")

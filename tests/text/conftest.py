"""Fixtures for the text layer: real tokenizers on disk, ours and transformers' (vLLM's) views."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import tokenizer_factory

from vllm_frontend.text.tokenizer import Tokenizer

KINDS = ["byte_level", "byte_fallback", "unigram_metaspace"] + (
    ["tiny_model"] if importlib.util.find_spec("tests.support.tiny_model") else []
)


@pytest.fixture(scope="session")
def tokenizer_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tokenizers")
    dirs = {
        "byte_level": tokenizer_factory.build_byte_level(root / "byte_level"),
        "byte_fallback": tokenizer_factory.build_byte_fallback(root / "byte_fallback"),
        "unigram_metaspace": tokenizer_factory.build_unigram_metaspace(root / "unigram"),
    }
    if "tiny_model" in KINDS:
        from tests.support.tiny_model import tiny_model_dir

        dirs["tiny_model"] = Path(tiny_model_dir())
    return dirs


@pytest.fixture(scope="session", params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="session")
def model_dir(tokenizer_dirs: dict[str, Path], kind: str) -> Path:
    return tokenizer_dirs[kind]


@pytest.fixture(scope="session")
def ours(model_dir: Path) -> Tokenizer:
    tokenizer = Tokenizer.from_dir(model_dir)
    # As it is soon after startup: prompts encoded with fastokens where it can load the tokenizer.
    assert tokenizer.wait_for_fast_encoder(300)
    return tokenizer


@pytest.fixture(scope="session")
def hf(model_dir: Path) -> Any:
    """vLLM's own tokenizer object for the directory (transformers, cached like vLLM does)."""
    from vllm.tokenizers.hf import CachedHfTokenizer

    return CachedHfTokenizer.from_pretrained(str(model_dir))


@pytest.fixture(scope="module")
def hf_fast() -> Any:
    """A fast Hugging Face tokenizer, which vLLM's guidance checks ask for."""
    from tests.support.tiny_model import tiny_model_dir
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model_dir()))

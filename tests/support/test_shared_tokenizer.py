"""shared_tokenizer hands out one Tokenizer per model directory, options and environment, and
release_shared_tokenizers lets go of all but the tiny Llama 3's."""

from __future__ import annotations

import pathlib

import pytest

from tests.support.shared_tokenizer import (
    OTHERS_KEPT,
    release_shared_tokenizers,
    shared_tokenizer,
)
from tests.support.tiny_model import tiny_model_dir
from tests.text.tokenizer_factory import build_byte_level


def test_one_tokenizer_per_directory_options_and_environment(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = build_byte_level(tmp_path / "bl")
    first = shared_tokenizer(directory)
    assert shared_tokenizer(directory) is first
    assert shared_tokenizer(str(directory)) is first
    assert shared_tokenizer(directory, use_fastokens=False) is not first
    monkeypatch.setenv("VLLM_USE_FASTOKENS", "0")
    assert shared_tokenizer(directory) is not first
    assert shared_tokenizer(directory).encode("hello") == first.encode("hello")


def test_release_keeps_only_the_tiny_models(tmp_path: pathlib.Path) -> None:
    directory = build_byte_level(tmp_path / "bl")
    tiny, other = shared_tokenizer(tiny_model_dir()), shared_tokenizer(directory)
    assert release_shared_tokenizers() >= 1
    assert shared_tokenizer(tiny_model_dir()) is tiny
    assert shared_tokenizer(directory) is not other
    assert release_shared_tokenizers() == 1


def test_only_the_last_few_other_models_are_kept(tmp_path: pathlib.Path) -> None:
    release_shared_tokenizers()
    dirs = [build_byte_level(tmp_path / f"bl{i}") for i in range(OTHERS_KEPT + 1)]
    first, second = shared_tokenizer(dirs[0]), shared_tokenizer(dirs[1])
    for directory in dirs[2:-1]:
        shared_tokenizer(directory)
    assert shared_tokenizer(dirs[0]) is first  # used again: now the last used
    shared_tokenizer(dirs[-1])  # one too many: the least recently used (dirs[1]) goes
    assert shared_tokenizer(dirs[0]) is first
    assert shared_tokenizer(dirs[1]) is not second
    assert release_shared_tokenizers() == OTHERS_KEPT

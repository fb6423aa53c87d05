"""``Tokenizer.all_special_tokens`` is transformers' ``all_special_tokens`` with its ids (what
vLLM's parser engine drops from outputs)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from tests.support.tiny_model import tiny_model_dir

from vllm_frontend.text.tokenizer import Tokenizer

pytestmark = pytest.mark.oracle  # transformers is the reference


def _expected(directory: Path) -> dict[str, int]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(directory)
    return dict(zip(tok.all_special_tokens, tok.all_special_ids, strict=True))


def test_tiny_model_matches_transformers() -> None:
    directory = tiny_model_dir()
    assert Tokenizer.from_dir(directory).all_special_tokens == _expected(directory)


@pytest.mark.parametrize(
    "extra",
    [
        {
            "additional_special_tokens": ["<|reserved_special_token_0|>", "<|python_tag|>"],
            "mask_token": "<|reserved_special_token_7|>",
        },
        {"extra_special_tokens": {"image_token": "<|reserved_special_token_5|>"}},
    ],
)
def test_extra_special_tokens_match_transformers(tmp_path: Path, extra: dict) -> None:
    for item in tiny_model_dir().iterdir():
        if item.name.startswith("tokenizer"):
            shutil.copy(item, tmp_path / item.name)
    config_path = tmp_path / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config.update(extra)
    config_path.write_text(json.dumps(config))
    assert Tokenizer.from_dir(tmp_path).all_special_tokens == _expected(tmp_path)

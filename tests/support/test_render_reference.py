"""The reference processes' tokenizer loads: each ``tokenizer.json`` parsed once, every load an
independent tokenizer that serializes and encodes as a fresh load does."""

from __future__ import annotations

import pathlib
import shutil

import tokenizers

from tests.support.render_reference import rust_tokenizers_shared
from tests.support.tiny_model import tiny_model_dir

TEXTS = ["Hello world", " <|begin_of_text|>ünïcode\n\n  spaces", "<|eot_id|><think>x</think>"]


def test_loads_of_one_file_answer_as_fresh_loads_and_stay_apart(tmp_path: pathlib.Path) -> None:
    path = str(shutil.copy(tiny_model_dir() / "tokenizer.json", tmp_path / "tokenizer.json"))
    fresh = tokenizers.Tokenizer.from_file(path)
    with rust_tokenizers_shared():
        first, second = tokenizers.Tokenizer.from_file(path), tokenizers.Tokenizer.from_file(path)
        assert first is not second
        assert first.to_str() == second.to_str() == fresh.to_str()
        for text in TEXTS:
            assert first.encode(text).ids == second.encode(text).ids == fresh.encode(text).ids
        first.add_special_tokens(["<think>"])
        first.enable_truncation(max_length=3)
        assert first.to_str() != fresh.to_str()
        assert second.to_str() == tokenizers.Tokenizer.from_file(path).to_str() == fresh.to_str()
        # a file changed since its first load is loaded again
        pathlib.Path(path).write_text(first.to_str())
        assert tokenizers.Tokenizer.from_file(path).to_str() == first.to_str()
    assert tokenizers.Tokenizer.from_file(path).to_str() == first.to_str()
    assert "from_file" in vars(tokenizers.Tokenizer)
    assert type(vars(tokenizers.Tokenizer)["from_file"]).__name__ != "_LoadOnce"

"""The largest token id and the longest piece, which bound prompt token ids and prompt text,
agree with vLLM's cached transformers tokenizer for unusual vocabularies too.

Our tokenizer reads them from tokenizer.json (or from the summary the tokenizer cache keeps of
it) instead of asking the Rust library for the whole vocabulary; these vocabularies are the
cases where a shortcut could go wrong: ids with holes, an added token taking over a model piece,
duplicate entries, every model type. The common tokenizers are compared in
test_tokenizer_matches_transformers.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import tokenizers

from vllm_frontend.text.tokenizer import Tokenizer
from vllm_frontend.text.tokenizer_bounds import bounds_from_source
from vllm_frontend.text.tokenizer_cache import TokenizerCache


def _added(token_id: int, content: str) -> dict[str, Any]:
    return {
        "id": token_id, "content": content, "single_word": False, "lstrip": False,
        "rstrip": False, "normalized": False, "special": True,
    }  # fmt: skip


def _bpe(vocab: dict[str, int]) -> dict[str, Any]:
    return {
        "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
        "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
        "ignore_merges": False, "vocab": vocab, "merges": [["a", "b"]],
    }  # fmt: skip


def _spec(model: dict[str, Any], added: list[dict[str, Any]] | None = None) -> str:
    return json.dumps(
        {
            "version": "1.0", "truncation": None, "padding": None, "added_tokens": added or [],
            "normalizer": None, "pre_tokenizer": {"type": "Whitespace"},
            "post_processor": None, "decoder": None, "model": model,
        },
        ensure_ascii=False,
    )  # fmt: skip


SPECS: dict[str, str] = {
    "wordpiece": _spec(
        {
            "type": "WordPiece",
            "unk_token": "[UNK]",
            "continuing_subword_prefix": "##",
            "max_input_chars_per_word": 100,
            "vocab": {"[UNK]": 0, "[CLS]": 1, "hello": 2, "##ooooooooo": 3, "wörld": 4},
        },
        [_added(0, "[UNK]"), _added(1, "[CLS]")],
    ),
    "wordlevel_with_holes": _spec(
        {
            "type": "WordLevel",
            "unk_token": "<unk>",
            "vocab": {"<unk>": 0, "a": 1, "bbbbbbbbbbbbbbbbbb": 7, "c": 3},
        }
    ),
    "bpe_with_holes": _spec(_bpe({"a": 0, "b": 1, "ab": 9}), [_added(4, "<s>")]),
    "bpe_added_over_model_piece": _spec(
        _bpe({"a": 0, "b": 1, "ab": 2, "<pad>": 3}),
        [_added(7, "<pad>"), _added(8, "<a_long_added_token_here>")],
    ),
    "bpe_duplicate_key": _spec(_bpe({"a": 0, "b": 1, "ab": 2})).replace(
        '"ab": 2', '"ab": 2, "a": 5'
    ),
    "unigram_duplicate_piece": _spec(
        {
            "type": "Unigram",
            "unk_id": 0,
            "byte_fallback": False,
            "vocab": [["<unk>", 0.0], ["a", -1.0], ["bcd", -2.0], ["a", -3.0], ["😀x", -4]],
        }
    ),
}
CONFIG = {"tokenizer_class": "PreTrainedTokenizerFast", "pad_token": "<pad>", "unk_token": "<unk>"}


@pytest.fixture(params=sorted(SPECS))
def model_dir(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    (tmp_path / "tokenizer.json").write_text(SPECS[request.param], encoding="utf-8")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(CONFIG))
    return tmp_path


@pytest.mark.oracle
@pytest.mark.parametrize("cached", [False, True], ids=["file", "cached-summary"])
def test_bounds_match_vllms_cached_tokenizer(model_dir: Path, cached: bool) -> None:
    from vllm.tokenizers.hf import CachedHfTokenizer

    hf = CachedHfTokenizer.from_pretrained(str(model_dir))
    cache = TokenizerCache(model_dir / "cache") if cached else None
    if cache is not None:
        assert cache.build(model_dir / "tokenizer.json") is not None
    ours = Tokenizer.from_dir(model_dir, cache=cache)
    assert (ours._vocab_summary is not None) == cached
    assert (ours.max_token_id, ours.max_chars_per_token) == (
        hf.max_token_id,
        hf.max_chars_per_token,
    )


def test_reading_the_file_gives_what_the_whole_vocabulary_gives(model_dir: Path) -> None:
    ours = Tokenizer.from_dir(model_dir)
    # the file was used, not the fallback
    assert bounds_from_source(ours.backend, model_dir / "tokenizer.json") is not None
    vocab = ours.backend.get_vocab(with_added_tokens=True)
    base = ours.backend.get_vocab_size(with_added_tokens=False)
    assert ours.max_token_id == max(max(vocab.values()), base - 1)
    assert ours.max_chars_per_token == max(len(piece) for piece in vocab)


def test_a_file_that_is_not_the_loaded_tokenizers_is_not_trusted(tmp_path: Path) -> None:
    loaded = tmp_path / "loaded.json"
    other = tmp_path / "other.json"
    loaded.write_text(SPECS["bpe_with_holes"], encoding="utf-8")
    other.write_text(SPECS["wordlevel_with_holes"], encoding="utf-8")
    backend = tokenizers.Tokenizer.from_file(str(loaded))
    ours = Tokenizer(backend, source=other)
    assert bounds_from_source(backend, other) is None
    vocab = backend.get_vocab(with_added_tokens=True)
    assert (ours.max_token_id, ours.max_chars_per_token) == (
        max(vocab.values()),
        max(len(piece) for piece in vocab),
    )

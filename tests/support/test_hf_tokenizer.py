"""fresh_tokenizer's copies answer as ``copy.deepcopy``'s would (the Rust tokenizer's own copy:
its pickled state loaded again), and changing one changes neither the loaded tokenizer nor
another copy; in the test processes ``copy.deepcopy`` of a Rust tokenizer is such a copy."""

from __future__ import annotations

import copy
import pickle

import pytest

from tests.support.hf_tokenizer import _loaded, fresh_tokenizer, rust_copy
from tests.support.tiny_model import tiny_model_dir

pytestmark = pytest.mark.oracle

TEXTS = ["Hello world", " <|begin_of_text|>ünïcode\n\n  spaces", "<|eot_id|><think>x</think>"]


def _original() -> object:
    return _loaded(str(tiny_model_dir()))


def test_a_copy_serializes_and_encodes_as_a_deep_copy_does() -> None:
    rust = _original().backend_tokenizer  # type: ignore[attr-defined]
    rust.enable_truncation(max_length=7, stride=1)
    rust.enable_padding(length=9, pad_id=3, pad_token="<pad>")
    try:
        # what copy.deepcopy does without the test processes' dispatch
        ours, deep = rust_copy(rust), pickle.loads(pickle.dumps(rust))
        assert ours.to_str() == deep.to_str() == rust.to_str()
        assert ours.truncation == deep.truncation and ours.padding == deep.padding
        for text in TEXTS:
            assert ours.encode(text).ids == deep.encode(text).ids
    finally:
        rust.no_truncation()
        rust.no_padding()


def test_changing_a_copy_leaves_the_original_and_other_copies_alone() -> None:
    original = _original()
    before = original.backend_tokenizer.to_str()  # type: ignore[attr-defined]
    first, second = fresh_tokenizer(), fresh_tokenizer()
    assert first.backend_tokenizer.to_str() == before
    first.add_tokens(["<think>", "</think>"])
    first.add_tokens(["<marker>"], special_tokens=True)
    first.backend_tokenizer.pre_tokenizer[1].add_prefix_space = True  # its ByteLevel step
    first.backend_tokenizer.encode_special_tokens = True
    assert '"add_prefix_space":true' in first.backend_tokenizer.to_str()
    assert original.backend_tokenizer.to_str() == before  # type: ignore[attr-defined]
    assert second.backend_tokenizer.to_str() == before
    assert len(first) == len(second) + 3
    for tok in (original, second):
        assert tok.encode("<think>x</think>", add_special_tokens=False) == second.encode(  # type: ignore[attr-defined]
            "<think>x</think>", add_special_tokens=False
        )
    assert first.encode("<think>", add_special_tokens=False) == [len(second)]


def test_the_test_processes_deep_copy_rust_tokenizers_with_rust_copy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.support import hf_tokenizer

    made: list[object] = []

    def recording(tokenizer: object) -> object:
        made.append(rust_copy(tokenizer))
        return made[-1]

    rust = _original().backend_tokenizer  # type: ignore[attr-defined]
    monkeypatch.setattr(hf_tokenizer, "rust_copy", recording)
    copied = copy.deepcopy({"tokenizer": rust})["tokenizer"]
    assert made == [copied] and copied is not rust
    assert copied.to_str() == pickle.loads(pickle.dumps(rust)).to_str() == rust.to_str()
    copied.add_special_tokens(["<only-in-the-copy>"])
    assert rust.token_to_id("<only-in-the-copy>") is None

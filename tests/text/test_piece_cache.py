"""Encoding piece by piece around added tokens gives the library's ids for the whole text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import tokenizers
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vllm_frontend.text import piece_cache
from vllm_frontend.text.piece_cache import PieceEncoder
from vllm_frontend.text.tokenizer import Tokenizer

SETTINGS = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
TEXT_FRAGMENTS = [
    "hello",
    " world",
    "\n\n",
    "  ",
    "café",
    " 日本語",
    "😀",
    "e\u0301",
    "<|",
    "|>",
    "<",
    " don't",
    "Cutting Knowledge Date: December 2023\nToday Date: 02 Dec 2026\n\n",
]


_ENCODERS: dict[Path, PieceEncoder | None] = {}


def _backend(model_dir: Path) -> Any:
    # The configured backend (missing special tokens added as transformers does).
    return Tokenizer.from_dir(model_dir).backend


def _encoder(model_dir: Path) -> PieceEncoder:
    if model_dir not in _ENCODERS:
        _ENCODERS[model_dir] = PieceEncoder.for_backend(_backend(model_dir))
    encoder = _ENCODERS[model_dir]
    assert encoder is not None
    return encoder


# The test tokenizers it serves (the others are checked in test_eligibility).
@pytest.mark.parametrize("name", ["byte_level", "tiny_model"])
@SETTINGS
@given(data=st.data())
def test_pieces_encode_like_the_whole_text(
    tokenizer_dirs: dict[str, Path], name: str, data: Any
) -> None:
    if name not in tokenizer_dirs:
        pytest.skip("needs the Llama 3 test model")
    encoder = _encoder(tokenizer_dirs[name])
    backend = encoder._backend
    added = sorted(t.content for t in backend.get_added_tokens_decoder().values())
    fragments = st.sampled_from(TEXT_FRAGMENTS + added[:8] + added[-8:])
    text = data.draw(
        st.one_of(
            st.lists(fragments, max_size=16).map("".join),
            st.lists(st.one_of(fragments, st.text(max_size=8)), max_size=10).map("".join),
        )
    )
    expected = backend.encode(text, add_special_tokens=False).ids
    assert encoder.encode(text) == expected
    assert encoder.encode(text) == expected  # again, from the kept pieces


class _CountingBackend:
    """A backend that records the texts it was asked to encode."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.texts: list[str] = []

    def encode(self, text: str, add_special_tokens: bool = True) -> Any:
        self.texts.append(text)
        return self.backend.encode(text, add_special_tokens=add_special_tokens)


def test_a_chat_prompt_encodes_only_its_new_pieces(tokenizer_dirs: dict[str, Path]) -> None:
    if "tiny_model" not in tokenizer_dirs:
        pytest.skip("needs the Llama 3 test model")
    backend = _backend(tokenizer_dirs["tiny_model"])
    counting = _CountingBackend(backend)
    raw = {t.content: i for i, t in backend.get_added_tokens_decoder().items()}
    encoder = PieceEncoder(counting, raw, {})
    system = "Cutting Knowledge Date: December 2023\nToday Date: 02 Dec 2026\n\nBe brief."

    def prompt(user: str) -> str:
        return (
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
            f"{system}<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
            f"{user}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
        )

    for user in ("What is 2 + 2?", "Tell me a story.", "What is 2 + 2?"):
        text = prompt(user)
        assert encoder.encode(text) == backend.encode(text, add_special_tokens=False).ids
    # Each distinct piece went to the library once: the role names, the text after each
    # header (system text, the two user messages, the assistant's empty turn).
    assert sorted(counting.texts) == sorted(
        {
            "system",
            "user",
            "assistant",
            "\n\n" + system,
            "\n\nWhat is 2 + 2?",
            "\n\nTell me a story.",
            "\n\n",
        }
    )


def test_eligibility(tokenizer_dirs: dict[str, Path]) -> None:
    # Metaspace prefixes only the text's first piece: piece by piece would differ.
    assert PieceEncoder.for_backend(_backend(tokenizer_dirs["unigram_metaspace"])) is None
    # A normalizer that prepends "▁" to the text would prepend it to every piece.
    assert PieceEncoder.for_backend(_backend(tokenizer_dirs["byte_fallback"])) is None
    assert PieceEncoder.for_backend(_backend(tokenizer_dirs["byte_level"])) is not None
    # An added token that swallows the spaces next to it joins pieces: encoded whole.
    stripping = tokenizers.Tokenizer.from_file(str(tokenizer_dirs["byte_level"] / "tokenizer.json"))
    stripping.add_special_tokens([tokenizers.AddedToken("<mask>", lstrip=True)])
    assert PieceEncoder.for_backend(stripping) is None
    normalized = tokenizers.Tokenizer.from_file(
        str(tokenizer_dirs["byte_level"] / "tokenizer.json")
    )
    normalized.normalizer = tokenizers.normalizers.NFC()
    assert PieceEncoder.for_backend(normalized) is None


def test_kept_pieces_are_bounded(
    tokenizer_dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(piece_cache, "MAX_CACHED_CHARS", 200)
    backend = _backend(tokenizer_dirs["byte_level"])
    encoder = PieceEncoder.for_backend(backend)
    assert encoder is not None
    special = next(iter(backend.get_added_tokens_decoder().values())).content
    for i in range(100):
        text = f"piece number {i} {special} and another {i * 7}"
        assert encoder.encode(text) == backend.encode(text, add_special_tokens=False).ids
    assert 0 < encoder._cached_chars <= 200
    assert encoder._cached_chars == sum(map(len, encoder._ids))


@SETTINGS
@given(parts=st.lists(st.sampled_from(["<a>", "<a>b", "<ab>", "a>", "<", "a", "b", ">", " x"])))
def test_overlapping_added_tokens_split_as_tokenizers_does(
    tokenizer_dirs: dict[str, Path], parts: list[str]
) -> None:
    # Tokens that are prefixes of one another, or overlap: the longest at the leftmost position
    # wins, in tokenizers and in the piece encoder's trie pattern alike.
    key = tokenizer_dirs["byte_level"] / "overlapping"
    if key not in _ENCODERS:
        backend = tokenizers.Tokenizer.from_file(
            str(tokenizer_dirs["byte_level"] / "tokenizer.json")
        )
        backend.add_special_tokens(
            [tokenizers.AddedToken(t) for t in ("<a>", "<a>b", "<ab>", "a>")]
        )
        _ENCODERS[key] = PieceEncoder.for_backend(backend)
    encoder = _ENCODERS[key]
    assert encoder is not None
    text = "".join(parts)
    assert encoder.encode(text) == encoder._backend.encode(text, add_special_tokens=False).ids

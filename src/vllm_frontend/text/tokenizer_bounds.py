"""A vocabulary's largest token id and longest piece, read without building its whole map.

The Rust library's ``get_vocab(with_added_tokens=True)`` costs ~0.1 s on a 128k vocabulary; these
read the same two figures from the tokenizer cache's summary, or from ``tokenizer.json``, and
check them against the loaded tokenizer (None where they cannot tell).
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import tokenizers

from vllm_frontend.text.tokenizer_cache import VocabSummary, read_vocab

__all__ = ["bounds_from_source", "bounds_from_summary"]


def _added_token_ids(backend: tokenizers.Tokenizer) -> dict[str, int] | None:
    """Every added token's content and current id (None if one has no id)."""
    added: dict[str, int] = {}
    for token in backend.get_added_tokens_decoder().values():
        token_id = backend.token_to_id(token.content)
        if token_id is None:
            return None
        added[token.content] = token_id
    return added


def _checked(backend: tokenizers.Tokenizer, max_id: int, longest: str) -> tuple[int, int] | None:
    if backend.id_to_token(max_id) is None or backend.token_to_id(longest) is None:
        return None
    return max_id, len(longest)


def bounds_from_summary(
    backend: tokenizers.Tokenizer, summary: VocabSummary | None
) -> tuple[int, int] | None:
    """The largest id and longest piece of ``get_vocab(with_added_tokens=True)``, from the
    tokenizer cache's summary of the model vocabulary; None when it cannot tell.

    The map the library builds is the model's pieces with their ids, then every added token
    with its current id over them. Unless an added token takes the model's largest id away,
    the largest id is the larger of the model's and the added tokens', and the longest
    piece the longer of the two longest.
    """
    if summary is None:
        return None
    if summary.entries != backend.get_vocab_size(with_added_tokens=False):
        return None
    added = _added_token_ids(backend)
    if added is None or added.get(summary.max_id_piece, summary.max_id) != summary.max_id:
        return None
    max_id = max([summary.max_id, *added.values()])
    longest = max([summary.longest_piece, *added], key=len)
    if max_id < 0 or not longest:
        return None
    return _checked(backend, max_id, longest)


def bounds_from_source(backend: tokenizers.Tokenizer, source: Path) -> tuple[int, int] | None:
    """The largest id and longest piece of ``get_vocab(with_added_tokens=True)``, from
    tokenizer.json; None when it cannot tell.

    The Rust call spends ~0.1 s on a 128k vocabulary (a copy of the model's map, then one
    Python object per entry); decoding just the model's vocabulary from the file takes half
    that. The map is rebuilt the way the Rust library builds it (see
    :func:`bounds_from_summary`). The loaded tokenizer must agree on the entry count and
    know the results.
    """
    try:
        entries = read_vocab(source.read_bytes())
    except (OSError, msgspec.ValidationError, msgspec.DecodeError):
        return None
    if entries is None:
        return None
    if len(entries) != backend.get_vocab_size(with_added_tokens=False):
        return None
    if isinstance(entries, list):
        vocab = {piece: i for i, (piece, _) in enumerate(entries)}
    else:
        vocab = entries
    added = _added_token_ids(backend)
    if added is None:
        return None
    vocab.update(added)
    if not vocab:
        return None
    return _checked(backend, max(vocab.values()), max(vocab, key=len))

"""Models that ship a tiktoken BPE file instead of ``tokenizer.json``.

vLLM loads them through transformers, whose ``TokenizersBackend`` converts the file
(a ``tokenizer.model`` that is not a SentencePiece model) into a
``tokenizers`` BPE: byte-level pieces of the ranks, merges recovered from the ranks (for each
token, the splits into two tokens, in rank order), tiktoken's default split pattern, the
``ByteLevel`` decoder and post-processor, and the tokens of ``added_tokens_decoder`` past the
file's ranks (gaps filled with ``<|reserved_token_N|>``) plus ``extra_special_tokens`` added as
special tokens. This module builds the same ``tokenizers.Tokenizer``, without transformers or
tiktoken; :class:`~vllm_frontend.text.tokenizer.Tokenizer` then configures it from
``tokenizer_config.json`` as for a ``tokenizer.json``. Only for the generic tokenizer classes
(``tokenizer_class`` ``PreTrainedTokenizerFast`` or ``TokenizersBackend``); other classes
convert with their own rules, and a model whose tokenizer is its own code needs it run: both
are refused at startup, naming what the directory has.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tokenizers
from tokenizers import AddedToken, Regex, decoders, pre_tokenizers, processors
from tokenizers.models import BPE

__all__ = ["GENERIC_CLASSES", "tiktoken_backend", "tiktoken_file"]

GENERIC_CLASSES = frozenset({"PreTrainedTokenizerFast", "TokenizersBackend"})
"""Tokenizer classes transformers converts a tiktoken file for without model code."""

_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
"""The split pattern of transformers' tiktoken conversion (tiktoken's cl100k-style one)."""


def _byte_chars() -> list[str]:
    # GPT-2's reversible byte -> printable character map (ByteLevel's alphabet).
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(0x100 + extra)
            extra += 1
    return [table[b] for b in range(256)]


_BYTE_CHARS = _byte_chars()


def _piece(token: bytes) -> str:
    return "".join(_BYTE_CHARS[b] for b in token)


def read_ranks(path: Path) -> dict[bytes, int]:
    """The ranks of a tiktoken BPE file (``base64-token rank`` per line)."""
    ranks: dict[bytes, int] = {}
    for line in path.read_bytes().splitlines():
        if not line:
            continue
        token, rank = line.split()
        ranks[base64.b64decode(token)] = int(rank)
    return ranks


def is_tiktoken(path: Path) -> bool:
    """Whether ``path`` reads as a tiktoken BPE file (its first lines are ``base64 int``)."""
    try:
        with path.open("rb") as f:
            head = [f.readline() for _ in range(3)]
    except OSError:
        return False
    lines = [line.strip() for line in head if line.strip()]
    if not lines:
        return False
    for line in lines:
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            return False
        try:
            base64.b64decode(parts[0], validate=True)
        except ValueError:
            return False
    return True


def tiktoken_file(directory: Path, config: Mapping[str, Any]) -> Path | None:
    """The tiktoken file transformers converts for this directory (None if none): its
    ``tokenizer.model`` when that is a tiktoken file and ``tokenizer_config.json`` names a
    generic tokenizer class."""
    if config.get("tokenizer_class") not in GENERIC_CLASSES:
        return None
    path = directory / "tokenizer.model"
    return path if path.is_file() and is_tiktoken(path) else None


def _extra_special_tokens(config: Mapping[str, Any], base_size: int) -> list[str]:
    decoder = config.get("added_tokens_decoder") or {}
    added: dict[int, str] = {
        int(token_id): str(token["content"]) if isinstance(token, Mapping) else str(token)
        for token_id, token in decoder.items()
    }
    extra = config.get("extra_special_tokens") or []
    extra_list = list(extra.keys()) if isinstance(extra, Mapping) else list(extra)
    top = max(added, default=0)
    if top >= base_size:
        filled = [added.get(i, f"<|reserved_token_{i}|>") for i in range(base_size, top + 1)]
        seen = set(filled)
        extra_list = filled + [t for t in extra_list if t not in seen]
    return [str(t) for t in extra_list]


def tiktoken_backend(path: Path, config: Mapping[str, Any]) -> tokenizers.Tokenizer:
    """The ``tokenizers.Tokenizer`` transformers builds from the tiktoken file ``path``."""
    ranks = read_ranks(path)
    vocab = {_piece(token): rank for token, rank in ranks.items()}
    merges: list[tuple[bytes, bytes, int]] = []
    for token, rank in ranks.items():
        if len(token) == 1:
            continue
        local = [
            (token[:i], token[i:], rank)
            for i in range(1, len(token))
            if token[:i] in ranks and token[i:] in ranks
        ]
        local.sort(key=lambda m: (ranks[m[0]], ranks[m[1]]))
        merges.extend(local)
    merges.sort(key=lambda m: m[2])
    backend = tokenizers.Tokenizer(
        BPE(vocab, [(_piece(a), _piece(b)) for a, b, _ in merges], fuse_unk=False)
    )
    backend.model.ignore_merges = True
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    extra = _extra_special_tokens(config, len(ranks))
    if extra:
        backend.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in extra])
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    return backend

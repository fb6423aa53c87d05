"""Incremental detokenization over a window of vocabulary pieces, the state a stateless
caller carries between calls (vLLM 0.32's ``detokenize_incrementally`` as its derender drives
it: one token at a time, the window trimmed to what the next token can still change).

The state is plain data: the trailing pieces (``prev_tokens``) and two offsets into them, so a
client can send it back with the next chunk of token ids. Pieces are the tokenizer's
vocabulary strings (``convert_ids_to_tokens``); text is the decoder's join of a window
(``convert_tokens_to_string``), of which only the part past the read offset is new.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from .tokenizer import Tokenizer

__all__ = ["PieceDetokenizer", "PieceWindow"]

_SEED_OFFSET = 5
"""Pieces of the prompt before the read offset that the first output token is decoded after
(vLLM's ``INITIAL_INCREMENTAL_DETOKENIZATION_OFFSET``)."""

_REPLACEMENT = "\ufffd"


class PieceWindow(NamedTuple):
    """The carried decode state: trailing pieces and the prefix and read offsets into them."""

    prev_tokens: list[str]
    prefix_offset: int
    read_offset: int


class PieceDetokenizer:
    """Decodes token ids piece by piece from a :class:`PieceWindow`, as vLLM's slow-path
    incremental detokenizer does for a fast (``tokenizers``) tokenizer."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        """Pieces, special ids and the decoder of ``tokenizer``."""
        backend = tokenizer.backend
        self._to_piece = backend.id_to_token
        self._decoder = backend.decoder
        self._special_ids = frozenset(tokenizer.all_special_tokens.values())
        self._size = tokenizer.vocab_size

    def pieces(self, token_ids: Sequence[int], skip_special_tokens: bool) -> list[str]:
        """Vocabulary pieces of ``token_ids`` (special ones left out when skipping them; an id
        without a piece gives ``""``)."""
        skip = self._special_ids if skip_special_tokens else ()
        to_piece = self._to_piece
        return [to_piece(i) or "" for i in token_ids if i not in skip]

    def _join(self, pieces: list[str]) -> str:
        decoder = self._decoder
        return decoder.decode(pieces) if decoder is not None else " ".join(pieces)

    def seed(self, prompt_ids: Sequence[int] | None, skip_special_tokens: bool) -> PieceWindow:
        """The window after a prompt (its last few pieces), or an empty one."""
        if not prompt_ids:
            return PieceWindow([], 0, 0)
        pieces = self.pieces(prompt_ids[-_SEED_OFFSET - 2 :], skip_special_tokens)
        read = len(pieces)
        return PieceWindow(pieces, max(read - _SEED_OFFSET, 0), read)

    def decode(
        self, window: PieceWindow, token_ids: Sequence[int], skip_special_tokens: bool
    ) -> tuple[str, PieceWindow]:
        """The text ``token_ids`` add after ``window``, and the window after them (trimmed to
        its prefix offset, which becomes 0)."""
        prev, prefix, read = window
        prev = list(prev)
        parts: list[str] = []
        size = self._size
        for token_id in token_ids:
            new = self.pieces((token_id,), skip_special_tokens) if 0 <= token_id < size else [""]
            count = len(prev) + len(new)
            start = min(prefix, read, len(prev))
            tokens = prev[start:] + new
            prefix_text = self._join(tokens[prefix - start : read - start])
            text = self._join(tokens[prefix - start :])
            if len(text) > len(prefix_text) and not text.endswith(_REPLACEMENT):
                parts.append(text[len(prefix_text) :])
                prefix, read = read, count
            prev = (prev + new)[prefix:]
            read -= prefix
            prefix = 0
        return "".join(parts), PieceWindow(prev, prefix, read)

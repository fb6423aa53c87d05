"""Incremental detokenization of one generated sequence, token by token.

Follows vLLM's `FastIncrementalDetokenizer` (vllm/v1/engine/detokenizer.py), which is what vLLM
uses for every tokenizer backed by the Rust `tokenizers` library: a `tokenizers` `DecodeStream`
primed with the prompt ids (so leading spaces and byte merges come out right), stepped once per
generated token. A step that cannot yet produce valid UTF-8 (a multi-byte character split across
byte-fallback or byte-level tokens) yields nothing; the bytes come out with the token that
completes the character, and bytes still incomplete when the sequence ends are dropped, as vLLM
does.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from tokenizers.decoders import DecodeStream

from vllm_frontend.text.tokenizer import Tokenizer

__all__ = ["IncrementalDetokenizer"]

_log = logging.getLogger(__name__)

# The error text of tokenizers' DecodeStream when the decoded prefix stops being monotonic.
_INVALID_PREFIX = "Invalid prefix encountered"


class IncrementalDetokenizer:
    """Turns a sequence's token ids into text one token at a time, O(1) work per token."""

    __slots__ = (
        "_added_tokens",
        "_backend",
        "_last_added",
        "_request_id",
        "_skip_special_tokens",
        "_step",
        "_stream",
        "_suppress_spaces",
    )

    def __init__(
        self,
        tokenizer: Tokenizer,
        prompt_token_ids: Sequence[int],
        *,
        skip_special_tokens: bool = True,
        spaces_between_special_tokens: bool = True,
        request_id: str = "",
    ) -> None:
        self._backend = tokenizer.backend
        self._skip_special_tokens = skip_special_tokens
        self._request_id = request_id
        self._stream = DecodeStream(
            ids=list(prompt_token_ids), skip_special_tokens=skip_special_tokens
        )
        self._step = self._stream.step
        # vLLM only honours spaces_between_special_tokens=False when special tokens are kept, and
        # then only between two consecutive added tokens (special or not).
        added = tokenizer.added_tokens
        self._suppress_spaces = (
            not skip_special_tokens and not spaces_between_special_tokens and bool(added)
        )
        self._added_tokens = added
        self._last_added = False

    def decode_next(self, token_id: int) -> str:
        """The text this token adds (possibly empty while a character is incomplete)."""
        try:
            text = self._step(self._backend, token_id)
        except (OverflowError, TypeError):
            # An id that does not fit the tokenizer's integer type: vLLM logs it and emits nothing.
            _log.exception("Encountered invalid token id: %r", token_id)
            text = None
        except Exception as e:
            if not str(e).startswith(_INVALID_PREFIX):
                raise
            # DecodeStream's state breaks when decoding is not prefix-monotonic; vLLM restarts the
            # stream without context and carries on (vllm issue 17448).
            _log.warning(
                "Encountered invalid prefix detokenization error for request %s, "
                "resetting decode stream.",
                self._request_id,
            )
            self._stream = DecodeStream(skip_special_tokens=self._skip_special_tokens)
            self._step = self._stream.step
            text = self._step(self._backend, token_id)
        if self._suppress_spaces:
            content = self._added_tokens.get(token_id)
            if content is not None and self._last_added:
                # The raw token, without the space the decoder put between two added tokens.
                text = content
            self._last_added = content is not None
        return text or ""

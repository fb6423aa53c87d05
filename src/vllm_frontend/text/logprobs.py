"""Engine logprob rows turned into per-position `{token_id: Logprob}` maps with token strings.

Follows vLLM's `LogprobsProcessor` (vllm/v1/engine/logprobs.py) and
`append_logprobs_for_next_position` (vllm/logprobs.py):

* a row is `[sampled, top-1, top-2, ...]`; only the first `num_logprobs + 1` columns are used
  (all of them for -1) because the engine pads rows to the widest request in the batch;
* ranks: the engine's rank for the sampled token, then 1, 2, 3, ... for the candidates; a map
  keeps the sampled token first, and a candidate equal to it overwrites its value in place;
* each token string is the token decoded alone (`decode([id])`), with leading spaces restored
  for Metaspace (SentencePiece) tokenizers, and a string ending in U+FFFD (a byte of a split
  multi-byte character) re-decoded together with up to 4 preceding sampled tokens;
* prompt logprobs start with `None` for the first prompt token.

The OpenAI shapes clamp logprobs to -9999.0 (vLLM's chat and completion serving do
`max(logprob, -9999.0)`); `clamp_logprob` does the same for the server.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from tokenizers import pre_tokenizers

from vllm_frontend.text.tokenizer import Tokenizer

__all__ = [
    "Logprob",
    "LogprobsAccumulator",
    "PositionLogprobs",
    "TokenStrings",
    "clamp_logprob",
    "token_id_placeholder",
]

_REPLACEMENT = "\ufffd"
# vLLM looks back at most 4 sampled tokens: enough for any UTF-8 sequence.
_MAX_CONTEXT = 4


class Logprob(NamedTuple):
    """One candidate's log probability, vocabulary rank (1 = best) and decoded text."""

    logprob: float
    rank: int | None
    decoded_token: str | None


PositionLogprobs = dict[int, Logprob]


def clamp_logprob(value: float) -> float:
    """The OpenAI response floor for a logprob (`-inf` becomes -9999.0; NaN passes, as in vLLM)."""
    return max(value, -9999.0)


def token_id_placeholder(token_id: int) -> str:
    """How a token is shown with `return_tokens_as_token_ids`."""
    return f"token_id:{token_id}"


class TokenStrings:
    """Per-token strings as vLLM's logprobs show them, cached per tokenizer."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer
        self._marker = _leading_space_marker(tokenizer)
        self._cache: dict[int, str] = {}

    @property
    def tokenizer(self) -> Tokenizer:
        """The tokenizer whose tokens these are."""
        return self._tokenizer

    def token(self, token_id: int) -> str:
        """The text of one token on its own, as vLLM's `convert_ids_list_to_tokens` gives it."""
        text = self._cache.get(token_id)
        if text is None:
            text = self._tokenizer.decode([token_id]) or ""
            if self._marker is not None:
                raw = self._tokenizer.id_to_token(token_id) or ""
                text = _restore_leading_spaces(raw, text, self._marker)
            if len(self._cache) < 1_000_000:
                self._cache[token_id] = text
        return text

    def corrected(self, token_id: int, context: Sequence[int]) -> str:
        """The text a token ending in U+FFFD completes, using the preceding sampled tokens."""
        decode = self._tokenizer.decode
        num_context = min(len(context), _MAX_CONTEXT)
        for n in range(1, num_context + 1):
            ctx = list(context[-n:])
            full = decode([*ctx, token_id])
            if full.endswith(_REPLACEMENT):
                continue
            # Context tokens that were themselves incomplete bytes belong to this token's text.
            clean_end = len(ctx)
            for j in range(len(ctx) - 1, -1, -1):
                if decode([ctx[j]]).endswith(_REPLACEMENT):
                    clean_end = j
                else:
                    break
            prefix = decode(ctx[:clean_end]) if clean_end > 0 else ""
            if full.startswith(prefix):
                return full[len(prefix) :]
            common = 0
            for a, b in zip(prefix, full, strict=False):
                if a != b:
                    break
                common += 1
            return full[common:]
        return ""


def _leading_space_marker(tokenizer: Tokenizer) -> str | None:
    # Only a Metaspace pre-tokenizer has a marker whose leading instance decode() strips.
    if tokenizer.is_mistral:
        return None  # (vLLM finds no backend_tokenizer on a mistral_common tokenizer)
    pre = tokenizer.backend.pre_tokenizer
    if isinstance(pre, pre_tokenizers.Metaspace):
        return str(pre.replacement)
    if isinstance(pre, pre_tokenizers.Sequence):
        index = 0
        while True:
            try:
                sub = pre[index]
            except IndexError:
                return None
            if isinstance(sub, pre_tokenizers.Metaspace):
                return str(sub.replacement)
            index += 1
    return None


def _restore_leading_spaces(raw: str, text: str, marker: str) -> str:
    markers = len(raw) - len(raw.lstrip(marker))
    if not markers:
        return text
    missing = markers - (len(text) - len(text.lstrip(" ")))
    return " " * missing + text if missing > 0 else text


class LogprobsAccumulator:
    """Sample and prompt logprobs of one sequence, decoded as they arrive."""

    __slots__ = (
        "_strings",
        "cumulative_logprob",
        "num_logprobs",
        "num_prompt_logprobs",
        "prompt",
        "sample",
    )

    def __init__(
        self,
        strings: TokenStrings | None,
        num_logprobs: int | None,
        num_prompt_logprobs: int | None,
    ) -> None:
        self._strings = strings
        self.num_logprobs = num_logprobs
        self.num_prompt_logprobs = num_prompt_logprobs
        self.sample: list[PositionLogprobs] | None = [] if num_logprobs is not None else None
        self.prompt: list[PositionLogprobs | None] | None = (
            [None] if num_prompt_logprobs is not None else None
        )
        self.cumulative_logprob: float | None = 0.0 if num_logprobs is not None else None

    def add_sample(self, token_ids: Any, logprobs: Any, ranks: Any) -> None:
        """Append rows `[P, K+1]` of ids/logprobs and `[P]` sampled ranks (numpy or lists)."""
        if self.sample is None or self.num_logprobs is None:
            return
        ids_rows = token_ids.tolist() if hasattr(token_ids, "tolist") else token_ids
        lp_rows = logprobs.tolist() if hasattr(logprobs, "tolist") else logprobs
        rank_list = ranks.tolist() if hasattr(ranks, "tolist") else ranks
        for ids, lps, rank in zip(ids_rows, lp_rows, rank_list, strict=False):
            self.cumulative_logprob = (self.cumulative_logprob or 0.0) + lps[0]
            self.sample.append(self._position(ids, lps, rank, self.num_logprobs, self.sample))

    def add_prompt(self, token_ids: Any, logprobs: Any, ranks: Any) -> None:
        """Append prompt rows (row r scores prompt token r+1)."""
        if self.prompt is None or self.num_prompt_logprobs is None:
            return
        ids_rows = token_ids.tolist() if hasattr(token_ids, "tolist") else token_ids
        lp_rows = logprobs.tolist() if hasattr(logprobs, "tolist") else logprobs
        rank_list = ranks.tolist() if hasattr(ranks, "tolist") else ranks
        for ids, lps, rank in zip(ids_rows, lp_rows, rank_list, strict=False):
            self.prompt.append(
                self._position(ids, lps, rank, self.num_prompt_logprobs, self.prompt)
            )

    def pop_prompt(self) -> list[PositionLogprobs | None] | None:
        """Prompt logprobs gathered so far, forgotten afterwards (vLLM's DELTA semantics)."""
        prompt = self.prompt
        if prompt:
            self.prompt = []
        return prompt

    def truncate_sample(self, length: int) -> None:
        """Drop positions beyond `length` (tokens cut by a stop string)."""
        if self.sample is not None:
            del self.sample[length:]

    def _position(
        self,
        ids: list[int],
        lps: list[float],
        rank: int,
        num: int,
        history: Sequence[PositionLogprobs | None],
    ) -> PositionLogprobs:
        width = len(lps) if num == -1 else num + 1
        ids = ids[:width]
        strings = self._strings
        position: PositionLogprobs = {}
        if strings is None:
            for i, (token_id, lp) in enumerate(zip(ids, lps, strict=False)):
                position[token_id] = Logprob(lp, rank if i == 0 else i, None)
            return position
        decoded = [strings.token(t) for t in ids]
        if any(text.endswith(_REPLACEMENT) for text in decoded):
            context = _sampled_context(history)
            decoded = [
                strings.corrected(t, context) if text.endswith(_REPLACEMENT) else text
                for t, text in zip(ids, decoded, strict=True)
            ]
        for i, (token_id, lp, text) in enumerate(zip(ids, lps, decoded, strict=False)):
            position[token_id] = Logprob(lp, rank if i == 0 else i, text)
        return position


def _sampled_context(history: Sequence[PositionLogprobs | None]) -> list[int]:
    # The sampled (or prompt) token of a position is its map's first key.
    out: list[int] = []
    for entry in history[-_MAX_CONTEXT:]:
        if entry:
            out.append(next(iter(entry)))
    return out

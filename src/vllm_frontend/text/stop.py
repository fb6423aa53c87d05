"""Stop strings over incrementally decoded text, and the text released to the client.

Semantics follow vLLM's `BaseIncrementalDetokenizer.update` / `check_stop_strings` /
`get_next_output_text` (vllm/v1/engine/detokenizer.py):

* stop strings are only looked for once more than `min_tokens` tokens exist, and only in text
  produced by tokens after the first `min_tokens`;
* when several stop strings appear in new text the one that *ends* first wins (ties: list order);
* the text is cut before the stop string (or after it with `include_stop_str_in_output`), and
  tokens generated after the one that completed the match are dropped;
* while streaming without `include_stop_str_in_output`, the last `max(len(stop)) - 1` characters
  are held back so that a partial stop string is never sent; they are released at the end.

Unlike vLLM, the text is kept as pending pieces plus a short tail, so each update costs time
proportional to the new text, not to everything generated so far.
"""

from __future__ import annotations

import sys
from bisect import bisect_left
from collections.abc import Sequence

__all__ = ["StopMatch", "TextAccumulator"]


class StopMatch:
    """A stop string found in the text: which one, and how many new tokens to keep."""

    __slots__ = ("num_new_tokens_kept", "stop_string")

    def __init__(self, stop_string: str, num_new_tokens_kept: int) -> None:
        self.stop_string = stop_string
        self.num_new_tokens_kept = num_new_tokens_kept

    def __repr__(self) -> str:
        return f"StopMatch({self.stop_string!r}, {self.num_new_tokens_kept})"


class TextAccumulator:
    """One sequence's output text: stop-string matching plus hold-back release of deltas."""

    __slots__ = (
        "_hold",
        "_include",
        "_length",
        "_min_tokens",
        "_num_tokens",
        "_pending",
        "_pending_len",
        "_released",
        "_released_len",
        "_stop",
        "_tail",
        "_tail_len",
    )

    def __init__(
        self,
        stop: Sequence[str] = (),
        include_stop_str_in_output: bool = False,
        min_tokens: int = 0,
        keep_released: bool = False,
    ) -> None:
        self._stop = list(stop)
        self._include = include_stop_str_in_output
        self._min_tokens = min_tokens
        if self._stop:
            longest = max(map(len, self._stop))
            self._hold = 0 if include_stop_str_in_output else longest - 1
            # The search for a stop string never needs more old text than longest - 1 chars.
            self._tail_len = max(longest - 1, 0)
        else:
            self._hold = self._tail_len = 0
        self._tail = ""
        self._length = 0
        self._num_tokens = 0
        self._pending: list[str] = []
        self._pending_len = 0
        self._released_len = 0
        self._released: list[str] | None = [] if keep_released else None

    def add(self, token_texts: Sequence[str]) -> StopMatch | None:
        """Append the text of each new token (in order); report a stop string if one completed.

        After a match the text is already truncated and later calls must not be made.
        """
        num_prev = self._num_tokens
        self._num_tokens += len(token_texts)
        new = "".join(token_texts)
        length_before = self._length
        self._length += len(new)
        match = None
        if self._stop and self._num_tokens > self._min_tokens:
            match = self._find_stop(token_texts, new, num_prev, length_before)
            if match is not None:
                return match
        if new:
            self._pending.append(new)
            self._pending_len += len(new)
            if self._tail_len:
                self._tail = (self._tail + new)[-self._tail_len :]
        return None

    def add_plain(self, text: str, num_tokens: int) -> None:
        """:meth:`add` of ``num_tokens`` tokens whose texts joined are ``text``, for an
        accumulator without stop strings (where :meth:`add` only records the text)."""
        self._num_tokens += num_tokens
        if text:
            length = len(text)
            self._length += length
            self._pending.append(text)
            self._pending_len += length

    def _find_stop(
        self, token_texts: Sequence[str], new: str, num_prev: int, length_before: int
    ) -> StopMatch | None:
        # Text offsets after each new token, relative to the start of this update.
        offsets = [0]
        for text in token_texts:
            offsets.append(offsets[-1] + len(text))
        check_from = offsets[max(self._min_tokens - num_prev, 0)]
        new_chars = len(new) - check_from
        if not new_chars:
            return None
        window = self._tail + new
        window_start = length_before - len(self._tail)  # absolute offset of window[0]
        total = self._length
        best: str | None = None
        best_index = 0
        best_end = sys.maxsize
        for stop in self._stop:
            # vLLM searches from 1 - new_chars - len(stop) chars before the end.
            start = max(total + 1 - new_chars - len(stop), 0) - window_start
            index = window.find(stop, start)
            if index == -1:
                continue
            end = window_start + index + len(stop)
            if end < best_end:
                best, best_index, best_end = stop, window_start + index, end
        if best is None:
            return None
        cut = best_end if self._include else best_index
        # Tokens up to the one whose text reaches the end of the stop string are kept.
        kept = bisect_left(offsets, best_end - length_before, lo=1)
        self._truncate(cut, new)
        return StopMatch(best, kept)

    def _truncate(self, cut: int, new: str) -> None:
        pending = "".join(self._pending) + new
        keep = max(cut - self._released_len, 0)
        pending = pending[:keep]
        self._pending = [pending] if pending else []
        self._pending_len = len(pending)
        self._length = self._released_len + len(pending)

    def release(self, finished: bool) -> str:
        """Text not released before, minus the hold-back unless the sequence has finished."""
        available = self._pending_len - (0 if finished else self._hold)
        if available <= 0:
            return ""
        pending = self._pending[0] if len(self._pending) == 1 else "".join(self._pending)
        out = pending[:available]
        rest = pending[available:]
        self._pending = [rest] if rest else []
        self._pending_len = len(rest)
        self._released_len += available
        if self._released is not None:
            self._released.append(out)
        return out

    def text(self) -> str:
        """All text so far; complete only with `keep_released=True` (or nothing released)."""
        released = "".join(self._released) if self._released else ""
        return released + "".join(self._pending)

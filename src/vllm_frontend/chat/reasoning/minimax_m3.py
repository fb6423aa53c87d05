"""``minimax_m3``: ``<mm:think>`` … ``</mm:think>`` reasoning read from the text, as vLLM 0.32's
``minimax_m3_reasoning_parser.py`` does: the chat template opens the block itself when
``thinking_mode`` is ``enabled``; a first ``</mm:think>`` without a block is dropped; streaming
re-reads the text so far and sends what each delta makes visible (a marker's beginning held
back), and hands the tool phase the ids of the content that ended the reasoning."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from vllm_frontend.chat.parsed import OutputDelta, both_set
from vllm_frontend.chat.reasoning.base import ReasoningParser, partial_overlap

__all__ = ["MiniMaxM3ReasoningParser"]


def _find(ids: Sequence[int], marker: tuple[int, ...], last: bool = False) -> int:
    """Where ``marker`` occurs in ``ids`` (first or last), ``-1`` if nowhere."""
    n = len(marker)
    if not n or n > len(ids):
        return -1
    starts = range(len(ids) - n, -1, -1) if last else range(len(ids) - n + 1)
    for i in starts:
        if tuple(ids[i : i + n]) == marker:
            return i
    return -1


def _ends_with_part(ids: Sequence[int], marker: tuple[int, ...]) -> bool:
    """Whether ``ids`` end with a proper beginning of ``marker``."""
    longest = min(len(ids), len(marker) - 1)
    return any(tuple(ids[-k:]) == marker[:k] for k in range(longest, 0, -1))


def _strip_part(text: str, marker: str) -> str:
    return text[: len(text) - partial_overlap(text, (marker,))]


def _added(before: str | None, now: str | None) -> str | None:
    if not now:
        return None
    if not before:
        return now
    if now.startswith(before):
        return now[len(before) :] or None
    return now


class MiniMaxM3ReasoningParser(ReasoningParser):
    """``minimax_m3``."""

    name = "minimax_m3"
    reads_text = True
    uses_codec = True
    START: ClassVar[str] = "<mm:think>"
    END: ClassVar[str] = "</mm:think>"
    required_tokens: ClassVar[tuple[str, ...]] = (START, END)

    def __init__(
        self, vocab: Mapping[str, int], chat_template_kwargs: Mapping[str, Any] | None = None
    ) -> None:
        """See :class:`ReasoningParser`. The markers are single tokens of the vocabulary (as
        in MiniMax M3's tokenizer), so their ids are those tokens'."""
        super().__init__(vocab, chat_template_kwargs)
        self.start_ids = (vocab[self.START],)
        self.end_ids = (vocab[self.END],)
        self.opened = (chat_template_kwargs or {}).get("thinking_mode") == "enabled"
        self._reset()

    def _reset(self) -> None:
        self._ended = False
        self._active = self.opened
        self._pending = False
        self._last_delta: tuple[int, ...] | None = None
        self._last_content: list[int] | None = None

    # -- whole output ------------------------------------------------------------------------

    def prompt_ends_reasoning(self, prompt_token_ids: Sequence[int]) -> bool:
        """Whether the last end marker comes after the last start marker (or alone)."""
        start = _find(prompt_token_ids, self.start_ids, last=True)
        end = _find(prompt_token_ids, self.end_ids, last=True)
        return end >= 0 and (start < 0 or end > start)

    def extract(self, text: str) -> tuple[str | None, str | None]:
        """The block's text is reasoning; the text around it content."""
        if not self.opened and text.startswith(self.END):
            return None, text[len(self.END) :] or None
        if self.opened and self.START not in text:
            reasoning, end, content = text.partition(self.END)
            return (reasoning, content or None) if end else (text, None)
        if self.START not in text:
            return None, text
        before, _, after = text.partition(self.START)
        reasoning, end, content = after.partition(self.END)
        if not end:
            return reasoning, before or None
        return reasoning, (before + content) or None

    def count_reasoning_tokens(self, token_ids: Sequence[int], streamed: bool) -> int:
        """Tokens inside blocks (the template's open block included)."""
        count, depth, i = 0, 1 if self.opened else 0, 0
        ids = list(token_ids)
        s, e = self.start_ids, self.end_ids
        while i < len(ids):
            if tuple(ids[i : i + len(s)]) == s:
                depth += 1
                i += len(s)
            elif tuple(ids[i : i + len(e)]) == e:
                depth = max(0, depth - 1)
                i += len(e)
            else:
                count += 1 if depth > 0 else 0
                i += 1
        return count

    # -- streaming ---------------------------------------------------------------------------

    def _visible(self, text: str) -> tuple[str | None, str | None]:
        """(reasoning, content) of the text so far, a marker's beginning at its end held."""
        if not text:
            return None, None
        if not self.opened:
            if self.END.startswith(text) and len(text) < len(self.END):
                return None, None
            if text.startswith(self.END):
                text = text[len(self.END) :]
                if not text:
                    return None, None
        if self.opened and self.START not in text:
            reasoning, end, content = text.partition(self.END)
            if end:
                return reasoning or None, content or None
            return _strip_part(reasoning, self.END) or None, None
        if self.START not in text:
            return None, _strip_part(text, self.START) or None
        before, _, after = text.partition(self.START)
        reasoning, end, content = after.partition(self.END)
        if end:
            return reasoning or None, (before + content) or None
        return _strip_part(reasoning, self.END) or None, before or None

    def stream_text(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_token_ids: Sequence[int],
        current_token_ids: Sequence[int],
        delta_token_ids: Sequence[int],
    ) -> OutputDelta | None:
        """What the delta makes visible of the reasoning and the content."""
        if not delta_text:
            return None
        if not previous_text:
            self._reset()
        prev_reasoning, prev_content = self._visible(previous_text)
        reasoning, content = self._visible(current_text)
        if self.END in current_text or content is not None:
            self._ended, self._active, self._pending = True, False, False
        else:
            self._last_delta = self._last_content = None
            self._active = self.opened or self.START in current_text or reasoning is not None
            self._pending = not self._active and (
                self.START.startswith(current_text) or self.END.startswith(current_text)
            )
        reasoning_out = _added(prev_reasoning, reasoning)
        content_out = _added(prev_content, content)
        if self._ended:
            self._last_delta = tuple(delta_token_ids)
            self._last_content = self._content_ids(delta_text, delta_token_ids, content_out)
        if reasoning_out is None and content_out is None:
            return None
        return both_set(reasoning_out, content_out)

    def _content_ids(
        self, delta_text: str, delta_token_ids: Sequence[int], content: str | None
    ) -> list[int]:
        """The ids of ``content``: the delta's ids after the prefix that decodes to the text
        before it, else ``content`` encoded."""
        if content is None:
            return []
        if content == delta_text:
            return list(delta_token_ids)
        decode, encode = self.decode, self.encode
        if decode is None or encode is None:
            raise RuntimeError("minimax_m3 needs the tokenizer's encode and decode")
        if delta_text.endswith(content):
            prefix = delta_text[: len(delta_text) - len(content)]
            for i in range(len(delta_token_ids) + 1):
                if decode(delta_token_ids[:i]) == prefix:
                    return list(delta_token_ids[i:])
        return list(encode(content))

    def ended_after(self, current_token_ids: Sequence[int], delta_token_ids: Sequence[int]) -> bool:
        """Once an end marker or content was seen; or, outside an open block, as soon as
        output that cannot start a block has come."""
        if self._ended:
            return True
        if self._active or self._pending:
            return False
        if _find(delta_token_ids, self.end_ids) >= 0 or _find(current_token_ids, self.end_ids) >= 0:
            return True
        if self.opened:
            return False
        if _ends_with_part(current_token_ids, self.start_ids) or _ends_with_part(
            current_token_ids, self.end_ids
        ):
            return False
        if _find(current_token_ids, self.start_ids) < 0:
            return bool(current_token_ids)
        return False

    def ended_in(self, delta_token_ids: Sequence[int]) -> bool:
        """Not used (streaming goes through :meth:`ended_after`)."""
        return self.ended_after(delta_token_ids, delta_token_ids)

    def content_token_ids(self, delta_token_ids: list[int]) -> list[int]:
        """The ids of the content the ending delta made visible."""
        if self._last_delta == tuple(delta_token_ids) and self._last_content is not None:
            ids = self._last_content
            self._last_delta = self._last_content = None
            return list(ids)
        end = _find(delta_token_ids, self.end_ids, last=True)
        if end >= 0:
            return delta_token_ids[end + len(self.end_ids) :]
        has_start = _find(delta_token_ids, self.start_ids) >= 0
        if has_start or self.opened:
            return []
        return delta_token_ids

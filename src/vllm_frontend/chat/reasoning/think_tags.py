"""Families that mark reasoning with a start/end token pair, read by token id (vLLM's
``BaseThinkingReasoningParser`` line: ``deepseek_r1``, ``deepseek_v3``, ``holo2``,
``poolside_v1``, ``ernie45``, ``step3``, ``minimax_m2_append_think``).

:class:`ThinkTagReasoningParser` is the shared behaviour, parameterised by the marker strings;
the families differ in how the chat template kwargs switch thinking on, how far back the prompt
is searched, and in small extras.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from vllm_frontend.chat.parsed import OutputDelta, both_set
from vllm_frontend.chat.reasoning.base import ModelFacts, ReasoningParser

__all__ = [
    "DeepSeekR1ReasoningParser",
    "DeepSeekV3ReasoningParser",
    "Ernie45ReasoningParser",
    "HYV3ReasoningParser",
    "HYV4ReasoningParser",
    "Holo2ReasoningParser",
    "MiniMaxM2AppendThinkReasoningParser",
    "PoolsideV1ReasoningParser",
    "Step3ReasoningParser",
    "ThinkTagReasoningParser",
]


class ThinkTagReasoningParser(ReasoningParser):
    """``START``…``END`` reasoning, assumed open even without ``START`` (the ``deepseek_r1``
    behaviour); markers are found by token id in streaming and by text in whole outputs."""

    START: ClassVar[str] = "<think>"
    END: ClassVar[str] = "</think>"

    def __init__(
        self, vocab: Mapping[str, int], chat_template_kwargs: Mapping[str, Any] | None = None
    ) -> None:
        """See :class:`ReasoningParser`."""
        super().__init__(vocab, chat_template_kwargs)
        self.start_id = vocab[self.START]
        self.end_id = vocab[self.END]

    def prompt_ends_reasoning(self, prompt_token_ids: Sequence[int]) -> bool:
        """The last marker in the prompt decides; none means reasoning is open."""
        for tid in reversed(prompt_token_ids):
            if tid == self.start_id:
                return False
            if tid == self.end_id:
                return True
        return False

    def extract(self, text: str) -> tuple[str | None, str | None]:
        """Text after ``START`` (if any) up to ``END`` is reasoning, the rest content."""
        before, marker, after = text.partition(self.START)
        text = after if marker else before
        if self.END not in text:
            return text, None
        reasoning, _, content = text.partition(self.END)
        return reasoning, content or None

    def stream(
        self,
        previous_token_ids: Sequence[int],
        delta_text: str,
        delta_token_ids: Sequence[int],
    ) -> OutputDelta | None:
        """vLLM decides by token ids where the markers are, then cuts the delta text."""
        start, end, end_text = self.start_id, self.end_id, self.END
        if len(delta_token_ids) == 1 and delta_token_ids[0] in (start, end):
            return None
        if start in previous_token_ids or start not in delta_token_ids:
            # Reasoning started earlier, or is assumed without a start marker.
            if end in delta_token_ids:
                cut = delta_text.find(end_text)
                rest = delta_text[cut + len(end_text) :]
                return OutputDelta(content=rest or None, reasoning=delta_text[:cut])
            if end in previous_token_ids:
                return OutputDelta(content=delta_text)
            return OutputDelta(reasoning=delta_text)
        # The start marker is in this delta.
        if end in delta_token_ids:
            s = delta_text.find(self.START)
            e = delta_text.find(end_text)
            rest = delta_text[e + len(end_text) :]
            return OutputDelta(content=rest or None, reasoning=delta_text[s + len(self.START) : e])
        return OutputDelta(reasoning=delta_text)

    def ended_in(self, delta_token_ids: Sequence[int]) -> bool:
        """The end marker token is in the delta."""
        return self.end_id in delta_token_ids

    def content_token_ids(self, delta_token_ids: list[int]) -> list[int]:
        """Ids after the end marker, as vLLM's ``extract_content_ids`` (empty if it is last)."""
        if self.end_id not in delta_token_ids[:-1]:
            return []
        return delta_token_ids[delta_token_ids.index(self.end_id) + 1 :]

    def count_reasoning_tokens(self, token_ids: Sequence[int], streamed: bool) -> int:
        """Tokens inside ``START``…``END`` spans (nesting-safe; none without a start)."""
        count = depth = 0
        for tid in token_ids:
            if tid == self.start_id:
                depth += 1
            elif tid == self.end_id:
                depth = max(0, depth - 1)
            elif depth:
                count += 1
        return count


class DeepSeekR1ReasoningParser(ThinkTagReasoningParser):
    """``deepseek_r1``: ``<think>``…``</think>`` (``deepseek_r1_reasoning_parser.py``)."""

    name = "deepseek_r1"
    required_tokens: ClassVar[tuple[str, ...]] = ("<think>", "</think>")


class DeepSeekV3ReasoningParser(ThinkTagReasoningParser):
    """``deepseek_v3``: ``deepseek_r1`` when the chat template kwargs set ``thinking`` or
    ``enable_thinking``, otherwise no reasoning at all (vLLM's identity parser)."""

    name = "deepseek_v3"
    required_tokens: ClassVar[tuple[str, ...]] = ("<think>", "</think>")

    def __init__(
        self, vocab: Mapping[str, int], chat_template_kwargs: Mapping[str, Any] | None = None
    ) -> None:
        """See :class:`ReasoningParser`."""
        super().__init__(vocab, chat_template_kwargs)
        self.thinking = self._thinking(chat_template_kwargs or {})

    @staticmethod
    def _thinking(kwargs: Mapping[str, Any]) -> bool:
        return bool(kwargs.get("thinking", False)) or bool(kwargs.get("enable_thinking", False))

    def prompt_ends_reasoning(self, prompt_token_ids: Sequence[int]) -> bool:
        """Identity mode: always ended; thinking: as ``deepseek_r1``."""
        return not self.thinking or super().prompt_ends_reasoning(prompt_token_ids)

    def extract(self, text: str) -> tuple[str | None, str | None]:
        """Identity mode: all content."""
        return super().extract(text) if self.thinking else (None, text)

    def stream(
        self,
        previous_token_ids: Sequence[int],
        delta_text: str,
        delta_token_ids: Sequence[int],
    ) -> OutputDelta | None:
        """Identity mode: the delta is content."""
        if not self.thinking:
            return OutputDelta(content=delta_text) if delta_text else None
        return super().stream(previous_token_ids, delta_text, delta_token_ids)

    def ended_in(self, delta_token_ids: Sequence[int]) -> bool:
        """Identity mode: always ended."""
        return not self.thinking or super().ended_in(delta_token_ids)

    def content_token_ids(self, delta_token_ids: list[int]) -> list[int]:
        """Identity mode: every id is content."""
        return super().content_token_ids(delta_token_ids) if self.thinking else delta_token_ids

    def count_reasoning_tokens(self, token_ids: Sequence[int], streamed: bool) -> int:
        """Identity mode: none."""
        return super().count_reasoning_tokens(token_ids, streamed) if self.thinking else 0


class Holo2ReasoningParser(DeepSeekV3ReasoningParser):
    """``holo2``: ``deepseek_v3`` that thinks unless the kwargs set ``thinking`` or
    ``enable_thinking`` (a ``None`` value counts as unset)."""

    name = "holo2"

    @staticmethod
    def _thinking(kwargs: Mapping[str, Any]) -> bool:
        if kwargs.get("thinking") is None and kwargs.get("enable_thinking") is None:
            return True
        return DeepSeekV3ReasoningParser._thinking(kwargs)


class PoolsideV1ReasoningParser(DeepSeekV3ReasoningParser):
    """``poolside_v1``: ``deepseek_v3`` whose prompt search stops at the current turn's
    ``<assistant>`` token (a ``</think>`` in earlier turns does not end reasoning)."""

    name = "poolside_v1"
    required_tokens: ClassVar[tuple[str, ...]] = ("<think>", "</think>", "<assistant>")

    def __init__(
        self, vocab: Mapping[str, int], chat_template_kwargs: Mapping[str, Any] | None = None
    ) -> None:
        """See :class:`ReasoningParser`."""
        super().__init__(vocab, chat_template_kwargs)
        self.assistant_id = vocab["<assistant>"]

    def prompt_ends_reasoning(self, prompt_token_ids: Sequence[int]) -> bool:
        """The last marker of the current assistant turn decides; none means open."""
        if not self.thinking:
            return True
        for tid in reversed(prompt_token_ids):
            if tid == self.start_id:
                return False
            if tid == self.end_id:
                return True
            if tid == self.assistant_id:
                return False
        return False


class HYV3ReasoningParser(DeepSeekV3ReasoningParser):
    """``hy_v3``: ``deepseek_r1`` with ``<think{suffix}>`` markers (``token_suffix`` of the
    tokenizer config), unless ``reasoning_effort`` (chat template kwargs, where vLLM also puts
    the request's) is missing or ``no_think``: then no reasoning at all."""

    name = "hy_v3"
    required_tokens: ClassVar[tuple[str, ...]] = ("<think>", "</think>")

    @classmethod
    def for_model(cls, model: ModelFacts) -> type[ReasoningParser]:
        """The markers carry the tokenizer's ``token_suffix``."""
        suffix = model.tokenizer_config.get("token_suffix") or ""
        if not suffix:
            return cls
        start, end = f"<think{suffix}>", f"</think{suffix}>"
        attrs = {"START": start, "END": end, "required_tokens": (start, end)}
        return type(cls.__name__, (cls,), attrs)

    @staticmethod
    def _thinking(kwargs: Mapping[str, Any]) -> bool:
        return (kwargs.get("reasoning_effort") or "no_think") != "no_think"

    def count_reasoning_tokens(self, token_ids: Sequence[int], streamed: bool) -> int:
        """Counted between the markers even when not thinking (vLLM does not delegate it)."""
        return ThinkTagReasoningParser.count_reasoning_tokens(self, token_ids, streamed)


_HY_STRUCTURAL = re.compile(r"<(?:think|tool_calls|tool_call|arg_key|arg_value)(:[^\s>]+)?>")


def hy_token_suffix(model: ModelFacts) -> str:
    """The per-checkpoint suffix (``":6124c78e"``) of Hunyuan V4's structural tokens, read
    from the first of them among the tokenizer's added tokens (vLLM scans the vocabulary,
    where only added tokens have this shape); ``""`` when they are unsuffixed."""
    added = model.tokenizer_config.get("added_tokens_decoder") or {}
    for token in added.values():
        content = token.get("content", "") if isinstance(token, Mapping) else ""
        if m := _HY_STRUCTURAL.fullmatch(content):
            return m.group(1) or ""
    return ""


class HYV4ReasoningParser(HYV3ReasoningParser):
    """``hy_v4``: ``hy_v3`` whose markers carry the suffix of the checkpoint's structural
    tokens (:func:`hy_token_suffix`), thinking unless ``reasoning_effort`` is ``no_think``
    (missing means the template's ``high``); reasoning tokens are counted up to the first
    end marker."""

    name = "hy_v4"

    @classmethod
    def for_model(cls, model: ModelFacts) -> type[ReasoningParser]:
        """The markers carry the suffix of the checkpoint's structural tokens."""
        suffix = hy_token_suffix(model)
        if not suffix:
            return cls
        start, end = f"<think{suffix}>", f"</think{suffix}>"
        attrs = {"START": start, "END": end, "required_tokens": (start, end)}
        return type(cls.__name__, (cls,), attrs)

    @staticmethod
    def _thinking(kwargs: Mapping[str, Any]) -> bool:
        return (kwargs.get("reasoning_effort") or "high") != "no_think"

    def stream(
        self,
        previous_token_ids: Sequence[int],
        delta_text: str,
        delta_token_ids: Sequence[int],
    ) -> OutputDelta | None:
        """As ``hy_v3``, with both fields set (vLLM's ``DeltaMessage(reasoning=...,
        content=...)`` from its extractor's dict): the chunk writes both keys."""
        delta = super().stream(previous_token_ids, delta_text, delta_token_ids)
        return None if delta is None else both_set(delta.reasoning, delta.content)

    def count_reasoning_tokens(self, token_ids: Sequence[int], streamed: bool) -> int:
        """Tokens up to the first end marker (after a leading start marker), all of them
        without one; none when not thinking."""
        if not self.thinking:
            return 0
        ids = list(token_ids)
        first = 1 if ids and ids[0] == self.start_id else 0
        try:
            return ids.index(self.end_id, first) - first
        except ValueError:
            return len(ids) - first


class Step3ReasoningParser(ThinkTagReasoningParser):
    """``step3``: everything up to the first ``</think>`` is reasoning; ``<think>`` means
    nothing (``step3_reasoning_parser.py``)."""

    name = "step3"
    required_tokens: ClassVar[tuple[str, ...]] = ("</think>",)

    def __init__(
        self, vocab: Mapping[str, int], chat_template_kwargs: Mapping[str, Any] | None = None
    ) -> None:
        """See :class:`ReasoningParser` (only the end marker is needed)."""
        ReasoningParser.__init__(self, vocab, chat_template_kwargs)
        self.start_id = -1
        self.end_id = vocab[self.END]

    def prompt_ends_reasoning(self, prompt_token_ids: Sequence[int]) -> bool:
        """A ``</think>`` anywhere in the prompt ends reasoning."""
        return self.end_id in prompt_token_ids

    def extract(self, text: str) -> tuple[str | None, str | None]:
        """Up to the first ``</think>`` is reasoning, all of it without one."""
        reasoning, marker, content = text.partition(self.END)
        return reasoning, (content or None) if marker else None

    def stream(
        self,
        previous_token_ids: Sequence[int],
        delta_text: str,
        delta_token_ids: Sequence[int],
    ) -> OutputDelta | None:
        """As the start-less branch of :class:`ThinkTagReasoningParser`."""
        if len(delta_token_ids) == 1 and delta_token_ids[0] == self.end_id:
            return None
        return super().stream(previous_token_ids, delta_text, delta_token_ids)

    def count_reasoning_tokens(self, token_ids: Sequence[int], streamed: bool) -> int:
        """Tokens before the first ``</think>`` (all of them without one)."""
        ids = list(token_ids)
        return ids.index(self.end_id) if self.end_id in ids else len(ids)


class MiniMaxM2AppendThinkReasoningParser(ReasoningParser):
    """``minimax_m2_append_think``: no reasoning field; the output is content with the
    ``<think>`` the chat template put in the prompt written back in front of it."""

    name = "minimax_m2_append_think"
    optional_tokens: ClassVar[tuple[str, ...]] = ("<think>", "</think>")

    def __init__(
        self, vocab: Mapping[str, int], chat_template_kwargs: Mapping[str, Any] | None = None
    ) -> None:
        """See :class:`ReasoningParser`."""
        super().__init__(vocab, chat_template_kwargs)
        self.start_id = vocab.get("<think>")
        self.end_id = vocab.get("</think>")
        self._ended = False

    def _last_marker_is_end(self, token_ids: Sequence[int], default: bool) -> bool:
        for tid in reversed(token_ids):
            if tid == self.end_id or tid == self.start_id:
                return tid == self.end_id
        return default

    def prompt_ends_reasoning(self, prompt_token_ids: Sequence[int]) -> bool:
        """The last ``<think>``/``</think>`` in the prompt decides; none means open."""
        return self._last_marker_is_end(prompt_token_ids, False)

    def extract(self, text: str) -> tuple[str | None, str | None]:
        """All content, ``<think>`` prepended."""
        return None, "<think>" + text

    def stream(
        self,
        previous_token_ids: Sequence[int],
        delta_text: str,
        delta_token_ids: Sequence[int],
    ) -> OutputDelta | None:
        """Content; the first delta gets ``<think>`` in front."""
        self._ended = self._last_marker_is_end(delta_token_ids, self._ended)
        if not previous_token_ids:
            delta_text = "<think>" + delta_text
        return OutputDelta(content=delta_text)

    def ended_in(self, delta_token_ids: Sequence[int]) -> bool:
        """Whether the last marker generated so far is ``</think>`` (vLLM's default
        ``is_reasoning_end_streaming`` on the whole output)."""
        return self._ended

    def count_reasoning_tokens(self, token_ids: Sequence[int], streamed: bool) -> int:
        """vLLM counts none for this parser."""
        return 0


class Ernie45ReasoningParser(ThinkTagReasoningParser):
    """``ernie45``: ``deepseek_r1``-like reasoning whose answer may be wrapped in
    ``<response>``…``</response>`` (the wrapper and newlines around it are dropped)."""

    name = "ernie45"
    required_tokens: ClassVar[tuple[str, ...]] = ("<think>", "</think>")
    optional_tokens: ClassVar[tuple[str, ...]] = ("<response>", "</response>", "<0x0A>")
    _RESPONSE_START = "<response>"
    _RESPONSE_END = "</response>"

    def __init__(
        self, vocab: Mapping[str, int], chat_template_kwargs: Mapping[str, Any] | None = None
    ) -> None:
        """See :class:`ReasoningParser`."""
        super().__init__(vocab, chat_template_kwargs)
        self.response_start_id = vocab.get(self._RESPONSE_START)
        self.response_end_id = vocab.get(self._RESPONSE_END)
        self.newline_id = vocab.get("<0x0A>")

    def extract(self, text: str) -> tuple[str | None, str | None]:
        """As ``deepseek_r1``, then the text between the response markers if both are there."""
        reasoning, content = super().extract(text)
        if content:
            s = content.find(self._RESPONSE_START)
            e = content.rfind(self._RESPONSE_END)
            if s != -1 and e != -1 and s < e:
                content = content[s + len(self._RESPONSE_START) : e]
        return reasoning, content or None

    def stream(
        self,
        previous_token_ids: Sequence[int],
        delta_text: str,
        delta_token_ids: Sequence[int],
    ) -> OutputDelta | None:
        """Reasoning until ``</think>``; after it, content without the response markers."""
        markers = (self.start_id, self.end_id, self.response_start_id, self.response_end_id)
        if len(delta_token_ids) == 1 and delta_token_ids[0] in markers:
            return None
        end_text = self.END
        if self.end_id in delta_token_ids:
            cut = delta_text.find(end_text)
            content = delta_text[cut + len(end_text) :].lstrip("\n")
            s = content.find(self._RESPONSE_START)
            e = content.rfind(self._RESPONSE_END)
            if s != -1:
                content = content[s + len(self._RESPONSE_START) :]
            if e != -1:
                content = content[:e]
            return OutputDelta(reasoning=delta_text[:cut], content=content or None)
        if self.end_id not in previous_token_ids:
            return OutputDelta(reasoning=delta_text)
        content = delta_text
        if self.response_start_id in delta_token_ids:
            content = content.lstrip("\n")
            content = content[content.find(self._RESPONSE_START) + len(self._RESPONSE_START) :]
            e = content.rfind(self._RESPONSE_END)
            if e != -1:
                content = content[:e]
        elif self.response_end_id in delta_token_ids:
            e = content.rfind(self._RESPONSE_END)
            if e != -1:
                content = content[:e]
        starts_with_newline = bool(delta_token_ids) and delta_token_ids[0] == self.newline_id
        if starts_with_newline and previous_token_ids[-1] in (self.end_id, self.response_end_id):
            content = content.lstrip("\n")
        if (
            starts_with_newline
            and len(previous_token_ids) > 1
            and previous_token_ids[-2] == self.end_id
        ):
            content = content.lstrip("\n")
        return OutputDelta(content=content or None)

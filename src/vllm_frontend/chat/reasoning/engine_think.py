"""Families vLLM runs on its parser engine with the Qwen3 grammar (``vllm/parser/qwen3.py`` and
its variants ``seed_oss``, ``mimo``, ``step3p5``), tool parsing switched off.

:class:`EngineThinkReasoningParser` reproduces what that engine yields for reasoning: generation
starts in reasoning unless thinking is switched off, the end marker ends it and so does the
tool-call start (kept as content), a nested start marker inside reasoning is dropped, and text
that may be the beginning of a marker is held back until the next delta. The families differ in
their marker strings, turn-boundary tokens and thinking switch.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from vllm_frontend.chat.parsed import OutputDelta
from vllm_frontend.chat.reasoning.base import ModelFacts, ReasoningParser, partial_overlap

__all__ = [
    "EngineThinkReasoningParser",
    "Glm45ReasoningParser",
    "Glm47ReasoningParser",
    "KimiK2ReasoningParser",
    "Ling3ReasoningParser",
    "MiMoReasoningParser",
    "MiniCPMVReasoningParser",
    "MiniMaxM2ReasoningParser",
    "NemotronV3ReasoningParser",
    "Qwen3ReasoningParser",
    "SeedOssReasoningParser",
    "Step3p5ReasoningParser",
]


class EngineThinkReasoningParser(ReasoningParser):
    """The Qwen3-grammar parser engine, reasoning side, parameterised by its markers."""

    THINK_START: ClassVar[str] = "<think>"
    THINK_END: ClassVar[str] = "</think>"
    TOOL_START: ClassVar[str] = "<tool_call>"
    BOUNDARIES: ClassVar[tuple[str, ...]] = ("<|im_start|>", "<|im_end|>")
    STRIP_TRAILING_REASONING_WHITESPACE: ClassVar[bool] = False
    REENTER_ON_START: ClassVar[bool] = False
    """Whether a start marker after the end opens reasoning again (whole outputs; a stream is
    not parsed for reasoning once it has ended)."""
    DROPPED: ClassVar[tuple[str, ...]] = ()
    """Markers the grammar reads and drops wherever they appear."""
    needs_special_tokens = True
    engine_based = True

    def __init__(
        self, vocab: Mapping[str, int], chat_template_kwargs: Mapping[str, Any] | None = None
    ) -> None:
        """See :class:`ReasoningParser`."""
        super().__init__(vocab, chat_template_kwargs)
        self.thinking = self._thinking(chat_template_kwargs or {})
        self.start_id = vocab[self.THINK_START]
        self.end_id = vocab[self.THINK_END]
        # Tokens that end reasoning when seen by id: the end marker and, if it is one token,
        # the tool-call start.
        self.end_ids = {self.end_id}
        if (tool_id := vocab.get(self.TOOL_START)) is not None:
            self.end_ids.add(tool_id)
        self.boundary_ids = {vocab[t] for t in self.BOUNDARIES if t in vocab}
        self._markers = (self.THINK_START, self.THINK_END, self.TOOL_START, *self.DROPPED)
        self._dropped_ids = {vocab[t] for t in self.DROPPED if t in vocab}
        self._dropped = re.compile("|".join(re.escape(m) for m in (self.THINK_END, *self.DROPPED)))
        self._reasoning = self.thinking
        self._ended = not self.thinking
        self._held = ""
        self._deferred = ""
        self._streamed_reasoning_tokens = 0
        self._streamed = False

    @staticmethod
    def _thinking(kwargs: Mapping[str, Any]) -> bool:
        return bool(kwargs.get("enable_thinking", True))

    def prompt_ends_reasoning(self, prompt_token_ids: Sequence[int]) -> bool:
        """Scan back to the current turn's start: an end marker closes reasoning, a start
        marker opens it; with neither, reasoning is open exactly when thinking is enabled."""
        for tid in reversed(prompt_token_ids):
            if tid in self.end_ids:
                return True
            if tid == self.start_id:
                if self.thinking:
                    return False
                break
            if tid in self.boundary_ids:
                break
        return not self.thinking

    def content_token_ids(self, delta_token_ids: list[int]) -> list[int]:
        """The engine's content ids: after the last end marker; else from the first implicit
        end (the tool-call start) of the current turn; all of them when not thinking."""
        ids = delta_token_ids
        if not self.thinking:
            return ids
        for i in range(len(ids) - 1, -1, -1):
            if ids[i] == self.end_id:
                return ids[i + 1 :]
        start = 0
        for i in range(len(ids) - 1, -1, -1):
            if ids[i] in self.boundary_ids:
                start = i + 1
                break
        for i in range(start, len(ids)):
            if ids[i] in self.end_ids:
                return ids[i:]
        return ids

    def _scan(self, text: str, final: bool, raw: bool = False) -> tuple[str, str | None]:
        """Consume reasoning text: (reasoning, content after the end or None if still open).

        Text that may be the start of a marker is held back until the next call. Unless
        ``raw``, end markers in the content after the end are dropped."""
        text = self._held + text
        self._held = ""
        out: list[str] = []
        i = 0
        think_start, think_end = self.THINK_START, self.THINK_END
        while True:
            hits = [(pos, m) for m in self._markers if (pos := text.find(m, i)) >= 0]
            if not hits:
                break
            pos, marker = min(hits)
            out.append(text[i:pos])
            if marker == think_start or marker in self.DROPPED:
                i = pos + len(marker)
                continue
            self._reasoning = False
            self._ended = True
            rest = text[pos + len(marker) :] if marker == think_end else text[pos:]
            # The engine reads the rest of this text in its content state, where a stray
            # end marker is dropped; later deltas bypass it.
            return "".join(out), rest if raw else self._content_state(rest)
        tail = text[i:]
        if not final:
            keep = partial_overlap(tail, self._markers)
            if keep:
                self._held = tail[-keep:]
                tail = tail[:-keep]
        out.append(tail)
        return "".join(out), None

    def _content_state(self, text: str) -> str:
        """Text read in the content state: end markers (and the dropped ones) are dropped."""
        if not self.DROPPED:
            return text.replace(self.THINK_END, "")
        return self._dropped.sub("", text)

    def extract(self, text: str) -> tuple[str | None, str | None]:
        """Whole output: reasoning until the end marker, the rest content."""
        if not self.thinking:
            return None, text
        self._reasoning, self._held = True, ""
        reasoning, rest = self._scan(text, final=True, raw=self.REENTER_ON_START)
        if self.REENTER_ON_START and rest is not None:
            reasoning, rest = self._reenter(reasoning, rest)
        if self.STRIP_TRAILING_REASONING_WHITESPACE:
            reasoning = reasoning.rstrip()
        return reasoning or None, rest or None

    def _reenter(self, reasoning: str, rest: str, final: bool = True) -> tuple[str, str]:
        """Continue after the end, in the content state: end markers are dropped and each
        start marker reopens reasoning (to the end of a whole output, or of the delta that
        ended reasoning, after which vLLM no longer feeds its engine)."""
        reasoning_parts, content_parts = [reasoning], []
        while True:
            content, marker, after = rest.partition(self.THINK_START)
            content_parts.append(content.replace(self.THINK_END, ""))
            if not marker:
                break
            self._reasoning = True
            more, again = self._scan(after, final=final, raw=True)
            reasoning_parts.append(more)
            if again is None:
                break
            rest = again
        return "".join(reasoning_parts), "".join(content_parts)

    def stream(
        self,
        previous_token_ids: Sequence[int],
        delta_text: str,
        delta_token_ids: Sequence[int],
    ) -> OutputDelta | None:
        """Reasoning text until the end; the text after the end marker comes out as content."""
        if self._ended:
            return OutputDelta(content=delta_text) if delta_text else None
        self._streamed = True
        reasoning, rest = self._scan(delta_text, final=False, raw=self.REENTER_ON_START)
        if self.REENTER_ON_START and rest is not None:
            reasoning, rest = self._reenter(reasoning, rest, final=False)
        self._streamed_reasoning_tokens += self._count(delta_token_ids)
        if not reasoning and not rest:
            return None
        return self._strip(OutputDelta(content=rest or None, reasoning=reasoning or None))

    def _strip(self, delta: OutputDelta | None) -> OutputDelta | None:
        """Hold trailing reasoning whitespace until more reasoning follows (dropped if none
        does), for the families whose engine strips it."""
        if not self.STRIP_TRAILING_REASONING_WHITESPACE:
            return delta
        if delta is not None and delta.reasoning is not None:
            combined = self._deferred + delta.reasoning
            trimmed = combined.rstrip()
            self._deferred = combined[len(trimmed) :]
            delta.reasoning = trimmed or None
            if delta.reasoning is None and delta.content is None and not delta.tool_calls:
                return None
        elif self._deferred and self._ended:
            self._deferred = ""
        return delta

    def _count(self, token_ids: Sequence[int]) -> int:
        """Tokens read in the reasoning state, starting in it (markers excluded)."""
        n, reasoning, reenter = 0, True, self.REENTER_ON_START
        for tid in token_ids:
            if reasoning:
                if tid in self.end_ids:
                    if not reenter:
                        break
                    reasoning = False
                elif tid != self.start_id and tid not in self._dropped_ids:
                    n += 1
            elif tid == self.start_id:
                reasoning = True
        return n

    def ended_in(self, delta_token_ids: Sequence[int]) -> bool:
        """The engine reports the end once it has seen the end marker."""
        return self._ended

    def finish(self) -> OutputDelta | None:
        """Held-back text is reasoning if reasoning is still open."""
        held, self._held = self._held, ""
        if not held:
            return None
        if self._reasoning:
            return self._strip(OutputDelta(reasoning=held))
        return OutputDelta(content=held)

    def count_reasoning_tokens(self, token_ids: Sequence[int], streamed: bool) -> int:
        """Streaming: the tokens this parser saw as reasoning; whole output (or a stream that
        never reached this parser, as vLLM then re-parses the output): one pass."""
        if streamed and self._streamed:
            return self._streamed_reasoning_tokens
        return self._count(token_ids) if self.thinking else 0


class Qwen3ReasoningParser(EngineThinkReasoningParser):
    """``qwen3``: thinking unless the chat template kwargs say ``enable_thinking: false``."""

    name = "qwen3"
    required_tokens: ClassVar[tuple[str, ...]] = ("<think>", "</think>")


class MiMoReasoningParser(EngineThinkReasoningParser):
    """``mimo``: the Qwen3 grammar unchanged on the reasoning side (``vllm/parser/mimo.py``)."""

    name = "mimo"
    required_tokens: ClassVar[tuple[str, ...]] = ("<think>", "</think>")


class SeedOssReasoningParser(EngineThinkReasoningParser):
    """``seed_oss``: the Qwen3 grammar with ``<seed:…>`` markers and turn boundaries."""

    name = "seed_oss"
    THINK_START = "<seed:think>"
    THINK_END = "</seed:think>"
    TOOL_START = "<seed:tool_call>"
    BOUNDARIES: ClassVar[tuple[str, ...]] = ("<seed:bos>", "<seed:eos>")
    required_tokens: ClassVar[tuple[str, ...]] = ("<seed:think>", "</seed:think>")
    optional_tokens: ClassVar[tuple[str, ...]] = ("<seed:tool_call>", "<seed:bos>", "<seed:eos>")


class Step3p5ReasoningParser(EngineThinkReasoningParser):
    """``step3p5``: always thinking (``enable_thinking`` is ignored), trailing reasoning
    whitespace stripped."""

    name = "step3p5"
    required_tokens: ClassVar[tuple[str, ...]] = ("<think>", "</think>")
    STRIP_TRAILING_REASONING_WHITESPACE = True

    @staticmethod
    def _thinking(kwargs: Mapping[str, Any]) -> bool:
        return True


class Ling3ReasoningParser(EngineThinkReasoningParser):
    """``ling3``: the GLM-4.7 grammar (``vllm/parser/ling3.py``): thinking unless ``thinking``
    or ``enable_thinking`` is given and neither is true; a ``<think>`` after the end reopens
    reasoning in whole outputs; GLM turn boundaries; trailing reasoning whitespace stripped."""

    name = "ling3"
    required_tokens = ("<think>", "</think>")
    BOUNDARIES = ("<|system|>", "<|user|>", "<|assistant|>", "<|observation|>")
    optional_tokens = BOUNDARIES
    REENTER_ON_START = True
    STRIP_TRAILING_REASONING_WHITESPACE = True

    @staticmethod
    def _thinking(kwargs: Mapping[str, Any]) -> bool:
        thinking, enable = kwargs.get("thinking"), kwargs.get("enable_thinking")
        return (thinking is None and enable is None) or bool(thinking) or bool(enable)


class Glm47ReasoningParser(Ling3ReasoningParser):
    """``glm47``: ``ling3``'s grammar (``vllm/parser/glm47_moe.py``), except that a GLM-5.3
    chat template (no thinking switch) keeps thinking on even when the kwargs turn it off."""

    name = "glm47"
    ALWAYS_THINKS: ClassVar[bool] = False

    @classmethod
    def for_model(cls, model: ModelFacts) -> type[ReasoningParser]:
        """Recognise a GLM-5.3 template as vLLM does (by the strings it contains)."""
        template = model.chat_template
        if not isinstance(template, str):
            return cls
        always = all(
            needle in template
            for needle in (
                "[gMASK]<sop>",
                "Reasoning Effort:",
                "<tool_call>",
                "<arg_key>",
                "<arg_value>",
            )
        )
        if not always or "enable_thinking" in template:
            return cls
        return type(cls.__name__, (cls,), {"ALWAYS_THINKS": True})

    def __init__(
        self, vocab: Mapping[str, int], chat_template_kwargs: Mapping[str, Any] | None = None
    ) -> None:
        """See :class:`ReasoningParser`."""
        kwargs = chat_template_kwargs or {}
        if self.ALWAYS_THINKS and (
            kwargs.get("thinking") is False or kwargs.get("enable_thinking") is False
        ):
            kwargs = {}
        super().__init__(vocab, kwargs)


class Glm45ReasoningParser(Glm47ReasoningParser):
    """``glm45``: the same parser as ``glm47`` in vLLM 0.32."""

    name = "glm45"


class MiniMaxM2ReasoningParser(EngineThinkReasoningParser):
    """``minimax_m2``: the MiniMax M2 grammar's reasoning side (``vllm/parser/minimax_m2.py``):
    always thinking, ``<minimax:tool_call>`` ends reasoning, no turn boundaries, trailing
    reasoning whitespace stripped."""

    name = "minimax_m2"
    required_tokens = ("<think>", "</think>")
    TOOL_START = "<minimax:tool_call>"
    BOUNDARIES = ()
    optional_tokens = ("<minimax:tool_call>",)
    STRIP_TRAILING_REASONING_WHITESPACE = True

    @staticmethod
    def _thinking(kwargs: Mapping[str, Any]) -> bool:
        return True

    def content_token_ids(self, delta_token_ids: list[int]) -> list[int]:
        """After the last end marker; none without one."""
        ids = delta_token_ids
        for i in range(len(ids) - 1, -1, -1):
            if ids[i] == self.end_id:
                return ids[i + 1 :]
        return []


class NemotronV3ReasoningParser(EngineThinkReasoningParser):
    """``nemotron_v3``: ``qwen3`` with trailing reasoning whitespace stripped; when the
    request's own kwargs say ``enable_thinking: false`` or ``force_nonempty_content: true``,
    an answer without content gets the reasoning as content (``vllm/parser/nemotron_v3.py``)."""

    name = "nemotron_v3"
    required_tokens = ("<think>", "</think>")
    STRIP_TRAILING_REASONING_WHITESPACE = True

    def __init__(
        self, vocab: Mapping[str, int], chat_template_kwargs: Mapping[str, Any] | None = None
    ) -> None:
        """See :class:`ReasoningParser`."""
        super().__init__(vocab, chat_template_kwargs)
        self._raw_reasoning: list[str] = []

    def _force_content(self) -> bool:
        kwargs = self.request_kwargs
        return bool(
            kwargs
            and (
                kwargs.get("enable_thinking") is False
                or kwargs.get("force_nonempty_content") is True
            )
        )

    def extract(self, text: str) -> tuple[str | None, str | None]:
        """Reasoning and content swap places when forced and the content is blank."""
        reasoning, content = super().extract(text)
        if self._force_content() and (content is None or not content.strip()):
            return content, reasoning
        return reasoning, content

    def _strip(self, delta: OutputDelta | None) -> OutputDelta | None:
        if delta is not None and delta.reasoning is not None:
            self._raw_reasoning.append(delta.reasoning)
        return super()._strip(delta)

    def fallback_content(self) -> str | None:
        """When forced: the reasoning streamed so far (before whitespace stripping)."""
        if not self._force_content():
            return None
        return "".join(self._raw_reasoning) or None


class KimiK2ReasoningParser(EngineThinkReasoningParser):
    """``kimi_k2``: the Kimi K2 grammar's reasoning side (``vllm/parser/kimi_k2.py``): thinking
    unless ``thinking`` or ``enable_thinking`` is given and neither is true, the tool-calls
    section start ends reasoning, no turn boundaries, trailing reasoning whitespace stripped."""

    name = "kimi_k2"
    required_tokens = ("<think>", "</think>")
    TOOL_START = "<|tool_calls_section_begin|>"
    BOUNDARIES = ()
    optional_tokens = ("<|tool_calls_section_begin|>",)
    STRIP_TRAILING_REASONING_WHITESPACE = True

    @staticmethod
    def _thinking(kwargs: Mapping[str, Any]) -> bool:
        thinking, enable = kwargs.get("thinking"), kwargs.get("enable_thinking")
        return (thinking is None and enable is None) or bool(thinking) or bool(enable)

    def content_token_ids(self, delta_token_ids: list[int]) -> list[int]:
        """After the last end marker, else from the last tool-calls section start, else none
        (all of them when not thinking)."""
        ids = delta_token_ids
        if not self.thinking:
            return ids
        for marker in (self.end_id, self._section_id):
            if marker is not None and marker in ids:
                last = len(ids) - 1 - ids[::-1].index(marker)
                return ids[last + 1 :] if marker == self.end_id else ids[last:]
        return []

    @property
    def _section_id(self) -> int | None:
        return self.vocab.get(self.TOOL_START)


class MiniCPMVReasoningParser(EngineThinkReasoningParser):
    """``minicpmv``: the Qwen3 grammar as MiniCPM-V's parser extends it
    (``vllm/parser/minicpmv.py``): ``<|im_end|>`` and the reserved markers are dropped
    wherever they appear, there are no turn boundaries, and with ``enable_thinking: false`` a
    ``<think>`` block in the answer is dropped (whole outputs; a stream is read only when the
    prompt leaves a block open, and then only its first delta). The escaped newlines its
    tokenizer writes are recovered by the output parser (chat/newlines.py)."""

    name = "minicpmv"
    unified = "minicpmv"
    required_tokens = ("<think>", "</think>")
    BOUNDARIES = ()
    DROPPED = (
        "<|im_end|>",
        *(f"<reserved_{i}>" for i in range(12, 16)),
        *(f"<|reserved_{i}|>" for i in range(12, 16)),
    )
    optional_tokens = DROPPED

    def prompt_ends_reasoning(self, prompt_token_ids: Sequence[int]) -> bool:
        """From the end: an end marker closes reasoning, a start marker opens it (thinking or
        not); with neither, reasoning is open exactly when thinking is enabled."""
        for tid in reversed(prompt_token_ids):
            if tid in self.end_ids:
                return True
            if tid == self.start_id:
                return False
        return not self.thinking

    def _answer(self, text: str) -> str:
        """Non-thinking: the text read from the content state, ``<think>`` blocks dropped (a
        tool-call start in one ends it and is kept)."""
        out: list[str] = []
        i, reasoning = 0, False
        while True:
            hits = [(pos, m) for m in self._markers if (pos := text.find(m, i)) >= 0]
            if not hits:
                break
            pos, marker = min(hits)
            if not reasoning:
                out.append(text[i:pos])
            i = pos + len(marker)
            if marker == self.THINK_START:
                reasoning = True
            elif marker == self.THINK_END:
                reasoning = False
            elif marker == self.TOOL_START:
                out.append(marker)
                reasoning = False
        if not reasoning:
            out.append(text[i:])
        return "".join(out)

    def extract(self, text: str) -> tuple[str | None, str | None]:
        """See :class:`EngineThinkReasoningParser`; not thinking: no reasoning."""
        if self.thinking:
            return super().extract(text)
        return None, self._answer(text) or None

    def stream(
        self,
        previous_token_ids: Sequence[int],
        delta_text: str,
        delta_token_ids: Sequence[int],
    ) -> OutputDelta | None:
        """See :class:`EngineThinkReasoningParser`; not thinking (the prompt left a block
        open): the first delta's answer, then the reasoning phase is over."""
        if self.thinking:
            return super().stream(previous_token_ids, delta_text, delta_token_ids)
        self._ended = self._streamed = True  # (vLLM's engine counts no reasoning tokens then)
        content = self._answer(delta_text)
        return OutputDelta(content=content) if content else None

    def count_reasoning_tokens(self, token_ids: Sequence[int], streamed: bool) -> int:
        """See :class:`EngineThinkReasoningParser`; not thinking: the tokens inside ``<think>``
        blocks of the answer."""
        if self.thinking or (streamed and self._streamed):
            return super().count_reasoning_tokens(token_ids, streamed)
        n, reasoning = 0, False
        for tid in token_ids:
            if tid == self.start_id:
                reasoning = True
            elif tid in self.end_ids:
                reasoning = False
            elif reasoning and tid not in self._dropped_ids:
                n += 1
        return n

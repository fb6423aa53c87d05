"""``muse_glimmer``: MuseGlimmer's channel-framed turns, as vLLM 0.32's
``muse_glimmer_reasoning_parser.py`` reads them: ``to=self<|message|>…<|eom|>`` bodies are
reasoning, ``to=user<|message|>…`` the answer; the reasoning phase ends only when a tool
channel (``to=<tool><|message|>`` with ``<atem:function_calls>`` / ``<atem:invoke``) opens
outside reasoning, and the tool phase then gets the text from that channel's header on.
Whether the prompt or the output so far reached a tool channel is read from their decoded ids,
as vLLM does."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from vllm_frontend.chat.parsed import OutputDelta
from vllm_frontend.chat.reasoning.base import ReasoningParser

__all__ = ["MuseGlimmerReasoningParser"]

_EOM, _EOT = "<|eom|>", "<|eot|>"
_CALLS_OPEN = "<atem:function_calls>"
_INVOKE = "<atem:invoke"
_TURN = "<|start|>assistant"
_HEADER = re.compile(r"to=(?P<recipient>[^\s<]+)<\|message\|>")
_HEADER_PAT = r"to=[^\s<]+<\|message\|>"
_COLLAPSE = re.compile(r"<\|eom\|>(?:(?!to=self<\|message\|>).)*?to=self<\|message\|>", re.DOTALL)
_REASONING = re.compile(r"to=self<\|message\|>(.*?)<\|eom\|>", re.DOTALL)
_CONTENT = re.compile(r"to=user<\|message\|>(.*?)(?=<\|eot\|>|<\|eom\|>|$)", re.DOTALL)
_CLOSED_REASONING = re.compile(
    r"(?:<\|start\|>assistant\s*)?to=self<\|message\|>.*?<\|eom\|>", re.DOTALL
)
_OPEN_BODY = rf"(?:(?!<\|eom\|>)(?!{_HEADER_PAT}).)*"
_OPEN_REASONING_SPAN = re.compile(
    rf"(?:<\|start\|>assistant\s*)?to=self<\|message\|>{_OPEN_BODY}(?={_HEADER_PAT}|$)", re.DOTALL
)
_OPEN_REASONING = re.compile(rf"to=self<\|message\|>({_OPEN_BODY})(?={_HEADER_PAT}|$)", re.DOTALL)
_HELD_MARKERS = (_EOM, _EOT, "<|start|>", "<|message|>")
_HEADER_TAIL = re.compile(r"[\s](?:t|to|to=[^\s<]*)$")


def _held_back(body: str) -> str:
    """A still-growing body without a tail that may yet be framing (a marker's beginning, a
    recipient header's beginning), trimmed until nothing more goes."""
    while True:
        trimmed = body
        for marker in _HELD_MARKERS:
            k = next(
                (k for k in range(min(len(marker) - 1, len(trimmed)), 0, -1)
                 if trimmed.endswith(marker[:k])),
                0,
            )  # fmt: skip
            if k:
                trimmed = trimmed[:-k]
                break
        if (tail := _HEADER_TAIL.search(trimmed)) is not None:
            trimmed = trimmed[: tail.start()]
        if trimmed == body:
            return body
        body = trimmed


def _without_reasoning(text: str) -> str:
    return _OPEN_REASONING_SPAN.sub("", _CLOSED_REASONING.sub("", text))


def _tool_channel(text: str) -> str:
    """The current assistant turn, without reasoning, from its first tool channel's header
    on (``""`` without one)."""
    at = text.rfind(_TURN)
    scoped = _without_reasoning(text[at + len(_TURN) :] if at != -1 else text)
    for m in _HEADER.finditer(scoped):
        if m.group("recipient") not in ("self", "user"):
            return scoped[m.start() :]
    return ""


def _calls_open(text: str) -> bool:
    return _CALLS_OPEN in text or _INVOKE in text


def _bodies(text: str) -> tuple[str, str]:
    """(reasoning, content) bodies of the text so far; open bodies held back."""
    reasoning: list[str] = []
    content: list[str] = []
    pos, n = 0, len(text)
    while pos < n:
        m = _HEADER.search(text, pos)
        if not m:
            break
        start = m.end()
        eom, eot = text.find(_EOM, start), text.find(_EOT, start)
        ends = [p for p in (eom, eot) if p != -1]
        if (nxt := _HEADER.search(text, start)) is not None:
            ends.append(nxt.start())
        end = min(ends) if ends else n
        body = text[start:end] if ends else _held_back(text[start:end])
        recipient = m.group("recipient")
        if recipient == "self":
            reasoning.append(body)
        elif recipient == "user" and not _calls_open(body):
            content.append(body)
        # A body closed by its end marker resumes after it; else at the next header.
        pos = end + len(_EOM if end == eom else _EOT) if ends and end in (eom, eot) else end
    return "".join(reasoning), "".join(content)


class MuseGlimmerReasoningParser(ReasoningParser):
    """``muse_glimmer``."""

    name = "muse_glimmer"
    reads_text = True
    uses_codec = True
    needs_special_tokens = True

    def __init__(
        self, vocab: Mapping[str, int], chat_template_kwargs: Mapping[str, Any] | None = None
    ) -> None:
        """See :class:`ReasoningParser`."""
        super().__init__(vocab, chat_template_kwargs)
        self._sent_reasoning = ""
        self._sent_content = ""
        self._handed_off = False
        self._text = ""

    def _in_tool_channel(self, token_ids: Sequence[int]) -> bool:
        decode = self.decode
        if decode is None:
            raise RuntimeError("muse_glimmer needs the tokenizer's decode")
        try:
            text = decode(token_ids)
        except Exception:
            return False
        return _calls_open(_tool_channel(text))

    def prompt_ends_reasoning(self, prompt_token_ids: Sequence[int]) -> bool:
        """Whether the prompt's last assistant turn already opened a tool channel."""
        return self._in_tool_channel(prompt_token_ids)

    def ended_after(self, current_token_ids: Sequence[int], delta_token_ids: Sequence[int]) -> bool:
        """Whether the output so far opened a tool channel."""
        return self._in_tool_channel(current_token_ids)

    def ended_in(self, delta_token_ids: Sequence[int]) -> bool:
        """Not used (streaming goes through :meth:`ended_after`)."""
        return self._in_tool_channel(delta_token_ids)

    def content_token_ids(self, delta_token_ids: list[int]) -> list[int]:
        """None: the tool phase reads the handed-over text."""
        return []

    def count_reasoning_tokens(self, token_ids: Sequence[int], streamed: bool) -> int:
        """vLLM counts none for this parser."""
        return 0

    def extract(self, text: str) -> tuple[str | None, str | None]:
        """Reasoning bodies joined by newlines; the answer body as content (or, with a tool
        channel, everything outside reasoning, for the tool parser)."""
        found = _REASONING.findall(_COLLAPSE.sub("\n", text))
        reasoning = "\n".join(found) if found else None
        m = _OPEN_REASONING.search(text)
        if m and m.group(1):
            reasoning = f"{reasoning}\n{m.group(1)}" if reasoning else m.group(1)
        rest = _without_reasoning(text)
        if _calls_open(rest):
            return reasoning, rest or None
        if (answer := _CONTENT.search(text)) is not None:
            return reasoning, answer.group(1) or None
        if "to=self<|message|>" in text:
            return reasoning, None
        return None, text or None

    def stream_text(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_token_ids: Sequence[int],
        current_token_ids: Sequence[int],
        delta_token_ids: Sequence[int],
    ) -> OutputDelta | None:
        """What the text so far adds to the reasoning and answer bodies; the tool channel's
        text once it opens."""
        self._text = current_text
        reasoning, content = _bodies(current_text)
        reasoning_out = content_out = ""
        if reasoning.startswith(self._sent_reasoning) and len(reasoning) > len(
            self._sent_reasoning
        ):
            reasoning_out, self._sent_reasoning = reasoning[len(self._sent_reasoning) :], reasoning
        if content.startswith(self._sent_content) and len(content) > len(self._sent_content):
            content_out, self._sent_content = content[len(self._sent_content) :], content
        if not self._handed_off:
            channel = _tool_channel(current_text)
            if _calls_open(channel):
                self._handed_off = True
                return OutputDelta(reasoning=reasoning_out or None, content=channel)
        if not reasoning_out and not content_out:
            return None
        return OutputDelta(reasoning=reasoning_out or None, content=content_out or None)

    def fallback_content(self) -> str | None:
        """The answer body not streamed yet, when the stream ends inside reasoning."""
        _, content = _bodies(self._text)
        return content[len(self._sent_content) :] or None

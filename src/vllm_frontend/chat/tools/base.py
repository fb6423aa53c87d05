"""The interface of a per-choice tool-call parser, and helpers the families share."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import msgspec

from vllm_frontend.chat.parsed import OutputDelta

__all__ = ["ExtractedToolCalls", "ToolParser", "is_complete_json", "tag_overlap"]


class ExtractedToolCalls(msgspec.Struct):
    """Tool calls found in a whole output: ``(name, arguments JSON)`` pairs."""

    tools_called: bool
    calls: list[tuple[str, str]] = msgspec.field(default_factory=list)
    content: str | None = None
    ids: list[str] | None = None
    """The calls' ids when the parser makes its own (else fresh ``chatcmpl-tool-`` ids)."""


class ToolParser:
    """Interface of a per-choice tool parser (vLLM's legacy ``ToolParser``)."""

    name: ClassVar[str]
    required_tokens: ClassVar[tuple[str, ...]] = ()
    """Strings that must be tokens of the vocabulary (checked at startup)."""
    optional_tokens: ClassVar[tuple[str, ...]] = ()
    """Further token strings the parser looks up by id when the vocabulary has them."""
    needs_special_tokens: ClassVar[bool] = False
    """Whether requests with tools must be detokenized with ``skip_special_tokens=False``."""
    harmony_only: ClassVar[bool] = False
    """Only gpt-oss output (Harmony) is parsed with this name."""
    engine_based: ClassVar[bool] = False
    """Whether vLLM runs it on its parser engine (fed deltas, flushed at the end)."""
    special_tokens_without_tools: ClassVar[bool] = False
    """Whether special tokens are kept whenever its ``adjust_request`` runs (tools or not)."""
    supports_required_and_named: ClassVar[bool] = True
    """Whether ``required`` / named tool choices are forced with JSON (else they are parsed
    from the model's own format, as ``auto``)."""
    joins_special_tokens: ClassVar[bool] = False
    """Whether its ``adjust_request`` also turns ``spaces_between_special_tokens`` off (with
    the special tokens it keeps)."""
    unified: ClassVar[str | None] = None
    """The vLLM unified parser (vllm/parser/) composed whenever this name is configured."""
    named_choice_needs_tag: ClassVar[str | None] = None
    """The error a named tool choice gets when no structural tag constrains the request (its
    ``adjust_request`` refuses it then)."""

    reads_request: ClassVar[bool] = False
    """Whether the parser reads :attr:`tool_choice` and :attr:`request_kwargs` (set per
    choice)."""
    tool_choice: Any = None
    """The request's ``tool_choice`` (for ``reads_request`` parsers)."""
    request_kwargs: Mapping[str, Any] = {}
    """The request's own ``chat_template_kwargs`` (for ``reads_request`` parsers)."""
    wants_logprobs: bool = False
    """The request asks for logprobs (set per choice; one vLLM parser then sends an empty
    content delta where it would send nothing)."""
    guided: bool = False
    """A structural tag constrains the request (set per choice; ``hy_v4`` then reads its
    markers in the text, where the constrained model may write them in pieces)."""
    uses_codec: ClassVar[bool] = False
    """Whether the parser tokenizes text itself (:attr:`encode` is then set per choice)."""
    encode: Callable[[str], list[int]] | None = None
    """The tokenizer's encoder (no special tokens added), for ``uses_codec`` parsers."""

    def __init__(self, vocab: Mapping[str, int], tools: Sequence[Mapping[str, Any]] = ()) -> None:
        """Build the parser for one choice of a request with ``tools`` (OpenAI tool objects)."""
        self.tools = tools
        # What vLLM's ToolParser base tracks while streaming: per call the parsed object so far
        # and the argument text already sent.
        self.prev_calls: list[dict[str, Any]] = []
        self.streamed_args: list[str] = []

    @classmethod
    def check_request(cls, request_chat_template_kwargs: Mapping[str, Any]) -> None:
        """Refuse (:class:`ValueError`) the request's own chat template kwargs when the
        parser cannot serve them (vLLM's ``adjust_request``)."""

    @classmethod
    def forced_schema(
        cls, tools: Sequence[Mapping[str, Any]], tool_choice: Any
    ) -> dict[str, Any] | None:
        """The JSON schema this parser's ``adjust_request`` constrains a ``required`` / named
        tool choice with when it reads forced choices in its own format (none for most)."""
        return None

    @classmethod
    def for_model(cls, model: Any) -> type[ToolParser]:
        """The class to serve ``model`` (a ``ModelFacts``) with; most families have one."""
        return cls

    def extract(self, text: str) -> ExtractedToolCalls:
        """Tool calls in a whole output."""
        raise NotImplementedError

    def stream(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> OutputDelta | None:
        """What the delta adds (``current_*`` is everything so far, ``previous_*`` before it)."""
        raise NotImplementedError

    def finish_stream(self) -> OutputDelta | None:
        """What the end of the stream releases (engine-based parsers only)."""
        return None

    def remaining_arguments(self) -> str:
        """Argument text of the last call parsed but not streamed yet (sent with the finish)."""
        if not self.prev_calls:
            return ""
        index = len(self.prev_calls) - 1
        args = self.prev_calls[index].get("arguments", {})
        expected = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        sent = self.streamed_args[index] if index < len(self.streamed_args) else ""
        return expected[len(sent) :] if expected.startswith(sent) else ""


def tag_overlap(text: str, tag: str) -> int:
    """Length of the longest proper prefix of ``tag`` that ``text`` ends with."""
    # Per streamed token: look only where the tag's first character occurs in text's last
    # len(tag) - 1 characters (usually nowhere), the earliest such place being the longest.
    if not tag:
        return 0
    first = tag[0]
    i = text.find(first, max(0, len(text) - len(tag) + 1))
    while i != -1:
        if tag.startswith(text[i:]):
            return len(text) - i
        i = text.find(first, i + 1)
    return 0


def is_complete_json(text: str) -> bool:
    """Whether ``text`` is one whole JSON value."""
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return False
    return True

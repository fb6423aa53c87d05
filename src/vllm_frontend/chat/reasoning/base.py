"""The per-choice reasoning parser interface every ``--reasoning-parser`` family implements."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import msgspec

from vllm_frontend.chat.parsed import OutputDelta

__all__ = ["ModelFacts", "ReasoningParser", "partial_overlap"]


class ModelFacts(msgspec.Struct, frozen=True):
    """What of the model a few vLLM parsers read from its tokenizer besides the vocabulary."""

    tokenizer_config: Mapping[str, Any] = msgspec.field(default_factory=dict)
    """``tokenizer_config.json`` (the HF tokenizer's ``init_kwargs``)."""
    chat_template: str | Mapping[str, str] | None = None
    """The tokenizer's ``chat_template``: one template, named templates, or none."""
    mistral_version: int | None = None
    """The version of a ``mistral_common`` tokenizer (``--tokenizer-mode mistral``); None
    for a Hugging Face one."""
    mistral_grammar: bool = False
    """The mistral_common tokenizer has mistral_common's grammars (tekken, version 11 on)."""
    architecture: str | None = None
    """The model's architecture (``config.json``'s first ``architectures`` entry)."""
    model_types: tuple[str, ...] = ()
    """``config.json``'s ``model_type`` and its ``text_config``'s (tool-call id formats)."""


class ReasoningParser:
    """Interface of a per-choice reasoning parser."""

    name: ClassVar[str]
    required_tokens: ClassVar[tuple[str, ...]] = ()
    """Marker strings that must be single tokens of the vocabulary (checked at startup)."""
    optional_tokens: ClassVar[tuple[str, ...]] = ()
    """Further token strings the parser looks up by id when the vocabulary has them."""
    needs_special_tokens: ClassVar[bool] = False
    """Whether the request must be detokenized with ``skip_special_tokens=False``."""
    engine_based: ClassVar[bool] = False
    """vLLM runs this parser on its parser engine (changes how the reasoning phase ends)."""
    harmony_only: ClassVar[bool] = False
    """Only gpt-oss output (Harmony) is parsed with this name."""
    reads_text: ClassVar[bool] = False
    """Whether streaming goes through :meth:`stream_text` and :meth:`ended_after` (parsers
    that read the text so far or every id so far, not only the delta)."""
    uses_codec: ClassVar[bool] = False
    """Whether the parser encodes or decodes text itself (:attr:`encode`, :attr:`decode` are
    then set per choice, when the tokenizer is known)."""
    encode: Callable[[str], list[int]] | None = None
    """The tokenizer's encoder (no special tokens added), for ``uses_codec`` parsers."""
    decode: Callable[[Sequence[int]], str] | None = None
    """The tokenizer's decoder (special tokens kept), for ``uses_codec`` parsers."""
    request_kwargs: Mapping[str, Any] = {}
    """The request's own ``chat_template_kwargs`` (set per choice; see ``fallback_content``)."""
    joins_special_tokens: ClassVar[bool] = False
    """Whether its ``adjust_request`` also turns ``spaces_between_special_tokens`` off."""
    unified: ClassVar[str | None] = None
    """The vLLM unified parser (vllm/parser/) composed whenever this name is configured."""
    keeps_tool_markup: bool = False
    """The request has tools and a tool choice other than ``none`` (set per choice)."""

    def __init__(
        self, vocab: Mapping[str, int], chat_template_kwargs: Mapping[str, Any] | None = None
    ) -> None:
        """Build the parser for one choice; ``vocab`` maps token strings to ids."""
        self.vocab = vocab

    @classmethod
    def check_request(cls, chat_template_kwargs: Mapping[str, Any]) -> None:
        """Refuse (:class:`ValueError`) chat template kwargs the parser cannot serve."""

    @classmethod
    def for_model(cls, model: ModelFacts) -> type[ReasoningParser]:
        """The class to serve ``model`` with (once, at startup); most families need nothing."""
        return cls

    def prompt_ends_reasoning(self, prompt_token_ids: Sequence[int]) -> bool:
        """Whether generation after this prompt starts outside reasoning."""
        raise NotImplementedError

    def extract(self, text: str) -> tuple[str | None, str | None]:
        """A whole output as ``(reasoning, content)``."""
        raise NotImplementedError

    def stream(
        self,
        previous_token_ids: Sequence[int],
        delta_text: str,
        delta_token_ids: Sequence[int],
    ) -> OutputDelta | None:
        """Classify one streamed delta while reasoning may still be open."""
        raise NotImplementedError

    def ended_in(self, delta_token_ids: Sequence[int]) -> bool:
        """Whether the reasoning phase ended with the delta just streamed."""
        raise NotImplementedError

    def stream_text(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_token_ids: Sequence[int],
        current_token_ids: Sequence[int],
        delta_token_ids: Sequence[int],
    ) -> OutputDelta | None:
        """:meth:`stream` with the text and ids so far (used when ``reads_text``)."""
        return self.stream(previous_token_ids, delta_text, delta_token_ids)

    def ended_after(self, current_token_ids: Sequence[int], delta_token_ids: Sequence[int]) -> bool:
        """:meth:`ended_in` with every id so far (used when ``reads_text``)."""
        return self.ended_in(delta_token_ids)

    def content_token_ids(self, delta_token_ids: list[int]) -> list[int]:
        """The token ids after the end of reasoning in the delta that ended it."""
        return delta_token_ids

    def fallback_content(self) -> str | None:
        """Content added when a stream ends with reasoning still open (vLLM's
        ``get_streaming_fallback_content``); most families add none."""
        return None

    def finish(self) -> OutputDelta | None:
        """Text held back at the end of the stream (engine-based parsers only)."""
        return None

    def strip_content(self, previous_text: str, current_text: str) -> str | None:
        """The content a delta after the reasoning adds, for unified parsers that rewrite it
        when no tool parser follows (``previous_text``, ``current_text``: the text so far
        before and with the delta); ``None``: nothing."""
        raise NotImplementedError

    def count_reasoning_tokens(self, token_ids: Sequence[int], streamed: bool) -> int:
        """Reasoning tokens among the generated ``token_ids`` (``usage`` reporting)."""
        raise NotImplementedError


def partial_overlap(text: str, markers: Sequence[str]) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of one of ``markers``."""
    best = 0
    for marker in markers:
        for k in range(min(len(marker) - 1, len(text)), best, -1):
            if text.endswith(marker[:k]):
                best = k
                break
    return best

"""``hf``: the reasoning name of vLLM 0.32's response-template parser; its output is read by
:mod:`vllm_frontend.chat.response_template`, and this class answers whether a prompt leaves the
model past its reasoning (``ResponseTemplateReasoningParser.is_reasoning_end``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from vllm_frontend.chat.reasoning.base import ReasoningParser
from vllm_frontend.chat.response_template.serving import reasoning_has_ended
from vllm_frontend.chat.response_template.template import ResponseTemplate

__all__ = ["ResponseTemplateReasoningParser"]


class ResponseTemplateReasoningParser(ReasoningParser):
    """``hf``; :class:`~vllm_frontend.chat.output_parser.OutputParsers` binds the model's
    template and the prompt decoder to a subclass at startup."""

    name = "hf"
    unified = "hf"
    needs_special_tokens = True
    joins_special_tokens = True
    template: ClassVar[ResponseTemplate | None] = None
    """The model's template in its streaming form."""
    prompt_decode: ClassVar[Callable[[Sequence[int]], str] | None] = None
    """Token ids to text with special tokens kept and no clean-up (vLLM's prompt decode)."""

    def __init__(
        self, vocab: Mapping[str, int], chat_template_kwargs: Mapping[str, Any] | None = None
    ) -> None:
        """See :class:`ReasoningParser`."""
        super().__init__(vocab, chat_template_kwargs)
        self._thinking_disabled = not (chat_template_kwargs or {}).get("enable_thinking", True)

    @classmethod
    def bound(
        cls, template: ResponseTemplate, decode: Callable[[Sequence[int]], str]
    ) -> type[ResponseTemplateReasoningParser]:
        """A subclass reading ``template``, decoding prompts with ``decode``."""
        attrs = {"template": template, "prompt_decode": staticmethod(decode)}
        return type(cls.__name__, (cls,), attrs)

    def prompt_ends_reasoning(self, prompt_token_ids: Sequence[int]) -> bool:
        """Read the prompt's tail with the template (vLLM's ``is_reasoning_end``)."""
        template, decode = type(self).template, type(self).prompt_decode
        if template is None or decode is None:
            raise RuntimeError("the hf reasoning parser has no response template bound")
        try:
            prefix = decode(prompt_token_ids)
        except Exception:
            return False
        return reasoning_has_ended(template, prefix, self._thinking_disabled)

    def count_reasoning_tokens(self, token_ids: Sequence[int], streamed: bool) -> int:
        """None are counted (vLLM's template parser reports none)."""
        return 0

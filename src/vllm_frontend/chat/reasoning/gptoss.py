"""``openai_gptoss``: the gpt-oss reasoning parser (``vllm/reasoning/gptoss_reasoning_parser.py``).

As in vLLM it only declares the capability: gpt-oss output is read as a whole by
:class:`vllm_frontend.chat.harmony_output.HarmonyOutputParser`, which this name switches the
``analysis`` channel (reasoning) and reasoning-token usage of on. It serves gpt-oss models
(``model_type`` ``gpt_oss``) only.
"""

from __future__ import annotations

from collections.abc import Sequence

from vllm_frontend.chat.reasoning.base import ReasoningParser

__all__ = ["GptOssReasoningParser"]


class GptOssReasoningParser(ReasoningParser):
    """``openai_gptoss``: Harmony's ``analysis`` channel is the reasoning."""

    name = "openai_gptoss"
    harmony_only = True
    """Served only through Harmony (gpt-oss models)."""

    def prompt_ends_reasoning(self, prompt_token_ids: Sequence[int]) -> bool:
        """vLLM's ``is_reasoning_end``: always (Harmony tracks the channels itself)."""
        return True

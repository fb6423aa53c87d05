"""``openai``: the gpt-oss tool-call parser (``vllm/tool_parsers/gptoss_tool_parser.py``).

As in vLLM it only declares the capability: gpt-oss output is read as a whole by
:class:`vllm_frontend.chat.harmony_output.HarmonyOutputParser`, which this name switches the tool
calls of on. It serves gpt-oss models (``model_type`` ``gpt_oss``) only.
"""

from __future__ import annotations

from collections.abc import Sequence

from vllm_frontend.chat.parsed import OutputDelta
from vllm_frontend.chat.tools.base import ExtractedToolCalls, ToolParser

__all__ = ["GptOssToolParser"]


class GptOssToolParser(ToolParser):
    """``openai``: Harmony ``commentary`` messages to ``functions.NAME`` are the calls."""

    name = "openai"
    harmony_only = True
    """Served only through Harmony (gpt-oss models)."""

    def extract(self, text: str) -> ExtractedToolCalls:
        """Never called: Harmony reads gpt-oss output."""
        raise NotImplementedError("gpt-oss tool calls are read by the Harmony output parser")

    def stream(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> OutputDelta | None:
        """Never called: Harmony reads gpt-oss output."""
        raise NotImplementedError("gpt-oss tool calls are read by the Harmony output parser")

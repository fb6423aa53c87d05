"""``cohere_command3`` / ``cohere_command4``: the tool names of vLLM 0.32's Cohere Command
unified parser (chat/cohere_output.py parses their output with ``cohere_melody``)."""

from __future__ import annotations

from typing import ClassVar

from vllm_frontend.chat.tools.base import ToolParser

__all__ = ["CohereCommand3ToolParser", "CohereCommand4ToolParser"]


class CohereCommand3ToolParser(ToolParser):
    """``cohere_command3``."""

    name = "cohere_command3"
    preset: ClassVar[str] = "cmd3"
    """The ``cohere_melody`` filter preset."""
    unified = "cohere"
    special_tokens_without_tools = True


class CohereCommand4ToolParser(CohereCommand3ToolParser):
    """``cohere_command4``."""

    name = "cohere_command4"
    preset = "cmd4"

"""``hf``: the tool name of vLLM 0.32's response-template parser (its output is read by
:mod:`vllm_frontend.chat.response_template`)."""

from __future__ import annotations

from vllm_frontend.chat.tools.base import ToolParser

__all__ = ["ResponseTemplateToolParser"]


class ResponseTemplateToolParser(ToolParser):
    """``hf`` (``vllm/parser/response_template.py``): calls are read from the model's
    ``response_template``; forced tool choices are refused, not forced."""

    name = "hf"
    unified = "hf"
    needs_special_tokens = True
    special_tokens_without_tools = True
    joins_special_tokens = True
    supports_required_and_named = False

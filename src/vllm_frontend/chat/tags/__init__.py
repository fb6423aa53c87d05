"""Tool-call structural-tag builders, one per vLLM 0.32 ``structural_tag_model``: the JSON of
xgrammar's structural-tag format models, built from plain dicts (chat/tool_tags.py applies them)."""

from __future__ import annotations

from vllm_frontend.chat.tags.builders import BUILDERS, Builder, Tools

__all__ = ["BUILDERS", "Builder", "Tools"]

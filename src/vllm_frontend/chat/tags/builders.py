"""Every structural-tag model built here, by vLLM 0.32's ``structural_tag_model`` name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from vllm_frontend.chat.tags.formats import Format
from vllm_frontend.chat.tags.glm import glm_4_7
from vllm_frontend.chat.tags.harmony import harmony
from vllm_frontend.chat.tags.hy import hy_v4
from vllm_frontend.chat.tags.json_calls import (
    deepseek_r1,
    deepseek_v3_1,
    hermes_style,
    kimi,
    llama,
)
from vllm_frontend.chat.tags.kimi_k3 import kimi_k3
from vllm_frontend.chat.tags.plamo3 import plamo3
from vllm_frontend.chat.tags.xml_calls import deepseek_dsml, mimo, minimax, qwen_3_coder

__all__ = ["BUILDERS", "Builder", "Tools"]

Tools = list[dict[str, Any]]
"""Each callable tool's ``function`` object (``name``, ``parameters``, ``strict`` pinned)."""

Builder = Callable[..., Format]
"""``(tools, choice)`` -> the tag's format; ``choice`` is ``"auto"``, ``"required"`` or
``"forced"`` (then ``tools`` is the named one alone); a model whose markers carry the
checkpoint's suffix also takes ``suffix``."""

BUILDERS: dict[str, Builder] = {
    "hermes": hermes_style("<tool_call>", "</tool_call>"),
    "longcat": hermes_style("<longcat_tool_call>", "</longcat_tool_call>"),
    "llama": llama,
    "kimi": kimi,
    "deepseek_r1": deepseek_r1,
    "deepseek_v3_1": deepseek_v3_1,
    "deepseek_v3_2": deepseek_dsml("invoke", "function_calls", "deepseek_xml"),
    "deepseek_v4": deepseek_dsml("invoke", "tool_calls", "deepseek_xml"),
    "deepseek_v4_1": deepseek_dsml(
        " invoke", " calls", "deepseek_v4_1_xml", fence_without_tools=True
    ),
    "qwen_3_coder": qwen_3_coder,
    "mimo": mimo,
    "minimax": minimax,
    "glm_4_7": glm_4_7,
    "harmony": harmony,
    "kimi_k3": kimi_k3,
    "plamo3": plamo3,
    "hy_v4": hy_v4,
}
"""Every structural-tag model of vLLM 0.32 (``hy_v4`` takes the checkpoint's marker suffix as a
third argument)."""

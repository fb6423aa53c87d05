"""Reasoning parsers: split ``<think>…</think>`` style reasoning from the answer.

The ``--reasoning-parser`` names (:data:`REASONING_PARSERS`, kept in
:mod:`vllm_frontend.chat.parser_registry`, which imports a class when its name is first looked
up) and a few classes by name. Each class follows the vLLM 0.32 parser of the same
name (``vllm/reasoning/`` and, for the engine-based ones, ``vllm/parser/``), including where its
streaming and whole-output behaviours differ; the families live in
:mod:`vllm_frontend.chat.reasoning`. One instance serves one choice. vLLM names this frontend does
not reproduce exactly are in :data:`REFUSED_REASONING_PARSERS`, refused at startup.
"""

from __future__ import annotations

from vllm_frontend.chat.parser_registry import REASONING_PARSERS
from vllm_frontend.chat.reasoning.base import ModelFacts, ReasoningParser
from vllm_frontend.chat.reasoning.engine_think import Qwen3ReasoningParser
from vllm_frontend.chat.reasoning.refused import REFUSED_REASONING_PARSERS
from vllm_frontend.chat.reasoning.think_tags import DeepSeekR1ReasoningParser

__all__ = [
    "REASONING_PARSERS",
    "REFUSED_REASONING_PARSERS",
    "DeepSeekR1ReasoningParser",
    "ModelFacts",
    "Qwen3ReasoningParser",
    "ReasoningParser",
]

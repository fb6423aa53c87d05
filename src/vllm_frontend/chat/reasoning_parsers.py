"""Reasoning parsers: split ``<think>…</think>`` style reasoning from the answer.

The registry of ``--reasoning-parser`` names. Each class follows the vLLM 0.32 parser of the same
name (``vllm/reasoning/`` and, for the engine-based ones, ``vllm/parser/``), including where its
streaming and whole-output behaviours differ; the families live in
:mod:`vllm_frontend.chat.reasoning`. One instance serves one choice. vLLM names this frontend does
not reproduce exactly are in :data:`REFUSED_REASONING_PARSERS`, refused at startup.
"""

from __future__ import annotations

from vllm_frontend.chat.reasoning.base import ModelFacts, ReasoningParser
from vllm_frontend.chat.reasoning.cohere import (
    CohereCommand3ReasoningParser,
    CohereCommand4ReasoningParser,
)
from vllm_frontend.chat.reasoning.engine_grammar import (
    DeepSeekV4ReasoningParser,
    DeepSeekV41ReasoningParser,
    Gemma4ReasoningParser,
    GraniteThinkingReasoningParser,
    InklingReasoningParser,
    MistralReasoningParser,
)
from vllm_frontend.chat.reasoning.engine_think import (
    Glm45ReasoningParser,
    Glm47ReasoningParser,
    KimiK2ReasoningParser,
    Ling3ReasoningParser,
    MiMoReasoningParser,
    MiniCPMVReasoningParser,
    MiniMaxM2ReasoningParser,
    NemotronV3ReasoningParser,
    Qwen3ReasoningParser,
    SeedOssReasoningParser,
    Step3p5ReasoningParser,
)
from vllm_frontend.chat.reasoning.gptoss import GptOssReasoningParser
from vllm_frontend.chat.reasoning.hf import ResponseTemplateReasoningParser
from vllm_frontend.chat.reasoning.hunyuan import HunyuanA13BReasoningParser
from vllm_frontend.chat.reasoning.k2_horizon import K2HorizonReasoningParser
from vllm_frontend.chat.reasoning.kimi_k3 import KimiK3ReasoningParser
from vllm_frontend.chat.reasoning.minimax_m3 import MiniMaxM3ReasoningParser
from vllm_frontend.chat.reasoning.muse_glimmer import MuseGlimmerReasoningParser
from vllm_frontend.chat.reasoning.plamo3 import Plamo3ReasoningParser
from vllm_frontend.chat.reasoning.refused import REFUSED_REASONING_PARSERS
from vllm_frontend.chat.reasoning.text_markers import GraniteReasoningParser, Olmo3ReasoningParser
from vllm_frontend.chat.reasoning.think_tags import (
    DeepSeekR1ReasoningParser,
    DeepSeekV3ReasoningParser,
    Ernie45ReasoningParser,
    Holo2ReasoningParser,
    HYV3ReasoningParser,
    HYV4ReasoningParser,
    MiniMaxM2AppendThinkReasoningParser,
    PoolsideV1ReasoningParser,
    Step3ReasoningParser,
)

__all__ = [
    "REASONING_PARSERS",
    "REFUSED_REASONING_PARSERS",
    "DeepSeekR1ReasoningParser",
    "ModelFacts",
    "Qwen3ReasoningParser",
    "ReasoningParser",
]

REASONING_PARSERS: dict[str, type[ReasoningParser]] = {
    cls.name: cls
    for cls in (
        CohereCommand3ReasoningParser,
        CohereCommand4ReasoningParser,
        DeepSeekR1ReasoningParser,
        DeepSeekV3ReasoningParser,
        DeepSeekV4ReasoningParser,
        DeepSeekV41ReasoningParser,
        Ernie45ReasoningParser,
        Gemma4ReasoningParser,
        Glm45ReasoningParser,
        Glm47ReasoningParser,
        GptOssReasoningParser,
        GraniteReasoningParser,
        GraniteThinkingReasoningParser,
        Holo2ReasoningParser,
        HunyuanA13BReasoningParser,
        ResponseTemplateReasoningParser,
        HYV3ReasoningParser,
        HYV4ReasoningParser,
        K2HorizonReasoningParser,
        InklingReasoningParser,
        KimiK2ReasoningParser,
        KimiK3ReasoningParser,
        Ling3ReasoningParser,
        MiMoReasoningParser,
        MiniCPMVReasoningParser,
        MiniMaxM2ReasoningParser,
        MiniMaxM3ReasoningParser,
        MuseGlimmerReasoningParser,
        MistralReasoningParser,
        NemotronV3ReasoningParser,
        Olmo3ReasoningParser,
        Plamo3ReasoningParser,
        MiniMaxM2AppendThinkReasoningParser,
        PoolsideV1ReasoningParser,
        Qwen3ReasoningParser,
        SeedOssReasoningParser,
        Step3ReasoningParser,
        Step3p5ReasoningParser,
    )
}
"""``--reasoning-parser`` names this frontend implements."""

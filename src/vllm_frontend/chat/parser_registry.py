"""The ``--tool-call-parser`` and ``--reasoning-parser`` registries, whose classes are imported
when a name is first looked up.

A server uses at most one parser of each kind, so the ~60 modules of the others are not imported
at startup (~2 MB and their import time). :data:`PARSER_TOKENS` lists every token string a
registered parser class declares (``required_tokens`` and ``optional_tokens``), which startup
looks up in the vocabulary without importing the classes; ``tests/chat/test_parser_registry.py``
pins both to the classes themselves.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from vllm_frontend.chat.reasoning.base import ReasoningParser
    from vllm_frontend.chat.tools.base import ToolParser

__all__ = ["PARSER_TOKENS", "REASONING_PARSERS", "TOOL_PARSERS", "LazyClasses"]

_C = TypeVar("_C")


class LazyClasses(Mapping[str, "type[_C]"], Generic[_C]):
    """A read-only name -> class mapping whose classes are imported on first lookup; a spec is
    ``"module:Class"``, the module relative to ``vllm_frontend.chat``."""

    __slots__ = ("_loaded", "_specs")

    def __init__(self, specs: Mapping[str, str]) -> None:
        self._specs = dict(specs)
        self._loaded: dict[str, type[_C]] = {}

    def __getitem__(self, name: str) -> type[_C]:
        cls = self._loaded.get(name)
        if cls is None:
            module, attr = self._specs[name].split(":")
            cls = getattr(importlib.import_module(f"vllm_frontend.chat.{module}"), attr)
            self._loaded[name] = cls
        return cls

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)

    def spec(self, name: str) -> str:
        """Where ``name``'s class lives (``"module:Class"``), without importing it."""
        return self._specs[name]


TOOL_PARSERS: LazyClasses[ToolParser] = LazyClasses(
    {
        "apertus": "tools.apertus:ApertusToolParser",
        "cohere_command3": "tools.cohere:CohereCommand3ToolParser",
        "cohere_command4": "tools.cohere:CohereCommand4ToolParser",
        "deepseek_v3": "tools.deepseek:DeepSeekV3ToolParser",
        "deepseek_v31": "tools.deepseek:DeepSeekV31ToolParser",
        "deepseek_v32": "tools.dsml:DeepSeekV32ToolParser",
        "deepseek_v4": "tools.dsml:DeepSeekV4ToolParser",
        "deepseek_v41": "tools.dsml:DeepSeekV41ToolParser",
        "dots": "tools.dots:DotsToolParser",
        "ernie45": "tools.ernie:Ernie45ToolParser",
        "functiongemma": "tools.functiongemma:FunctionGemmaToolParser",
        "gemma4": "tools.gemma4:Gemma4ToolParser",
        "gigachat3": "tools.gigachat:GigaChat3ToolParser",
        "glm45": "tools.glm:Glm47ToolParser",
        "glm47": "tools.glm:Glm47ToolParser",
        "granite": "tools.granite_array:GraniteEngineToolParser",
        "granite-20b-fc": "tools.granite:Granite20bFCToolParser",
        "granite4": "tools.granite:Granite4ToolParser",
        "hermes": "tool_parsers:HermesToolParser",
        "hf": "tools.hf:ResponseTemplateToolParser",
        "hunyuan_a13b": "tools.hunyuan:HunyuanA13BToolParser",
        "hy_v3": "tools.hy:HYV3ToolParser",
        "hy_v4": "tools.hy:HYV4ToolParser",
        "inkling": "tools.inkling:InklingToolParser",
        "internlm": "tools.internlm:InternLM2ToolParser",
        "jamba": "tools.json_calls:JambaToolParser",
        "k2_horizon": "tools.k2_horizon:K2HorizonToolParser",
        "kimi_k2": "tools.kimi:KimiK2ToolParser",
        "kimi_k3": "tools.kimi_k3:KimiK3ToolParser",
        "lfm2": "tools.lfm2:Lfm2ToolParser",
        "ling3": "tools.glm:Ling3ToolParser",
        "llama3_json": "tool_parsers:Llama3JsonToolParser",
        "llama4_json": "tool_parsers:Llama3JsonToolParser",
        "llama4_pythonic": "tools.pythonic:Llama4PythonicToolParser",
        "longcat": "tool_parsers:LongcatToolParser",
        "mimo": "tools.qwen3_xml:MiMoToolParser",
        "minicpm5": "tools.minicpm5:MiniCPM5ToolParser",
        "minimax_m2": "tools.minimax:MiniMaxM2ToolParser",
        "muse_glimmer": "tools.muse_glimmer:MuseGlimmerToolParser",
        "minimax_m3": "tools.minimax_m3:MiniMaxM3ToolParser",
        "mistral": "tools.mistral:MistralToolParser",
        "olmo3": "tools.pythonic:Olmo3ToolParser",
        "openai": "tools.gptoss:GptOssToolParser",
        "phi4_mini_json": "tools.json_calls:Phi4MiniJsonToolParser",
        "plamo3": "tools.plamo3:Plamo3ToolParser",
        "poolside_v1": "tools.poolside:PoolsideV1ToolParser",
        "pythonic": "tools.pythonic:PythonicToolParser",
        "qwen3_coder": "tools.qwen3_xml:Qwen3XmlToolParser",
        "qwen3_json": "tool_parsers:HermesToolParser",
        "qwen3_xml": "tools.qwen3_xml:Qwen3XmlToolParser",
        "seed_oss": "tools.qwen3_xml:SeedOssToolParser",
        "step3": "tools.steptml:Step3ToolParser",
        "step3p5": "tools.qwen3_xml:Step3p5ToolParser",
        "xlam": "tools.xlam:XLamToolParser",
    }
)
"""``--tool-call-parser`` names this frontend implements, as vLLM 0.32 maps them (``llama4_json``
and ``qwen3_json`` are its aliases of ``llama3_json`` and ``hermes``; ``qwen3_xml`` of
``qwen3_coder``; ``glm45`` of ``glm47``). The rest of vLLM's names are in
:data:`~vllm_frontend.chat.tools.refused.REFUSED_TOOL_PARSERS`, refused at startup."""

REASONING_PARSERS: LazyClasses[ReasoningParser] = LazyClasses(
    {
        "cohere_command3": "reasoning.cohere:CohereCommand3ReasoningParser",
        "cohere_command4": "reasoning.cohere:CohereCommand4ReasoningParser",
        "deepseek_r1": "reasoning.think_tags:DeepSeekR1ReasoningParser",
        "deepseek_v3": "reasoning.think_tags:DeepSeekV3ReasoningParser",
        "deepseek_v4": "reasoning.engine_grammar:DeepSeekV4ReasoningParser",
        "deepseek_v41": "reasoning.engine_grammar:DeepSeekV41ReasoningParser",
        "ernie45": "reasoning.think_tags:Ernie45ReasoningParser",
        "gemma4": "reasoning.engine_grammar:Gemma4ReasoningParser",
        "glm45": "reasoning.engine_think:Glm45ReasoningParser",
        "glm47": "reasoning.engine_think:Glm47ReasoningParser",
        "openai_gptoss": "reasoning.gptoss:GptOssReasoningParser",
        "granite": "reasoning.text_markers:GraniteReasoningParser",
        "granite_thinking_parser": "reasoning.engine_grammar:GraniteThinkingReasoningParser",
        "holo2": "reasoning.think_tags:Holo2ReasoningParser",
        "hunyuan_a13b": "reasoning.hunyuan:HunyuanA13BReasoningParser",
        "hf": "reasoning.hf:ResponseTemplateReasoningParser",
        "hy_v3": "reasoning.think_tags:HYV3ReasoningParser",
        "hy_v4": "reasoning.think_tags:HYV4ReasoningParser",
        "k2_horizon": "reasoning.k2_horizon:K2HorizonReasoningParser",
        "inkling": "reasoning.engine_grammar:InklingReasoningParser",
        "kimi_k2": "reasoning.engine_think:KimiK2ReasoningParser",
        "kimi_k3": "reasoning.kimi_k3:KimiK3ReasoningParser",
        "ling3": "reasoning.engine_think:Ling3ReasoningParser",
        "mimo": "reasoning.engine_think:MiMoReasoningParser",
        "minicpmv": "reasoning.engine_think:MiniCPMVReasoningParser",
        "minimax_m2": "reasoning.engine_think:MiniMaxM2ReasoningParser",
        "minimax_m3": "reasoning.minimax_m3:MiniMaxM3ReasoningParser",
        "muse_glimmer": "reasoning.muse_glimmer:MuseGlimmerReasoningParser",
        "mistral": "reasoning.engine_grammar:MistralReasoningParser",
        "nemotron_v3": "reasoning.engine_think:NemotronV3ReasoningParser",
        "olmo3": "reasoning.text_markers:Olmo3ReasoningParser",
        "plamo3": "reasoning.plamo3:Plamo3ReasoningParser",
        "minimax_m2_append_think": "reasoning.think_tags:MiniMaxM2AppendThinkReasoningParser",
        "poolside_v1": "reasoning.think_tags:PoolsideV1ReasoningParser",
        "qwen3": "reasoning.engine_think:Qwen3ReasoningParser",
        "seed_oss": "reasoning.engine_think:SeedOssReasoningParser",
        "step3": "reasoning.think_tags:Step3ReasoningParser",
        "step3p5": "reasoning.engine_think:Step3p5ReasoningParser",
    }
)
"""``--reasoning-parser`` names this frontend implements (each class's ``name``)."""

PARSER_TOKENS: frozenset[str] = frozenset(
    (
        "</",
        "</ifm|think>",
        "</ifm|think_fast>",
        "</ifm|think_faster>",
        "</minimax:tool_call>",
        "</mm:think>",
        "</response>",
        "</seed:think>",
        "</seed:tool_call>",
        "</tool_calls>",
        "</｜DSML｜ calls>",
        "</｜DSML｜function_calls>",
        "</｜DSML｜tool_calls>",
        "<0x0A>",
        "<assistant>",
        "<channel|>",
        "<ifm|think>",
        "<ifm|think_fast>",
        "<ifm|think_faster>",
        "<ifm|tool_calls>",
        "<minimax:tool_call>",
        "<mm:think>",
        "<reserved_12>",
        "<reserved_13>",
        "<reserved_14>",
        "<reserved_15>",
        "<response>",
        "<seed:bos>",
        "<seed:eos>",
        "<seed:think>",
        "<seed:tool_call>",
        "<tool_calls>",
        "<tool_call|>",
        "<|CHATBOT_TOKEN|>",
        "<|END_THINKING|>",
        "<|START_THINKING|>",
        "<|assistant|>",
        "<|channel>",
        "<|content_invoke_tool_json|>",
        "<|content_invoke_tool_text|>",
        "<|content_model_end_sampling|>",
        "<|content_text|>",
        "<|content_thinking|>",
        "<|content_tool_error|>",
        "<|end_message|>",
        "<|message_model|>",
        "<|observation|>",
        "<|plamo:begin_think:plamo|>",
        "<|plamo:end_think:plamo|>",
        "<|plamo:tag|>",
        "<|python_tag|>",
        "<|reserved_12|>",
        "<|reserved_13|>",
        "<|reserved_14|>",
        "<|reserved_15|>",
        "<|system|>",
        "<|tool_call>",
        "<|tool_call_argument_begin|>",
        "<|tool_call_begin|>",
        "<|tool_call_end|>",
        "<|tool_call_start|>",
        "<|tool_calls_section_begin|>",
        "<|tool_calls_section_end|>",
        "<|tool_call|>",
        "<|tool_response>",
        "<|turn>",
        "<|user|>",
        "<｜DSML｜ calls>",
        "<｜DSML｜function_calls>",
        "<｜DSML｜tool_calls>",
        "<｜tool▁calls▁begin｜>",
        "<｜tool▁calls▁end｜>",
        "<｜tool▁call▁begin｜>",
        "<｜tool▁call▁end｜>",
        ">",
        "[/THINK]",
        "[ARGS]",
        "[THINK]",
        "[TOOL_CALLS]",
        "think",
        "thought",
        "Ġ</",
    )
)
"""Every token string the registered parser classes declare, besides ``MARKER_TOKENS`` of
:mod:`vllm_frontend.chat.output_parser`."""

"""Structural tags of the tool-call formats whose arguments are XML-like (xgrammar's
``JSONSchemaFormat`` styles): xgrammar's ``qwen_3_coder``, ``mimo``, ``deepseek_v3_2``,
``deepseek_v4`` and ``deepseek_v4_1`` (xgrammar/builtin_structural_tag.py, as vLLM 0.32 calls
them: reasoning disabled, parallel calls allowed, special tokens excluded from text) and vLLM's
``minimax`` builder (vllm/tool_parsers/structural_tag_registry.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from vllm_frontend.chat.tags.formats import (
    Format,
    any_text,
    arguments_schema,
    const,
    json_schema,
    sequence,
    tag,
    tags_with_separator,
    triggered,
)
from vllm_frontend.chat.tags.json_calls import THINK

__all__ = ["deepseek_dsml", "mimo", "minimax", "qwen_3_coder"]

Tools = list[dict[str, Any]]


def qwen_3_coder(tools: Tools, choice: str) -> Format:
    """xgrammar's ``qwen_3_coder`` (vLLM's ``qwen3_coder``, ``qwen3_xml`` and ``step3p5``)."""

    def call(f: Mapping[str, Any]) -> Format:
        return tag(
            "<tool_call>\n<function=" + f["name"] + ">\n",
            json_schema(arguments_schema(f), "qwen_xml"),
            "\n</function>\n</tool_call>",
        )

    if choice == "forced":
        return call(tools[0])
    if choice == "auto" and not tools:
        return any_text(THINK)
    return triggered(
        ["<tool_call>\n<function="], [call(f) for f in tools],
        at_least_one=choice == "required", excludes=THINK,
    )  # fmt: skip


_MIMO_EXCLUDES = (*THINK, "</tool_call>", "<function=")


def mimo(tools: Tools, choice: str) -> Format:
    """xgrammar's ``mimo``."""
    tags = [
        tag("<tool_call><function=" + f["name"] + ">",
            json_schema(arguments_schema(f), "qwen_xml"), "</function></tool_call>")
        for f in tools
    ]  # fmt: skip
    if choice == "forced":
        return tags[0]
    if not tags:
        return any_text(("<tool_call>", *_MIMO_EXCLUDES))
    return triggered(
        ["<tool_call>"], tags, at_least_one=choice == "required", excludes=_MIMO_EXCLUDES
    )


def minimax(tools: Tools, choice: str) -> Format:
    """vLLM's ``minimax`` (MiniMax M2)."""
    tags = [
        tag('<invoke name="' + f["name"] + '">\n',
            json_schema(arguments_schema(f), "minimax_xml"), "</invoke>\n")
        for f in tools
    ]  # fmt: skip
    if choice == "auto":
        if not tags:
            return any_text(THINK)
        calls = tags_with_separator(tags, "", at_least_one=True)
        block = tag("<minimax:tool_call>\n", calls, "</minimax:tool_call>")
        return triggered(["<minimax:tool_call>"], [block], excludes=THINK)
    calls = tags_with_separator(tags, "", at_least_one=True, stop_after_first=choice == "forced")
    return sequence([const("\n<minimax:tool_call>\n"), calls, const("</minimax:tool_call>")])


def deepseek_dsml(
    invoke: str, calls: str, style: str, *, fence_without_tools: bool = False
) -> Callable[[Tools, str], Format]:
    """xgrammar's DSML builders: ``<｜DSML｜{calls}>`` blocks of ``<｜DSML｜{invoke} name="…">``
    calls (``fence_without_tools``: with no tool, the calls marker is kept out of text)."""
    begin, end = f"<｜DSML｜{calls}>", f"</｜DSML｜{calls}>"

    def build(tools: Tools, choice: str) -> Format:
        tags = [
            tag(f'<｜DSML｜{invoke} name="' + f["name"] + '">\n',
                json_schema(arguments_schema(f), style), f"</｜DSML｜{invoke}>\n")
            for f in tools
        ]  # fmt: skip
        if choice == "auto":
            if not tags:
                return any_text((*THINK, begin) if fence_without_tools else THINK)
            block = tag(begin + "\n", tags_with_separator(tags, "", at_least_one=True), end)
            return triggered([begin], [block], excludes=THINK)
        body = tags[0] if choice == "forced" else tags_with_separator(tags, "", at_least_one=True)
        return sequence([const("\n\n" + begin + "\n"), body, const(end)])

    return build

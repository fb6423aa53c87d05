"""Structural tags of the tool-call formats whose arguments are JSON: vLLM 0.32's ``hermes`` and
``longcat`` builders (vllm/tool_parsers/structural_tag_registry.py) and xgrammar's ``llama``,
``kimi``, ``deepseek_r1`` and ``deepseek_v3_1`` (xgrammar/builtin_structural_tag.py, as vLLM
calls them: reasoning disabled, parallel calls allowed, special tokens excluded from text)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from vllm_frontend.chat.tags.formats import (
    Format,
    any_text,
    arguments_schema,
    const,
    json_schema,
    regex,
    sequence,
    tag,
    tags_with_separator,
    triggered,
)

__all__ = [
    "THINK",
    "deepseek_r1",
    "deepseek_v3_1",
    "hermes_style",
    "kimi",
    "llama",
]

Tools = list[dict[str, Any]]
THINK = ("<think>", "</think>")
"""The reasoning markers xgrammar keeps out of free text."""


def hermes_style(start: str, end: str) -> Callable[[Tools, str], Format]:
    """vLLM's hermes-style builder for the ``start``/``end`` markers."""

    def build(tools: Tools, choice: str) -> Format:
        tags = [
            tag(begin + f["name"] + '", "arguments": ', json_schema(arguments_schema(f)), close)
            for f in tools
            for begin, close in (
                (start + '\n{"name": "', "}\n" + end),
                (start + '{"name": "', "}" + end),
            )
        ]
        if choice == "auto":
            return triggered([start], tags) if tags else any_text()
        return tags_with_separator(tags, "", at_least_one=True, stop_after_first=choice == "forced")

    return build


def llama(tools: Tools, choice: str) -> Format:
    """xgrammar's ``llama``."""

    def call(f: Mapping[str, Any]) -> Format:
        return tag(
            '{"name": "' + f["name"] + '", "parameters": ', json_schema(arguments_schema(f)), "}"
        )

    if choice == "forced":
        return call(tools[0])
    tags = [call(f) for f in tools]
    if choice == "auto" and not tags:
        return any_text(THINK)
    return triggered(['{"name": '], tags, at_least_one=choice == "required", excludes=THINK)


_KIMI_CALLS = ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>")


def kimi(tools: Tools, choice: str) -> Format:
    """xgrammar's ``kimi`` (Kimi K2)."""

    def call(f: Mapping[str, Any]) -> Format:
        return tag(
            "<|tool_call_begin|>functions." + f["name"] + ":",
            sequence(
                [
                    regex(r"\d+"),
                    const("<|tool_call_argument_begin|>"),
                    json_schema(arguments_schema(f)),
                ]
            ),
            "<|tool_call_end|>",
        )

    begin, end = _KIMI_CALLS
    if choice == "forced":
        return sequence([const(begin), call(tools[0]), const(end)])
    calls = tags_with_separator([call(f) for f in tools], "", at_least_one=True)
    if choice == "required":
        return sequence([const(begin), calls, const(end)])
    if not tools:
        return any_text(THINK)
    return triggered([begin], [tag(begin, calls, end)], excludes=(*THINK, "<|tool_call_begin|>"))


_DS_CALLS = ("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>")
_DS_CALL = ("<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>")
_DS_SEP = "<｜tool▁sep｜>"


def _deepseek(head: str, body_begin: str, body_end: str, separator: str) -> Callable[..., Format]:
    # One call: CALL_BEGIN head NAME body_begin ARGS body_end CALL_END, in a calls block.
    begin, end = _DS_CALLS

    def build(tools: Tools, choice: str) -> Format:
        def call(f: Mapping[str, Any], prefix: str = "", suffix: str = "") -> Format:
            return tag(
                prefix + _DS_CALL[0] + head + f["name"] + body_begin,
                json_schema(arguments_schema(f)),
                body_end + _DS_CALL[1] + suffix,
            )

        if choice == "forced":
            return call(tools[0], begin, end)
        block = tag(
            begin, tags_with_separator([call(f) for f in tools], separator, at_least_one=True), end
        )
        if choice == "required":
            return block
        return triggered([begin], [block], excludes=THINK) if tools else any_text(THINK)

    return build


deepseek_r1 = _deepseek("function" + _DS_SEP, "\n```json\n", "\n```", "\n")
"""xgrammar's ``deepseek_r1`` (vLLM's ``deepseek_v3`` parser)."""
deepseek_v3_1 = _deepseek("", _DS_SEP, "", "")
"""xgrammar's ``deepseek_v3_1``."""

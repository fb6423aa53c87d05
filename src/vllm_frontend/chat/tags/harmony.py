"""The gpt-oss (Harmony) tool-call structural tag: vLLM 0.32's ``harmony`` builder
(vllm/parser/harmony.py): optional analysis and commentary messages, then a function call on any
channel with either recipient order and JSON constraint spelling, or (``auto``) a final answer."""

from __future__ import annotations

from typing import Any

from vllm_frontend.chat.tags.formats import (
    Format,
    any_text,
    arguments_schema,
    const,
    json_schema,
    optional,
    sequence,
    tag,
)

__all__ = ["harmony"]

Tools = list[dict[str, Any]]

_CONSTRAINS = (" json", " <|constrain|>json")
_CHANNELS = ("<|channel|>commentary", "<|channel|>analysis", "<|channel|>final")
_CALL_BEGINS = (
    " to=functions.{name}{channel}{constrain}<|message|>",
    "{channel} to=functions.{name}{constrain}<|message|>",
)
_END = ("<|end|>", "")
"""``<|end|>``, or the end of output (Harmony's stop tokens are not matched under a grammar)."""


def _preamble(channel: str) -> Format:
    return optional(sequence([
        tag(f"<|channel|>{channel}<|message|>", any_text(), "<|end|>"),
        const("<|start|>assistant"),
    ]))  # fmt: skip


def harmony(tools: Tools, choice: str) -> Format:
    """vLLM's ``harmony`` (function tools; Chat Completions has no builtin tools)."""
    tags = [
        tag(begin.format(name=f["name"], channel=channel, constrain=constrain),
            json_schema(arguments_schema(f)), list(_END))
        for f in tools
        for begin in _CALL_BEGINS
        for constrain in _CONSTRAINS
        for channel in _CHANNELS
    ]  # fmt: skip
    if choice == "auto":
        tags += [
            tag(f"<|channel|>final{constrain}<|message|>", any_text(), list(_END))
            for constrain in (*_CONSTRAINS, "")
        ]
    return sequence([_preamble("analysis"), _preamble("commentary"),
                     {"type": "or", "elements": tags}])  # fmt: skip

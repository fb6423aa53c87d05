"""gpt-oss (Harmony) structural tags (vllm/parser/harmony.py in vLLM 0.32): the tool-call tag of
its ``harmony`` builder (optional analysis and commentary messages, then a function call on any
channel with either recipient order and JSON constraint spelling, or (``auto``) a final answer),
and the answer tag its ``HarmonyParser.adjust_request`` puts a structured-output constraint in
(an optional analysis message, then the constraint as the final channel's message)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from vllm_frontend.chat.tags.constraints import constraint_format
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

__all__ = ["harmony", "harmony_answer_tag"]

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


def harmony_answer_tag(so: Mapping[str, Any]) -> str | None:
    """The ``structural_tag`` vLLM sends a gpt-oss model instead of the constraint in ``so``
    (the ``structured_outputs`` fields, ``response_format`` merged in): an optional analysis
    message, then a final message holding the constraint (a JSON schema with either JSON
    constraint spelling in its header). None without a constraint."""
    content = constraint_format(so)
    if content is None:
        return None
    if content["type"] == "json_schema":
        answer: Format = {"type": "or", "elements": [
            tag(f"<|channel|>final{constrain}<|message|>", content, list(_END))
            for constrain in _CONSTRAINS
        ]}  # fmt: skip
    else:
        answer = tag("<|channel|>final<|message|>", content, list(_END))
    return json.dumps(
        {"type": "structural_tag", "format": sequence([_preamble("analysis"), answer])}
    )

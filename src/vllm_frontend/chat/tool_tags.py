"""Tool-call structural tags: how vLLM 0.32 constrains tool calls in the model's own syntax
(``DelegatingParser._apply_structural_tag`` in vllm/parser/abstract_parser.py, the builders of
vllm/tool_parsers/structural_tag_registry.py and xgrammar's ``builtin_structural_tag``).

A tool parser with a structural-tag model (``ToolParser.structural_tag_model``) gets, while
``VLLM_ENFORCE_STRICT_TOOL_CALLING`` is on (vLLM's default), a structural tag instead of the
JSON schema of chat/tool_choice.py whenever:

- ``tool_choice`` is ``"required"`` or a named function, or
- ``tool_choice`` is ``"auto"`` and a tool says ``"strict": true`` or the strict level
  (``--tool-strict-level``, else the parser's default) is ``function`` or ``parameter``.

Each tool's arguments follow its ``parameters`` schema only when the tool is strict (or the level
is ``parameter``); otherwise any JSON. ``parallel_tool_calls: false`` stops after the first call;
``auto`` with a structured-output constraint accepts either the calls or that constraint.

The tag is the JSON of xgrammar's pydantic format models (``model_dump``: every field, defaults
included), built from plain dicts by chat/tags/ (xgrammar is not imported). Models whose builders
are not reproduced there raise :class:`NotImplementedError` naming the model (HTTP 501), never a
different constraint.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from vllm_frontend.chat.errors import ChatError
from vllm_frontend.chat.tags import BUILDERS
from vllm_frontend.chat.tags.constraints import constraint_format

__all__ = [
    "CONSTRAINT_FIELDS",
    "DEFAULT_STRICT_LEVELS",
    "FORCED_ONLY_MODELS",
    "STRICT_LEVELS",
    "STRUCTURAL_TAG_MODELS",
    "enforce_strict_tool_calling",
    "strict_level_value",
    "tool_structural_tag",
]

STRICT_LEVELS = ("auto", "function", "parameter")
"""``--tool-strict-level`` values, weakest first."""

STRUCTURAL_TAG_MODELS: dict[str, str] = {
    "deepseek_v3": "deepseek_r1", "deepseek_v31": "deepseek_v3_1",
    "deepseek_v32": "deepseek_v3_2", "deepseek_v4": "deepseek_v4",
    "deepseek_v41": "deepseek_v4_1", "glm45": "glm_4_7", "glm47": "glm_4_7",
    "hermes": "hermes", "hy_v4": "hy_v4", "kimi_k2": "kimi", "kimi_k3": "kimi_k3",
    "ling3": "glm_4_7", "llama3_json": "llama", "llama4_json": "llama", "longcat": "longcat",
    "mimo": "mimo", "minimax_m2": "minimax", "openai": "harmony", "plamo3": "plamo3",
    "qwen3_coder": "qwen_3_coder", "qwen3_json": "hermes", "qwen3_xml": "qwen_3_coder",
    "step3p5": "qwen_3_coder",
}  # fmt: skip
"""Each ``--tool-call-parser``'s ``structural_tag_model`` in vLLM 0.32 (the others have none)."""

FORCED_ONLY_MODELS = frozenset(("hy_v4",))
"""Models whose parser builds no tag for "auto" (unless a structured-output constraint joins
the calls, which asks it for a "required" one), and none (the request left as it is) where the
tag cannot be built (vLLM's ``HYV4ToolParser.get_structural_tag``)."""

DEFAULT_STRICT_LEVELS: dict[str, int] = {"glm45": 1, "glm47": 1}
"""The parsers whose ``default_tool_strict_level`` applies while the level is ``auto``."""


def strict_level_value(name: str) -> int:
    """The rank of a ``--tool-strict-level`` name (vLLM's ``ToolStrictLevel.from_name``)."""
    key = name.strip().lower()
    if key not in STRICT_LEVELS:
        raise ValueError(
            f"Unknown tool strict level {name!r}; expected one of {', '.join(STRICT_LEVELS)}."
        )
    return STRICT_LEVELS.index(key)


def enforce_strict_tool_calling() -> bool:
    """``VLLM_ENFORCE_STRICT_TOOL_CALLING`` as vLLM reads it (on unless set to another value
    than ``true``/``1``)."""
    return os.getenv("VLLM_ENFORCE_STRICT_TOOL_CALLING", "True").lower() in ("true", "1")


CONSTRAINT_FIELDS = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")
"""The constraint fields of ``structured_outputs`` (:func:`tool_structural_tag` reads them)."""


# -- vLLM's _apply_structural_tag --------------------------------------------------------------


def _function(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    function = tool.get("function")
    return function if isinstance(function, Mapping) else {}


def _limit_to_one_call(node: Any) -> None:
    # vLLM's limit_to_single_tool_call: every list of calls stops after its first (formats only:
    # a JSON schema inside is the tool's, never walked).
    if isinstance(node, dict):
        kind = node.get("type")
        if kind == "json_schema":
            return
        if kind in ("triggered_tags", "token_triggered_tags", "tags_with_separator"):
            node["stop_after_first"] = True
        for value in node.values():
            _limit_to_one_call(value)
    elif isinstance(node, list):
        for item in node:
            _limit_to_one_call(item)


def tool_structural_tag(
    model: str,
    tools: Sequence[Mapping[str, Any]],
    tool_choice: Any,
    *,
    parallel_tool_calls: bool | None,
    structured_outputs: Mapping[str, Any] | None,
    strict_level: int,
    xgrammar_accepts: Callable[[], bool] = lambda: True,
    token_suffix: str = "",
) -> str | None:
    """The ``structural_tag`` vLLM sends for a request to a parser whose structural-tag model
    is ``model`` (``tools`` and ``tool_choice`` as plain JSON; ``structured_outputs`` the
    request's constraint, ``response_format`` merged in; ``strict_level`` the server's, parser
    default applied; ``xgrammar_accepts``: whether that constraint passes xgrammar's checks;
    ``token_suffix``: the checkpoint's marker suffix, for the models that take one).
    ``None``: vLLM leaves the request as it is."""
    named = isinstance(tool_choice, Mapping)
    if named and tool_choice.get("type") not in ("function", "custom"):
        return None  # vLLM: an allowed_tools, built-in or MCP choice asks for no tool call
    is_auto = tool_choice == "auto"
    if not tools or not (is_auto or tool_choice == "required" or named):
        return None
    forced_only = model in FORCED_ONLY_MODELS
    single_call = parallel_tool_calls is False
    if single_call and not (is_auto and structured_outputs is not None):
        strict_level = max(strict_level, 1)
    functions = [_function(t) for t in tools if t.get("type", "function") == "function"]
    if not functions:
        if is_auto or forced_only:
            return None
        raise ChatError(
            "tool_choice requires a function call, but tools contains no function tool the "
            "model can call. (parameter=tool_choice)",
            param="tool_choice",
        )
    strict_tools = any(f.get("strict") is True for f in functions)
    if is_auto and strict_level == 0 and not strict_tools:
        return None
    if model not in BUILDERS:
        raise NotImplementedError(
            f"Tool calls constrained with vLLM's {model!r} structural tag are not supported by "
            "this frontend yet (set VLLM_ENFORCE_STRICT_TOOL_CALLING=0 on both vLLM and this "
            "frontend to constrain them with JSON instead)."
        )
    output = None
    if is_auto and structured_outputs:
        if not xgrammar_accepts():
            return None  # vLLM: the structured output constraint alone applies
        output = constraint_format(structured_outputs)
    pinned = [{**f, "strict": strict_level >= 2 or f.get("strict") is True} for f in functions]
    choice = "required" if output is not None else "auto" if is_auto else "required"
    if forced_only and choice == "auto":
        return None
    if named:
        name = (tool_choice.get("function") or {}).get("name")
        pinned = [f for f in pinned if f.get("name") == name]
        if len(pinned) != 1:
            if forced_only:
                return None
            # xgrammar's get_builtin_structural_tag: no match, then more than one
            raise ChatError(
                f"The tool with name '{name}' is not found in the tools list."
                if not pinned
                else "Forced tool choice must resolve to exactly one tool."
            )
        choice = "forced"
    builder = BUILDERS[model]
    fmt = builder(pinned, choice, token_suffix) if token_suffix else builder(pinned, choice)
    if single_call:
        _limit_to_one_call(fmt)
    if output is not None:
        fmt = {"type": "or", "elements": [fmt, output]}
    return json.dumps({"type": "structural_tag", "format": fmt})

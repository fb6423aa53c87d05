"""The EBNF grammar vLLM 0.32 constrains a Cohere Command model's tool calls with (its
``collect_tool_schema`` in vllm/parser/cohere_command.py): a JSON array of calls, each an object
of ``tool_call_id``, ``tool_name`` and ``parameters`` converted by xgrammar per tool, the tool's
rules renamed with the tool's name as prefix."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from vllm_frontend.text.structured_outputs import check_json_nesting
from vllm_frontend.text.xgrammar_native import json_schema_to_ebnf

__all__ = ["cohere_tool_grammar", "cohere_tools"]

_RULE_NAME = re.compile(r"\b(\w+)\s*::=")


def cohere_tools(tools: Sequence[Any]) -> list[tuple[str, dict[str, Any]]]:
    """``(name, parameters)`` of each tool vLLM's Cohere helper reads from a Chat Completions
    ``tools`` list (a ``function`` wrapper unwrapped; entries without a string name skipped;
    parameters other than an object read as ``{}``)."""
    out = []
    for tool in tools:
        if not isinstance(tool, Mapping):
            continue
        function = tool.get("function")
        if tool.get("type") == "function" and isinstance(function, Mapping):
            tool = function
        name = tool.get("name")
        if not isinstance(name, str):
            continue
        parameters = tool.get("parameters")
        out.append((name, dict(parameters) if isinstance(parameters, Mapping) else {}))
    return out


def cohere_tool_grammar(tools: Sequence[tuple[str, dict[str, Any]]]) -> str:
    """The grammar text of a JSON array of calls to ``tools`` (from :func:`cohere_tools`, at
    least one), as vLLM writes it. Raises RuntimeError for a schema xgrammar cannot convert,
    InvalidRequestError for one nested too deeply."""
    rules: dict[str, str] = {}
    for name, parameters in tools:
        check_json_nesting(parameters)
        params = dict(parameters)
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {
                "tool_call_id": {"type": "string", "pattern": "^[0-9]+$"},
                "tool_name": {"type": "string", "const": name},
                "parameters": params,
            },
        }
        for key in ("$defs", "definitions"):
            if key in params:
                schema[key] = params.pop(key)
        rules[name] = _tool_rules(name, json.dumps(schema))
    alternatives = "tool ::= " + " | ".join(rules)
    body = "\n    ".join(rules.values())
    return (
        "root ::= tools\n"
        '    tools ::= ws "[" ws tool (ws "," ws tool)* ws "]" ws\n'
        '    ws    ::= (" " | "\\t" | "\\n")*\n'
        f"    {alternatives}\n"
        f"    {body}\n"
        "    "
    )


@functools.lru_cache(maxsize=256)
def _tool_rules(name: str, schema: str) -> str:
    # (Cached: agents send the same tools request after request, and the renaming below costs
    # several milliseconds a tool. xgrammar's RuntimeError for a schema it cannot convert is
    # vLLM's 500 as well.)
    grammar = json_schema_to_ebnf(schema)
    # Each rule name found, in order, prefixed with the tool's name wherever it stands as a word
    # (vLLM's renaming, run on the text as it was changed so far, replacement template semantics
    # included).
    for rule in _RULE_NAME.findall(grammar):
        grammar = re.sub(rf"\b{re.escape(rule)}\b", name + rule, grammar)
    return f"{name} ::= {name}root\n{grammar}"

"""Qwen3-Coder's XML tool calls and the families that share the grammar (vLLM 0.32's
``vllm/parser/qwen3.py``, ``seed_oss.py``, ``mimo.py``, ``step3p5.py``)::

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>
    </tool_call>

Parameter values are text (one wrapping newline on each side is markup), typed by the tool's
schema; ``mimo`` keeps them verbatim. ``<function=`` also opens a call without ``<tool_call>``.
"""

from __future__ import annotations

import functools
import json
import re

import msgspec

from vllm_frontend.chat.engine.calls import EngineToolParser
from vllm_frontend.chat.engine.grammar import Grammar, Kind, State, Step

__all__ = [
    "MiMoToolParser",
    "Qwen3XmlToolParser",
    "SeedOssToolParser",
    "Step3p5ToolParser",
    "qwen3_grammar",
]

_PARAM = re.compile(
    r"<\s*parameter\s*=\s*([^>]*)>(.*?)(?:<\s*/\s*parameter\s*>|(?=<\s*parameter\s*=))", re.DOTALL
)
_OPEN_PARAM = re.compile(r"<\s*parameter\s*=\s*([^>]+)>(.*)$", re.DOTALL)


def _unwrap(value: str) -> str:
    """Drop one leading and one trailing newline."""
    if value.startswith("\n"):
        value = value[1:]
    if value.endswith("\n"):
        value = value[:-1]
    return value


def _params(raw: str, partial: bool, unwrap: bool) -> str:
    params: dict[str, object] = {}
    for m in _PARAM.finditer(raw):
        params[m.group(1)] = _unwrap(m.group(2)) if unwrap else m.group(2)
    if partial:
        last = _OPEN_PARAM.search(_PARAM.sub("", raw))
        if last and last.group(1):
            params[last.group(1)] = _unwrap(last.group(2)) if unwrap else last.group(2)
    return json.dumps(params, ensure_ascii=False)


def qwen3_arguments(raw: str, partial: bool) -> str:
    """``<parameter=NAME>VALUE</parameter>`` tags as a JSON object of strings."""
    return _params(raw, partial, unwrap=True)


def mimo_arguments(raw: str, partial: bool) -> str:
    """:func:`qwen3_arguments` with the values verbatim."""
    return _params(raw, partial, unwrap=False)


_ARG = (Kind.ARGS,)


@functools.cache
def qwen3_grammar(
    name: str = "qwen3",
    think: tuple[str, str] = ("<think>", "</think>"),
    tool: tuple[str, str] = ("<tool_call>", "</tool_call>"),
    boundaries: frozenset[str] = frozenset(("<|im_start|>", "<|im_end|>")),
) -> Grammar:
    """The Qwen3 grammar with the given reasoning and tool-call wrappers."""
    R, C, P, N, A, B = (
        State.REASONING,
        State.CONTENT,
        State.TOOL_PREAMBLE,
        State.TOOL_NAME,
        State.TOOL_ARGS,
        State.TOOL_BETWEEN,
    )
    wrappers = {"THINK_START": think[0], "THINK_END": think[1]}
    wrappers |= {"TOOL_START": tool[0], "TOOL_END": tool[1]}
    return Grammar(
        name=name,
        initial=R,
        wait_for_reasoning=True,
        turn_boundary_tokens=boundaries,
        terminals={
            **wrappers,
            "FUNC_PREFIX": "<function=",
            "FUNC_END": "</function>",
            "PARAM_START": "<parameter=",
            "PARAM_END": "</parameter>",
            "CLOSE_ANGLE": ">",
        },
        token_terminals=wrappers,
        steps={
            (R, "THINK_START"): Step(R),
            (R, "THINK_END"): Step(C, (Kind.REASONING_END,)),
            (C, "THINK_END"): Step(C),
            (R, "TOOL_START"): Step(P, (Kind.REASONING_END, Kind.CALL_START)),
            (C, "TOOL_START"): Step(P, (Kind.REASONING_END, Kind.CALL_START)),
            (C, "FUNC_PREFIX"): Step(N, (Kind.CALL_START,)),
            (P, "TOOL_END"): Step(C, (Kind.CALL_END,)),
            (P, "FUNC_PREFIX"): Step(N),
            (N, "CLOSE_ANGLE"): Step(A),
            (N, "FUNC_END"): Step(B, (Kind.CALL_END,)),
            (A, "FUNC_END"): Step(B, (Kind.CALL_END,)),
            (A, "PARAM_START"): Step(A, _ARG),
            (A, "PARAM_END"): Step(A, _ARG),
            (B, "TOOL_END"): Step(C),
            (B, "TOOL_START"): Step(P, (Kind.CALL_START,)),
            (B, "FUNC_PREFIX"): Step(N, (Kind.CALL_START,)),
        },
        arg_converter=qwen3_arguments,
        json_args=False,
        strip_trailing_reasoning_whitespace=False,
    )


class Qwen3XmlToolParser(EngineToolParser):
    """``qwen3_coder`` / ``qwen3_xml``: Qwen3-Coder's XML calls."""

    name = "qwen3_coder"
    GRAMMAR = qwen3_grammar()


class SeedOssToolParser(EngineToolParser):
    """``seed_oss``: the Qwen3 grammar with ``<seed:…>`` wrappers."""

    name = "seed_oss"
    GRAMMAR = qwen3_grammar(
        "seed_oss",
        ("<seed:think>", "</seed:think>"),
        ("<seed:tool_call>", "</seed:tool_call>"),
        frozenset(("<seed:bos>", "<seed:eos>")),
    )


class MiMoToolParser(EngineToolParser):
    """``mimo``: the Qwen3 grammar, parameter values verbatim."""

    name = "mimo"
    GRAMMAR = msgspec.structs.replace(qwen3_grammar("mimo"), arg_converter=mimo_arguments)


class Step3p5ToolParser(EngineToolParser):
    """``step3p5``: the Qwen3 grammar, trailing reasoning whitespace stripped."""

    name = "step3p5"
    GRAMMAR = msgspec.structs.replace(
        qwen3_grammar("step3p5"), strip_trailing_reasoning_whitespace=True
    )

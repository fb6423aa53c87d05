"""MiniMax M2's tool calls (vLLM 0.32's ``vllm/parser/minimax_m2.py``)::

    <minimax:tool_call><invoke name="get_weather">
    <parameter name="city">Seattle</parameter>
    </invoke></minimax:tool_call>

Each ``<invoke>`` is a call (the name quoted either way or bare); parameter values are verbatim
text typed by the tool's schema; calls to tools the request does not have are dropped.
"""

from __future__ import annotations

import functools
import json
import re

from vllm_frontend.chat.engine.calls import EngineToolParser
from vllm_frontend.chat.engine.grammar import Grammar, Kind, State, Step

__all__ = ["MiniMaxM2ToolParser", "minimax_m2_grammar"]

_NAME = r"(?:\"(?P<dq>[^\"]*)\"|'(?P<sq>[^']*)'|(?P<bare>[^>\s]+))"
_PARAM = re.compile(
    r"<\s*parameter\s+name\s*=\s*" + _NAME + r"\s*>(?P<value>.*?)"
    r"(?:<\s*/\s*parameter\s*>|(?=<\s*parameter\s+name\s*=))",
    re.DOTALL,
)
_OPEN_PARAM = re.compile(r"<\s*parameter\s+name\s*=\s*" + _NAME + r"\s*>(?P<value>.*)$", re.DOTALL)


def _param_name(m: re.Match[str]) -> str:
    return (m.group("dq") or m.group("sq") or m.group("bare") or "").strip()


def minimax_arguments(raw: str, partial: bool) -> str:
    """``<parameter name="K">V</parameter>`` tags as a JSON object of strings."""
    params: dict[str, object] = {}
    for m in _PARAM.finditer(raw):
        if name := _param_name(m):
            params[name] = m.group("value")
    if partial:
        last = _OPEN_PARAM.search(_PARAM.sub("", raw))
        if last and (name := _param_name(last)):
            params[name] = last.group("value")
    return json.dumps(params, ensure_ascii=False)


@functools.cache
def minimax_m2_grammar() -> Grammar:
    """The MiniMax M2 grammar."""
    R, C, P, N, A, B = (
        State.REASONING,
        State.CONTENT,
        State.TOOL_PREAMBLE,
        State.TOOL_NAME,
        State.TOOL_ARGS,
        State.TOOL_BETWEEN,
    )
    wrappers = {
        "THINK_START": "<think>",
        "THINK_END": "</think>",
        "TOOL_START": "<minimax:tool_call>",
        "TOOL_END": "</minimax:tool_call>",
    }
    invokes = ("INVOKE_PREFIX_DQ", "INVOKE_PREFIX_SQ", "INVOKE_PREFIX_UNQUOTED")
    name_ends = ("NAME_END_DQ", "NAME_END_SQ", "NAME_END_UNQUOTED")
    steps: dict[tuple[State, str], Step] = {
        (R, "THINK_START"): Step(R),
        (R, "THINK_END"): Step(C, (Kind.REASONING_END,)),
        (C, "THINK_END"): Step(C),
        (R, "TOOL_START"): Step(P, (Kind.REASONING_END,)),
        (C, "TOOL_START"): Step(P),
        (A, "PARAM_START"): Step(A, (Kind.ARGS,)),
        (A, "PARAM_END"): Step(A, (Kind.ARGS,)),
        (P, "TOOL_END"): Step(C),
        (B, "TOOL_END"): Step(C),
        (C, "TOOL_END"): Step(C),
        (A, "INVOKE_END"): Step(B, (Kind.CALL_END,)),
    }
    for state in (C, P, B):
        for invoke in invokes:
            steps[(state, invoke)] = Step(N, (Kind.CALL_START,))
    for end in name_ends:
        steps[(N, end)] = Step(A)
    return Grammar(
        name="minimax_m2",
        initial=R,
        wait_for_reasoning=True,
        terminals={
            **wrappers,
            "PARAM_START": "<parameter name=",
            "PARAM_END": "</parameter>",
            "INVOKE_PREFIX_DQ": '<invoke name="',
            "INVOKE_PREFIX_SQ": "<invoke name='",
            "INVOKE_PREFIX_UNQUOTED": "<invoke name=",
            "INVOKE_END": "</invoke>",
            "NAME_END_DQ": '">',
            "NAME_END_SQ": "'>",
            "NAME_END_UNQUOTED": ">",
        },
        token_terminals=wrappers,
        steps=steps,
        arg_converter=minimax_arguments,
        json_args=False,
        validate_tool_names=True,
    )


class MiniMaxM2ToolParser(EngineToolParser):
    """``minimax_m2``."""

    name = "minimax_m2"
    GRAMMAR = minimax_m2_grammar()

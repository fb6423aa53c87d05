"""Calls of custom tools' function shims and of namespace functions as Responses output items
and stream events, pinned against vLLM 0.32's own ``build_response_output_items``, its streaming
event functions (``emit_simple_tool_call_*``) and its shim-argument decoders."""

from __future__ import annotations

import asyncio
import json
import pathlib
from typing import Any

import pytest

from tests.server.test_responses import _app, _call
from vllm_frontend.server.responses_calls import custom_input, custom_input_prefix

pytestmark = pytest.mark.oracle

_CUSTOM = {"type": "custom", "name": "patch", "description": "Apply a patch"}
_NAMESPACE = {
    "type": "namespace",
    "name": "crm",
    "description": "CRM",
    "tools": [
        {"type": "function", "name": "lookup", "parameters": {"type": "object"}},
        {"type": "custom", "name": "note"},
        {"type": "function", "name": "patch"},
    ],
}
_FUNCTION = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
TOOLS = [_CUSTOM, _NAMESPACE, _FUNCTION]

# (the called name, its parameters): a custom tool's shim (its input with escapes and a
# non-ASCII character), shim arguments that hold no input string, a namespace function by its
# flat name, a plain function, a namespace's custom tool (shown to the model under no name)
CALLS = [
    ("patch", {"input": 'x = "1"\n\té'}),
    ("patch", {"input": ""}),
    ("patch", {"text": "no input"}),
    ("patch", {"input": 5}),
    ("crm__lookup", {"id": 7}),
    ("get_weather", {"city": "Paris"}),
    ("crm__note", {"input": "n"}),
    # a namespace function named as a custom tool: vLLM's stream reads its call as the custom
    # tool's (it looks the resolved name up), its non-streamed output as the function's
    ("crm__patch", {"input": "p"}),
]

IDS = {"id", "item_id", "call_id"}


def _scrub(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _scrub(v) for k, v in value.items() if k not in IDS | {"sequence_number"}}
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    return value


def _prefix(value: Any) -> str:
    return str(value.get("id") or value.get("item_id") or "").split("_")[0]


def _vllm_tools(tools: list[dict[str, Any]]) -> Any:
    from vllm.entrypoints.openai.responses.protocol import ResponsesRequest as VllmRequest

    return VllmRequest.model_validate({"input": "x", "tools": tools}).tools


def _text(name: str, parameters: dict[str, Any]) -> str:
    return json.dumps({"name": name, "parameters": parameters}, ensure_ascii=False)


@pytest.mark.parametrize(("name", "parameters"), CALLS)
def test_a_call_becomes_vllms_output_item(
    tiny_model: pathlib.Path, name: str, parameters: dict[str, Any]
) -> None:
    from vllm.entrypoints.generate.base.protocol import FunctionCall
    from vllm.entrypoints.openai.responses.utils import build_response_output_items

    app = _app(tiny_model, None, text=_text(name, parameters), tool_parser="llama3_json")
    body = {"model": "m", "input": "go", "tools": TOOLS, "max_output_tokens": 200}
    _, full = asyncio.run(_call(app, "POST", "/v1/responses", body))
    arguments = json.dumps(parameters, ensure_ascii=False)  # (as llama3_json reads the call)
    theirs = build_response_output_items(
        None, None, [FunctionCall(name=name, arguments=arguments)], tools=_vllm_tools(TOOLS)
    )
    expected = [item.model_dump(mode="json", by_alias=True) for item in theirs]
    assert _scrub(full["output"]) == _scrub(expected)
    assert [_prefix(i) for i in full["output"]] == [_prefix(i) for i in expected]


def _stream(app: Any, body: dict[str, Any]) -> list[dict[str, Any]]:
    _, events = asyncio.run(_call(app, "POST", "/v1/responses", {**body, "stream": True}))
    return list(events)


def _call_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    types = [e["type"] for e in events]
    start = types.index("response.output_item.added")
    end = len(types) - 1 - types[::-1].index("response.output_item.done")
    return events[start : end + 1]


@pytest.mark.parametrize(("name", "parameters"), CALLS)
def test_a_streamed_call_gets_vllms_events(
    tiny_model: pathlib.Path, name: str, parameters: dict[str, Any]
) -> None:
    from vllm.entrypoints.openai.responses.streaming_events import (
        SimpleStreamingState,
        emit_simple_tool_call_delta,
        emit_simple_tool_call_done,
        emit_simple_tool_call_open,
    )
    from vllm.entrypoints.openai.responses.utils import custom_tool_names
    from vllm.tool_parsers.utils import resolve_responses_tool_call_name

    app = _app(tiny_model, None, text=_text(name, parameters), tool_parser="llama3_json")
    body = {"model": "m", "input": "go", "tools": TOOLS, "max_output_tokens": 200}
    events = _stream(app, body)
    ours = _call_events(events)
    # the argument deltas the parser gives, as a plain function's stream carries them (the
    # function_call path, pinned against vLLM's server in tests/e2e/test_responses.py)
    plain = [{"type": "function", "name": name, "parameters": {"type": "object"}}]
    deltas = [
        e["delta"]
        for e in _stream(app, {**body, "tools": plain})
        if e["type"] == "response.function_call_arguments.delta"
    ]
    assert "".join(deltas) == json.dumps(parameters, ensure_ascii=False)
    tools = _vllm_tools(TOOLS)
    resolved = resolve_responses_tool_call_name(name, tools)
    custom = resolved.name in custom_tool_names(tools)
    state = SimpleStreamingState()
    theirs = emit_simple_tool_call_open(state, resolved.name, 0, resolved.namespace, custom, "c")
    for delta in deltas:
        theirs += emit_simple_tool_call_delta(state, delta)
    theirs += emit_simple_tool_call_done(state)
    expected = [e.model_dump(mode="json", by_alias=True) for e in theirs]
    for event in expected:  # vLLM's server leaves out the in-progress call item's created_by
        if isinstance(event.get("item"), dict):
            event["item"].pop("created_by", None)
    assert _scrub(ours) == _scrub(expected)
    assert [_prefix(e.get("item") or e) for e in ours] == [
        _prefix(e.get("item") or e) for e in expected
    ]
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert events[-1]["response"]["output"] == done


ARGUMENTS = [
    json.dumps({"input": "print('hi')\n\tx = \"y\" é \U0001f600"}),
    json.dumps({"input": "\U0001f600x"}),  # escaped as a surrogate pair
    json.dumps({"input": "a\\b", "x": [1, 2.5, True, None]}),
    json.dumps({"x": 1, "input": "zz"}),
    '{"input": 5}',
    "[1,2]",
    "bare text",
    '{"input": "a"} tail',
    '{"input":"a"}}',
    '{"input":"a"}\n ',
    '{"input":"a"}{}',
    '  {"input":"q"}',
    '{"input": "ab", "n": -1.5e3, "t": tru',
]


@pytest.mark.parametrize("arguments", ARGUMENTS)
def test_shim_arguments_decode_like_vllm(arguments: str) -> None:
    from vllm.entrypoints.openai.responses.utils import (
        decode_custom_tool_input,
        decode_custom_tool_input_prefix,
    )

    for end in range(len(arguments) + 1):
        prefix = arguments[:end]
        assert custom_input_prefix(prefix) == decode_custom_tool_input_prefix(prefix), prefix
        assert custom_input(prefix) == decode_custom_tool_input(prefix), prefix

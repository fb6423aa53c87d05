"""A Responses request's input as chat messages and its tools as chat tools, pinned against
vLLM 0.32's own ``construct_input_messages`` and ``construct_tool_dicts`` over its parsed
``ResponsesRequest``."""

from __future__ import annotations

import json
from typing import Any

import pytest

from vllm_frontend.chat.messages import normalize_tools
from vllm_frontend.server import errors
from vllm_frontend.server.responses_input import chat_tools, input_messages
from vllm_frontend.server.responses_protocol import parse_responses_request

pytestmark = pytest.mark.oracle

TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "w",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
    {"type": "function", "name": "noop", "parameters": None, "strict": True},
]
CALL = {
    "type": "function_call",
    "call_id": "c1",
    "name": "get_weather",
    "arguments": '{"city": "Paris"}',
}
OUTPUT = {"type": "function_call_output", "call_id": "c1", "output": "sunny"}
REASONING = {
    "type": "reasoning",
    "summary": [],
    "content": [{"type": "reasoning_text", "text": "hmm"}],
}

INPUTS: list[Any] = [
    "Hello",
    [{"role": "user", "content": [{"type": "input_text", "text": "Hi"}]}],
    [{"role": "developer", "content": "Rules"}, {"role": "user", "content": "Go"}],
    [{"role": "user", "content": "Weather?"}, CALL, OUTPUT],
    [{"role": "user", "content": "x"}, REASONING, CALL, {**CALL, "call_id": "c2"}, OUTPUT],
    [{"role": "user", "content": "x"}, {"role": "assistant", "content": "Sure."}, CALL, OUTPUT],
    [
        {"role": "user", "content": "x"},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Partial"}],
        },
        REASONING,
    ],
    [REASONING, {"role": "user", "content": "x"}],
    [
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "sum"}]},
        {"role": "user", "content": "x"},
    ],
    [CALL, OUTPUT, {"role": "user", "content": "and then?"}],
]

CUSTOM_CALL = {"type": "custom_tool_call", "call_id": "c3", "name": "patch", "input": 'é\n"x"'}
CUSTOM_OUTPUT = {"type": "custom_tool_call_output", "call_id": "c3", "output": "done"}
NAMESPACED_CALL = {**CALL, "call_id": "c4", "namespace": "crm", "name": "lookup"}
INPUTS += [
    # a custom tool's call is a call of its function shim; a namespaced call is flattened
    [{"role": "user", "content": "x"}, CUSTOM_CALL, CUSTOM_OUTPUT],
    [{"role": "user", "content": "x"}, REASONING, CALL, CUSTOM_CALL, NAMESPACED_CALL, OUTPUT],
    [{"role": "assistant", "content": "Sure."}, CUSTOM_CALL, {**CUSTOM_CALL, "input": ""}],
    [CUSTOM_CALL, {**CUSTOM_OUTPUT, "output": ""}],
    [{**CUSTOM_CALL, "namespace": "crm", "id": "ctc_1"}, CUSTOM_OUTPUT],
]

# custom and namespace tools, as the model is shown them (function shims, flattened names)
MORE_TOOLS: list[Any] = [
    {"type": "custom", "name": "patch", "description": "Apply a patch"},
    {"type": "custom", "name": "free", "format": {"type": "text"}, "defer_loading": True},
    {
        "type": "namespace",
        "name": "crm",
        "description": "CRM tools",
        "tools": [
            {"type": "function", "name": "lookup", "description": "d", "strict": False},
            {"type": "custom", "name": "note"},
            {"type": "function", "name": "later", "defer_loading": True, "parameters": None},
        ],
    },
    {"type": "function", "name": "deferred", "defer_loading": True},
    {"type": "web_search"},
]


@pytest.mark.parametrize("request_input", INPUTS)
@pytest.mark.parametrize("instructions", [None, "Be brief."])
def test_messages_match_vllm(request_input: Any, instructions: str | None) -> None:
    from vllm.entrypoints.openai.responses.protocol import ResponsesRequest as VllmRequest
    from vllm.entrypoints.openai.responses.utils import construct_input_messages

    body = {"model": "m", "input": request_input, "instructions": instructions, "tools": TOOLS}
    raw = json.dumps(body).encode()  # vLLM's validators rewrite the dict they are given
    theirs = construct_input_messages(
        request_instructions=instructions,
        request_input=VllmRequest.model_validate(json.loads(raw)).input,
    )
    ours = input_messages(instructions, parse_responses_request(raw).input)
    assert _plain(ours) == _plain(theirs)


def test_previous_conversation_matches_vllm() -> None:
    from openai.types.responses import (
        ResponseOutputMessage,
        ResponseOutputText,
        ResponseReasoningItem,
    )
    from openai.types.responses.response_reasoning_item import Content
    from vllm.entrypoints.openai.responses.utils import construct_input_messages

    previous = [{"role": "system", "content": "old rules"}, {"role": "user", "content": "a"}]
    output = [
        ResponseReasoningItem(
            id="r", summary=[], type="reasoning", content=[Content(text="t", type="reasoning_text")]
        ),
        ResponseOutputMessage(
            id="m",
            role="assistant",
            status="completed",
            type="message",
            content=[ResponseOutputText(text="b", annotations=[], type="output_text")],
        ),
    ]
    theirs = construct_input_messages(
        request_instructions="new rules",
        request_input="c",
        prev_msg=[dict(m) for m in previous],
        prev_response_output=output,
    )
    ours = input_messages(
        "new rules", "c", [dict(m) for m in previous], [o.model_dump(mode="json") for o in output]
    )
    assert _plain(ours) == _plain(theirs)


@pytest.mark.parametrize("tools", [TOOLS, TOOLS + MORE_TOOLS], ids=["functions", "all"])
@pytest.mark.parametrize("choice", ["auto", "none", "required"])
def test_tools_match_vllm(choice: str, tools: list[Any]) -> None:
    from vllm.entrypoints.openai.responses.protocol import ResponsesRequest as VllmRequest
    from vllm.entrypoints.openai.responses.utils import construct_tool_dicts

    req = VllmRequest.model_validate({"input": "x", "tools": tools, "tool_choice": choice})
    theirs = construct_tool_dicts(req.tools, req.tool_choice)
    assert theirs is not None
    # vLLM's dump carries the chat tool model's defaults; the template sees the same values
    ours = chat_tools(tools, choice)
    assert normalize_tools(ours) == normalize_tools(theirs)
    assert len(theirs) == (2 if tools is TOOLS else 7)


# Tools no member of the SDK's tool union takes, and some every member but one refuses.
BAD_TOOLS: list[Any] = [
    {"type": "bogus"}, {"name": "f"}, {"type": "container"}, {"type": "custom"}, "x", None, 5,
    {"type": "function"}, {"type": "function", "name": 5}, {"type": "function", "name": "f",
    "strict": "x"}, {"type": "function", "name": "f", "parameters": []},
    {"type": "mcp"}, {"type": "mcp", "server_label": 1}, {"type": "file_search"},
    {"type": "computer_use_preview", "display_width": "1.5"}, {"type": "code_interpreter"},
    {"type": "namespace", "name": "n"}, {"type": "image_generation", "quality": "ultra"},
    {"type": "web_search", "search_context_size": "huge"}, {"type": "custom", "name": ["n"]},
]  # fmt: skip


def _vllm_report(body: Any) -> dict[str, Any]:
    import asyncio
    from types import SimpleNamespace

    from fastapi.exceptions import RequestValidationError
    from pydantic import ValidationError
    from vllm.entrypoints.openai.responses.protocol import ResponsesRequest as VllmRequest
    from vllm.entrypoints.serve.exception_handling.handlers.validation import (
        validation_exception_handler,
    )

    try:
        VllmRequest.model_validate(body, from_attributes=True)  # (as FastAPI validates a body)
    except ValidationError as e:
        errs = [{**err, "loc": ("body", *err["loc"])} for err in e.errors(include_url=False)]
        exc = RequestValidationError(errs)
    else:
        raise AssertionError(f"vLLM accepts {body!r}")
    req = SimpleNamespace(app=SimpleNamespace(state=SimpleNamespace(
        args=SimpleNamespace(log_error_stack=False))), state=SimpleNamespace())  # fmt: skip
    resp = asyncio.run(validation_exception_handler(req, exc))  # type: ignore[arg-type]
    return json.loads(resp.body)["error"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("tool", BAD_TOOLS, ids=range(len(BAD_TOOLS)))
def test_malformed_tools_get_vllms_full_report(tool: Any) -> None:
    """Found by a differential probe: vLLM's report for a tool lists every member of the SDK's
    tool union (27 errors for an unknown type); ours listed the function tool's and the named
    member's only."""
    body = {"model": "m", "input": "hi", "tools": [{"type": "function", "name": "ok"}, tool]}
    with pytest.raises(errors.ApiError) as caught:
        parse_responses_request(json.dumps(body).encode())
    _, _, message, param = errors.classify(caught.value)
    expected = _vllm_report(body)
    assert (message, param) == (expected["message"], expected["param"])


# Items no member of the SDK's input item union takes: vLLM reports every member (200-odd
# errors, the first ten listed); a bad content part (not modelled) keeps our one-line reason.
BAD_ITEMS: list[Any] = [
    {"role": "bogus", "content": "x"}, {"role": "user", "content": None}, {"role": "tool",
    "content": "x"}, {"content": "x"}, {"role": "developer", "content": 5},
    {"role": "user", "content": "x", "type": "bogus"}, {"type": "message", "role": "assistant",
    "content": None}, 5, "x", None, [1], {},
    {"type": "function_call", "call_id": "c", "arguments": "{}"},
    {"type": "function_call", "call_id": 5, "name": "n", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c"},
    {"type": "custom_tool_call", "call_id": "c", "name": "n"},
    {"type": "custom_tool_call", "call_id": "c", "name": "n", "input": 5},
    {"type": "custom_tool_call_output", "call_id": "c"},
    {"type": "additional_tools", "role": "developer"}, {"type": "additional_tools", "tools": []},
    {"type": "reasoning", "id": "r"}, {"type": "item_reference", "id": 5},
]  # fmt: skip


@pytest.mark.parametrize("item", BAD_ITEMS, ids=range(len(BAD_ITEMS)))
def test_malformed_items_get_vllms_full_report(item: Any) -> None:
    """Found by a differential probe (and left by earlier ones): ours named the one rule the
    item breaks where vLLM lists every member's errors."""
    body = {"model": "m", "input": [{"role": "user", "content": "ok"}, item]}
    with pytest.raises(errors.ApiError) as caught:
        parse_responses_request(json.dumps(body).encode())
        input_messages(None, body["input"])
    _, _, message, param = errors.classify(caught.value)
    expected = _vllm_report(body)
    assert (message, param) == (expected["message"], expected["param"])


@pytest.mark.parametrize(
    "tool",
    [{"type": "web_search_preview", "search_context_size": None}, {"type": "mcp", "server_label":
     "s", "require_approval": "never", "headers": {"a": "b"}}, {"type": "function", "name": "f",
     "strict": "true", "parameters": None, "extra": 1}, {"type": "computer_use_preview",
     "display_height": "2", "display_width": 1.0, "environment": "mac"},
     {"type": "namespace", "name": "n", "description": "d", "tools": []},
     {"type": "web_search_preview", "name": 3}],
)  # fmt: skip
def test_tools_some_member_takes_are_served(tool: Any) -> None:
    from vllm.entrypoints.openai.responses.protocol import ResponsesRequest as VllmRequest

    body = {"model": "m", "input": "hi", "tools": [tool]}
    VllmRequest.model_validate(body)
    assert parse_responses_request(json.dumps(body).encode()).tools


def _plain(messages: Any) -> Any:
    out = []
    for m in messages:
        m = {k: v for k, v in dict(m).items()}
        if "tool_calls" in m:
            m["tool_calls"] = [dict(c, function=dict(c["function"])) for c in m["tool_calls"]]
        if isinstance(m.get("content"), list):
            m["content"] = [dict(p) for p in m["content"]]
        out.append(m)
    return out

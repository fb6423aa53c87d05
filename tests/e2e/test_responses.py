"""Differential tests of the Responses API: the same ``client.responses`` calls (the official
``openai`` SDK) to our frontend and to vLLM's own Python frontend, each in front of a fresh
engine of the same build and arguments, give the same responses and stream events.

Both servers run with ``VLLM_ENABLE_RESPONSES_API_STORE=1`` (store, ``previous_response_id``,
background mode) and the ``llama3_json`` tool parser. Compared is everything but what is
random: ids (``id``, ``item_id``, ``call_id``, ``previous_response_id``) and timestamps.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.e2e.test_differential import assert_same as _assert_same_json
from tests.support.shared_stacks import ToolServers

pytestmark = pytest.mark.engine

IGNORED = {"id", "item_id", "call_id", "created_at", "previous_response_id"}
TOOLS: list[Any] = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }
]


@pytest.fixture(scope="module")
def sdk(tool_servers: ToolServers) -> Iterator[dict[str, openai.OpenAI]]:
    """SDK clients of our server and vLLM's (the shared tool-parser stack, with the store)."""
    with tool_servers.openai_clients(timeout=120) as clients:
        yield clients


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in IGNORED}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def assert_same(ours: Any, ref: Any) -> None:
    """Both JSON values agree, ids and timestamps aside."""
    _assert_same_json(_strip(ours), _strip(ref))


def create(client: openai.OpenAI, **kwargs: Any) -> dict[str, Any]:
    """``client.responses.create`` parsed by the SDK; the raw JSON body."""
    raw = client.responses.with_raw_response.create(**kwargs)
    raw.parse()  # the SDK reads it
    body: dict[str, Any] = raw.http_response.json()
    return body


def both(sdk: dict[str, openai.OpenAI], **kwargs: Any) -> dict[str, Any]:
    """The same create call to both; asserts the bodies agree; returns vLLM's."""
    ours = create(sdk["ours"], model=model_of(sdk), **kwargs)
    ref = create(sdk["vllm"], model=model_of(sdk), **kwargs)
    assert_same(ours, ref)
    return ref


def model_of(sdk: dict[str, openai.OpenAI]) -> str:
    """The served model name."""
    return sdk["vllm"].models.list().data[0].id


def stream_events(client: openai.OpenAI, model: str, **kwargs: Any) -> list[dict[str, Any]]:
    """A streamed create, as the SDK's parsed events."""
    with client.responses.create(model=model, stream=True, **kwargs) as stream:
        return [event.model_dump(mode="json") for event in stream]


def _stream_summary(events: list[dict[str, Any]]) -> dict[str, Any]:
    # Engine steps may coalesce differently: the deltas are joined per item, the rest is
    # compared event by event.
    out: list[Any] = []
    for event in events:
        if event["type"].endswith(".delta"):
            if out and out[-1]["type"] == event["type"]:
                out[-1]["delta"] += event["delta"]
                out[-1]["logprobs"] = (out[-1].get("logprobs") or []) + (
                    event.get("logprobs") or []
                )
                continue
            event = dict(event)
        out.append({k: v for k, v in event.items() if k != "sequence_number"})
    return {"events": out, "sequence_numbers": [e["sequence_number"] for e in events]}


def assert_same_stream(ours: list[dict[str, Any]], ref: list[dict[str, Any]]) -> None:
    """Same events in the same order (deltas joined) and consecutive sequence numbers."""
    for events in (ours, ref):
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
    a, b = _stream_summary(ours), _stream_summary(ref)
    a.pop("sequence_numbers")
    b.pop("sequence_numbers")
    assert_same(a, b)


def test_string_input(sdk: dict[str, openai.OpenAI]) -> None:
    ref = both(sdk, input="Hello, my name is", max_output_tokens=8, temperature=0)
    assert ref["status"] == "incomplete"
    assert ref["output"][0]["type"] == "message"


def test_items_instructions_and_no_store(sdk: dict[str, openai.OpenAI]) -> None:
    both(
        sdk,
        input=[
            {"role": "user", "content": [{"type": "input_text", "text": "Hi there"}]},
            {"role": "assistant", "content": "Hello!"},
            {"role": "user", "content": "Tell me more"},
        ],
        instructions="Answer briefly.",
        max_output_tokens=6,
        temperature=0,
        store=False,
    )


def test_function_tools_with_call_history(sdk: dict[str, openai.OpenAI]) -> None:
    both(
        sdk,
        input=[
            {"role": "user", "content": "Weather in Paris?"},
            {
                "type": "function_call",
                "call_id": "call_1",
                "name": "get_weather",
                "arguments": '{"city": "Paris"}',
            },
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny, 21C"},
        ],
        tools=TOOLS,
        max_output_tokens=8,
        temperature=0,
    )


# a namespace function the grammar can only call with {} (its flat name chosen by its local
# one), and a custom tool (its one-string shim) forced by a named choice
NAMESPACE_TOOLS: list[Any] = [
    {
        "type": "namespace",
        "name": "crm",
        "description": "CRM tools",
        "tools": [
            {
                "type": "function",
                "name": "ping",
                "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
                "strict": True,
            }
        ],
    }
]
CUSTOM_TOOLS: list[Any] = [{"type": "custom", "name": "patch", "description": "Apply a patch"}]
FORCED_CALLS = [
    pytest.param(NAMESPACE_TOOLS, {"type": "function", "name": "ping"}, id="namespace"),
    pytest.param(CUSTOM_TOOLS, {"type": "custom", "name": "patch"}, id="custom"),
    pytest.param(NAMESPACE_TOOLS + CUSTOM_TOOLS, "required", id="required"),
]


@pytest.mark.parametrize(("tools", "choice"), FORCED_CALLS)
def test_forced_calls_of_namespace_and_custom_tools(
    sdk: dict[str, openai.OpenAI], tools: list[Any], choice: Any
) -> None:
    model = model_of(sdk)
    kwargs: dict[str, Any] = {
        "input": [{"role": "user", "content": "Go"}],
        "tools": tools,
        "tool_choice": choice,
        "max_output_tokens": 24,
        "temperature": 0,
    }
    ref = both(sdk, **kwargs)
    kinds = {item["type"] for item in ref["output"]}
    if choice == "required":  # the model picks its calls (cut off here: no item, as vLLM)
        assert kinds <= {"function_call", "custom_tool_call"}
    else:
        assert kinds == {"function_call" if choice["type"] == "function" else "custom_tool_call"}
    ours, theirs = (stream_events(sdk[n], model, **kwargs) for n in ("ours", "vllm"))
    assert_same_stream(ours, theirs)


def test_a_custom_call_then_its_output_by_previous_response_id(
    sdk: dict[str, openai.OpenAI],
) -> None:
    # the stored response's custom_tool_call is left out of the next prompt (vLLM keeps only
    # the previous output's messages); its output comes as a custom_tool_call_output item
    model = model_of(sdk)
    bodies = {}
    for name, client in sdk.items():
        first = create(
            client,
            model=model,
            input="Fix it",
            tools=CUSTOM_TOOLS,
            tool_choice={"type": "custom", "name": "patch"},
            max_output_tokens=24,
            temperature=0,
        )
        [call] = first["output"]
        assert call["type"] == "custom_tool_call"
        second = create(
            client,
            model=model,
            input=[{"type": "custom_tool_call_output", "call_id": call["call_id"], "output": "ok"}],
            tools=CUSTOM_TOOLS,
            max_output_tokens=6,
            temperature=0,
            previous_response_id=first["id"],
        )
        bodies[name] = [first, second]
    assert_same(bodies["ours"], bodies["vllm"])


def test_custom_tool_call_history(sdk: dict[str, openai.OpenAI]) -> None:
    both(
        sdk,
        input=[
            {"role": "user", "content": "Fix it"},
            {"type": "custom_tool_call", "call_id": "c1", "name": "patch", "input": "x = 1\n"},
            {"type": "custom_tool_call_output", "call_id": "c1", "output": "applied"},
        ],
        tools=CUSTOM_TOOLS,
        max_output_tokens=8,
        temperature=0,
    )


def test_reasoning_item_input_and_sampling(sdk: dict[str, openai.OpenAI]) -> None:
    both(
        sdk,
        input=[
            {
                "type": "reasoning",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": "Think first."}],
            },
            {"role": "user", "content": "Go"},
        ],
        max_output_tokens=5,
        temperature=0.8,
        top_p=0.9,
        extra_body={"seed": 7},
    )


def test_logprobs(sdk: dict[str, openai.OpenAI]) -> None:
    both(
        sdk,
        input="Count: one, two,",
        include=["message.output_text.logprobs"],
        top_logprobs=2,
        max_output_tokens=4,
        temperature=0,
    )


def test_previous_response_chain_and_retrieve(sdk: dict[str, openai.OpenAI]) -> None:
    model = model_of(sdk)
    bodies = {}
    for name, client in sdk.items():
        first = create(
            client,
            model=model,
            input="Remember: blue.",
            max_output_tokens=4,
            temperature=0,
            instructions="Be terse.",
        )
        second = create(
            client,
            model=model,
            input="What colour?",
            max_output_tokens=4,
            temperature=0,
            previous_response_id=first["id"],
        )
        assert second["previous_response_id"] == first["id"]
        third = create(
            client,
            model=model,
            input="Again?",
            max_output_tokens=4,
            temperature=0,
            previous_response_id=second["id"],
        )
        got = client.responses.with_raw_response.retrieve(second["id"]).http_response.json()
        assert got == second
        bodies[name] = [first, second, third]
    assert_same(bodies["ours"], bodies["vllm"])


def test_store_false_is_not_retrievable(sdk: dict[str, openai.OpenAI]) -> None:
    model = model_of(sdk)
    errors = {}
    for name, client in sdk.items():
        body = create(client, model=model, input="x", max_output_tokens=2, store=False)
        with pytest.raises(openai.NotFoundError) as info:
            client.responses.retrieve(body["id"])
        errors[name] = _error(info.value, body["id"])
    assert errors["ours"] == errors["vllm"]


def test_streaming_text(sdk: dict[str, openai.OpenAI]) -> None:
    model = model_of(sdk)
    kwargs: dict[str, Any] = {
        "input": "Stream me a story",
        "max_output_tokens": 10,
        "temperature": 0,
    }
    ours, ref = (stream_events(sdk[n], model, **kwargs) for n in ("ours", "vllm"))
    types = [e["type"] for e in ref]
    assert types[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert types[-1] == "response.completed"
    assert_same_stream(ours, ref)


def test_streaming_with_logprobs_and_tools(sdk: dict[str, openai.OpenAI]) -> None:
    model = model_of(sdk)
    kwargs: dict[str, Any] = {
        "input": [{"role": "user", "content": "Weather?"}],
        "tools": TOOLS,
        "include": ["message.output_text.logprobs"],
        "top_logprobs": 1,
        "max_output_tokens": 6,
        "temperature": 0,
    }
    ours, ref = (stream_events(sdk[n], model, **kwargs) for n in ("ours", "vllm"))
    assert_same_stream(ours, ref)


def test_background_retrieve_and_cancel(sdk: dict[str, openai.OpenAI]) -> None:
    model = model_of(sdk)
    finals, cancels = {}, {}
    for name, client in sdk.items():
        queued = create(
            client,
            model=model,
            input="Background job",
            max_output_tokens=4,
            temperature=0,
            background=True,
        )
        assert queued["status"] == "queued"
        deadline = time.monotonic() + 60
        while True:
            got = client.responses.with_raw_response.retrieve(queued["id"]).http_response.json()
            if got["status"] != "queued" or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        finals[name] = got
        with pytest.raises(openai.BadRequestError) as info:
            client.responses.cancel(queued["id"])
        cancels[name] = _error(info.value, queued["id"])
    assert_same(finals["ours"], finals["vllm"])
    assert cancels["ours"] == cancels["vllm"]


def _error(exc: openai.APIStatusError, *ids: str) -> tuple[int, Any]:
    body = exc.response.json()
    text = exc.response.text
    for i in ids:
        text = text.replace(i, "<id>")
    return exc.status_code, (body.get("error") or {}).get("type"), text


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"input": "x", "previous_response_id": "resp_unknown"}, id="unknown-prev"),
        pytest.param({"input": "x", "background": True, "store": False}, id="background-no-store"),
        pytest.param({"input": "x", "tool_choice": "required"}, id="required-without-tools"),
        pytest.param({"input": "x", "extra_body": {"prompt": {"id": "p"}}}, id="prompt"),
        pytest.param({"input": "x", "max_output_tokens": 5000}, id="max-output-tokens"),
        pytest.param({"input": "hello " * 1100}, id="prompt-too-long"),
        pytest.param(
            {"input": "x", "tool_choice": {"type": "function", "name": "nope"}, "tools": TOOLS},
            id="unknown-named-tool",
        ),
    ],
)
def test_errors(sdk: dict[str, openai.OpenAI], kwargs: dict[str, Any]) -> None:
    model = model_of(sdk)
    got = {}
    for name, client in sdk.items():
        with pytest.raises(openai.APIStatusError) as info:
            client.responses.create(model=model, **kwargs)
        got[name] = _error(info.value)
    assert got["ours"] == got["vllm"]


def test_unknown_model(sdk: dict[str, openai.OpenAI]) -> None:
    got = {}
    for name, client in sdk.items():
        with pytest.raises(openai.NotFoundError) as info:
            client.responses.create(model="no-such-model", input="x")
        got[name] = _error(info.value)
    assert got["ours"] == got["vllm"]


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"input": 5}, id="input-number"),
        pytest.param({}, id="no-input"),
        pytest.param({"input": [{"type": "bogus"}]}, id="unknown-item"),
        pytest.param({"input": [{"foo": 1}]}, id="shapeless-item"),
        pytest.param({"input": ["text"]}, id="string-item"),
    ],
)
def test_bad_input_shapes(sdk: dict[str, openai.OpenAI], body: dict[str, Any]) -> None:
    # vLLM validates items against the SDK's whole item union (hundreds of error lines): the
    # status, error type and param agree; the message is ours when an item is at fault.
    got = {}
    for name, client in sdk.items():
        with pytest.raises(openai.BadRequestError) as info:
            client.post("/responses", body={"model": model_of(sdk), **body}, cast_to=object)
        error = info.value.response.json()["error"]
        got[name] = (info.value.status_code, error["type"], error["param"])
        if "input" not in body or not isinstance(body["input"], list):
            got[name] += (error["message"],)
    assert got["ours"] == got["vllm"]


def test_background_stream_replay(sdk: dict[str, openai.OpenAI]) -> None:
    model = model_of(sdk)
    replays = {}
    for name, client in sdk.items():
        events = stream_events(
            client,
            model,
            input="Background stream",
            max_output_tokens=5,
            temperature=0,
            background=True,
        )
        response_id = events[0]["response"]["id"]
        with client.responses.retrieve(response_id, stream=True, starting_after=1) as stream:
            again = [event.model_dump(mode="json") for event in stream]
        assert again == events[2:]
        replays[name] = events
    assert_same_stream(replays["ours"], replays["vllm"])

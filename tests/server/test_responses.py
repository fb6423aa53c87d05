"""The Responses routes over a scripted engine client (no engine process): the event sequence
of a stream, the store, background mode, cancel and the errors of each route. Their agreement
with vLLM's frontend on a real engine is tests/e2e/test_responses.py's job."""

from __future__ import annotations

import asyncio
import json
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.server.test_coalesced_outputs import ScriptedClient
from tests.support.generation_app import generation_context
from tests.support.responses import body as body_of
from tests.support.shared_tokenizer import shared_tokenizer
from vllm_frontend.chat.output_parser import OutputParsers
from vllm_frontend.engine.errors import EngineDeadError
from vllm_frontend.server.app import App, ServerSettings
from vllm_frontend.server.responses import ResponsesHandler
from vllm_frontend.server.responses_protocol import parse_responses_request
from vllm_frontend.server.responses_store import ResponseStore
from vllm_frontend.server.transport import PushedStreamingResponse, Request, Response


def _app(
    model: pathlib.Path,
    store: ResponseStore | None,
    text: str | None = None,
    tool_parser: str | None = None,
    client_type: type[ScriptedClient] = ScriptedClient,
) -> App:
    tokenizer = shared_tokenizer(model)
    client = client_type(tokenizer, False)
    if text is not None:  # the engine generates this text instead
        client.ids = tokenizer.encode(text, add_special_tokens=False)
    ctx = generation_context(model, client, max_model_len=512, tokenizer=tokenizer)
    app = App(ServerSettings(served_model_names=["m"], max_model_len=512))
    parsers = OutputParsers.for_tokenizer(
        tokenizer.token_to_id, tool_call_parser=tool_parser, enable_auto_tool_choice=True
    )
    handler = ResponsesHandler(ctx, parse_responses_request, parsers, store=store)
    for (method, path), route in handler.routes().items():
        app.route(method, path, route, json_body=path == "/v1/responses")
    return app


async def _call(app: App, method: str, path: str, body: Any = None, query: bytes = b"") -> Any:
    data = b"" if body is None else json.dumps(body).encode()
    request = Request(method, path, query, {b"content-type": b"application/json"}, data)
    response = await app(request)
    raw = (await body_of(response)).decode()
    if isinstance(response, PushedStreamingResponse):
        events = []
        for block in raw.strip().split("\n\n"):
            name, data_line = block.split("\n")
            event = json.loads(data_line.removeprefix("data: "))
            assert name == f"event: {event['type']}"
            events.append(event)
        return response.status, events
    return response.status, json.loads(raw)


def test_a_stream_emits_vllms_event_sequence(tiny_model: pathlib.Path) -> None:
    app = _app(tiny_model, None)
    body = {"model": "m", "input": "hi", "max_output_tokens": 5, "stream": True}
    status, events = asyncio.run(_call(app, "POST", "/v1/responses", body))
    assert status == 200
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    types = [e["type"] for e in events]
    assert types[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert set(types[4:-4]) == {"response.output_text.delta"}
    assert types[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    final = events[-1]["response"]
    assert final["status"] == "incomplete"
    assert final["output"] == [events[-2]["item"]]
    assert final["output"][0]["content"][0]["text"] == text
    assert final["usage"]["output_tokens"] == 5
    assert events[0]["response"]["status"] == "in_progress"


def test_full_response_matches_the_stream(tiny_model: pathlib.Path) -> None:
    app = _app(tiny_model, None)
    body = {"model": "m", "input": "hi", "max_output_tokens": 5}
    _, full = asyncio.run(_call(app, "POST", "/v1/responses", body))
    _, events = asyncio.run(_call(app, "POST", "/v1/responses", {**body, "stream": True}))
    streamed = events[-1]["response"]
    for response in (full, streamed):
        response.pop("id"), response.pop("created_at")
        for item in response["output"]:
            item.pop("id")
    assert full == streamed


def test_without_the_store_nothing_is_kept(tiny_model: pathlib.Path) -> None:
    app = _app(tiny_model, None)
    _, created = asyncio.run(_call(app, "POST", "/v1/responses", {"model": "m", "input": "x"}))
    status, error = asyncio.run(_call(app, "GET", f"/v1/responses/{created['id']}"))
    assert status == 404
    assert error["error"] == {
        "message": f"Response with id '{created['id']}' not found.",
        "type": "invalid_request_error",
        "param": "response_id",
        "code": 404,
    }
    status, error = asyncio.run(
        _call(app, "POST", "/v1/responses", {"model": "m", "input": "x", "background": True})
    )
    assert status == 400
    assert error["error"]["param"] == "background"
    assert "VLLM_ENABLE_RESPONSES_API_STORE=1" in error["error"]["message"]


def test_store_chains_retrieves_and_cancels(tiny_model: pathlib.Path) -> None:
    async def main() -> None:
        app = _app(tiny_model, ResponseStore())
        _, first = await _call(
            app, "POST", "/v1/responses", {"model": "m", "input": "x", "max_output_tokens": 3}
        )
        _, got = await _call(app, "GET", f"/v1/responses/{first['id']}")
        assert got == first
        status, second = await _call(
            app,
            "POST",
            "/v1/responses",
            {
                "model": "m",
                "input": "y",
                "max_output_tokens": 3,
                "previous_response_id": first["id"],
            },
        )
        assert status == 200 and second["previous_response_id"] == first["id"]
        status, error = await _call(app, "POST", f"/v1/responses/{first['id']}/cancel")
        assert (status, error["error"]["message"]) == (400, "Cannot cancel a synchronous response.")
        status, queued = await _call(
            app,
            "POST",
            "/v1/responses",
            {"model": "m", "input": "z", "background": True, "max_output_tokens": 3},
        )
        assert (status, queued["status"], queued["output"]) == (200, "queued", [])
        for _ in range(100):
            _, got = await _call(app, "GET", f"/v1/responses/{queued['id']}")
            if got["status"] != "queued":
                break
            await asyncio.sleep(0.01)
        assert got["status"] == "incomplete" and got["background"] is True

    asyncio.run(main())


def test_background_stream_replays_from_a_sequence_number(tiny_model: pathlib.Path) -> None:
    async def main() -> None:
        app = _app(tiny_model, ResponseStore())
        body = {
            "model": "m",
            "input": "x",
            "background": True,
            "stream": True,
            "max_output_tokens": 3,
        }
        _, events = await _call(app, "POST", "/v1/responses", body)
        response_id = events[0]["response"]["id"]
        _, again = await _call(app, "GET", f"/v1/responses/{response_id}", query=b"stream=true")
        assert again == events
        _, tail = await _call(
            app, "GET", f"/v1/responses/{response_id}", query=b"stream=true&starting_after=2"
        )
        assert tail == events[3:]

    asyncio.run(main())


class _DyingClient(ScriptedClient):
    """Sends two outputs, then the engine dies (as the engine client reports it)."""

    def add_request(self, request: Any) -> Any:
        outputs = self._outputs(request)[:2]

        async def die() -> AsyncIterator[Any]:
            for out in outputs:
                yield out
                await asyncio.sleep(0)
            raise EngineDeadError("engine core died (it sent ENGINE_CORE_DEAD)")

        return die()


def test_a_background_response_whose_engine_dies_fails(tiny_model: pathlib.Path) -> None:
    # vLLM's own server exits once its engine is dead (its background responses stay queued,
    # a replay waits for events that never come); ours lives on: the responses are failed, and
    # their streams are cut as a direct stream is (both servers cut that one)
    async def main() -> None:
        app = _app(tiny_model, ResponseStore(), client_type=_DyingClient)
        body = {"model": "m", "input": "x", "background": True, "max_output_tokens": 9}
        _, queued = await _call(app, "POST", "/v1/responses", body)
        with pytest.raises(EngineDeadError):
            await _call(app, "POST", "/v1/responses", {**body, "stream": True, "request_id": "r1"})
        streamed = "r1"
        for _ in range(100):
            _, got = await _call(app, "GET", f"/v1/responses/{queued['id']}")
            if got["status"] != "queued":
                break
            await asyncio.sleep(0.01)
        _, got_streamed = await _call(app, "GET", f"/v1/responses/{streamed}")
        assert (got["status"], got_streamed["status"]) == ("failed", "failed")
        with pytest.raises(EngineDeadError):
            await _call(app, "GET", f"/v1/responses/{streamed}", query=b"stream=true")
        status, error = await _call(app, "POST", f"/v1/responses/{streamed}/cancel")
        assert (status, error["error"]["message"]) == (400, "Cannot cancel a synchronous response.")

    asyncio.run(main())


@pytest.mark.parametrize(
    "body,status,param",
    [
        ({"input": "x", "previous_response_id": "resp_x"}, 404, "response_id"),
        ({"input": "x", "background": True, "store": False}, 400, "background"),
        ({"input": "x", "prompt": {"id": "p"}}, 400, "prompt"),
        ({"input": "x", "tool_choice": "required"}, 400, "tool_choice"),
        ({"input": 5}, 400, "body.input"),
        ({"input": [{"type": "bogus"}]}, 400, "body.input"),
        ({"input": ["text"]}, 400, "body.input"),
        ({"input": [{"type": "reasoning", "summary": [], "encrypted_content": "e"}]}, 400, "input"),
        ({"model": "other", "input": "x"}, 404, "model"),
    ],
)
def test_errors(tiny_model: pathlib.Path, body: dict[str, Any], status: int, param: str) -> None:
    app = _app(tiny_model, ResponseStore())
    got, error = asyncio.run(_call(app, "POST", "/v1/responses", {"model": "m", **body}))
    assert (got, error["error"]["param"], error["error"]["code"]) == (status, param, status)


def test_unknown_ids_on_get_and_cancel(tiny_model: pathlib.Path) -> None:
    app = _app(tiny_model, ResponseStore())
    for method, path in (("GET", "/v1/responses/resp_1"), ("POST", "/v1/responses/resp_1/cancel")):
        status, error = asyncio.run(_call(app, method, path))
        assert status == 404
        assert error["error"]["message"] == "Response with id 'resp_1' not found."


def test_the_store_is_bounded_and_keeps_running_responses() -> None:
    store = ResponseStore(max_entries=2)
    store.put({"id": "a", "status": "queued"})
    store.put({"id": "b", "status": "completed"})
    store.put({"id": "c", "status": "completed"})
    assert store.get("a") is not None
    assert store.get("b") is None
    assert store.get("c") is not None


def test_conversations_of_requests_that_end_unstored_are_bounded() -> None:
    # A store request keeps its conversation before generating; a client that leaves (or a
    # failed generation) never stores the response, and vLLM keeps that conversation forever
    m = {"role": "user", "content": "hi"}
    store = ResponseStore(max_entries=2)
    store.put_messages("kept", [m])
    store.put_messages("bg", [m])
    store.put({"id": "bg", "status": "queued"})  # a background response: stored at once
    store.put({"id": "kept", "status": "completed"})
    for i in range(3):
        store.put_messages(f"left{i}", [m])
    assert store.messages("left0") is None
    assert store.messages("left1") == store.messages("left2") == [m]
    assert store.messages("kept") == store.messages("bg") == [m]


class _Recorder:
    """Stands in for HttpMetrics: keeps the handler label of each exchange."""

    def __init__(self) -> None:
        self.handlers: list[str] = []

    def observe(self, method: str, handler: str, *args: Any) -> None:
        self.handlers.append(handler)

    def observe_since(self, method: str, handler: str, *args: Any) -> None:
        self.handlers.append(handler)


def test_templated_routes_are_labelled_by_their_template() -> None:
    async def ok(request: Request) -> Response:
        return Response(request.path.encode())

    recorder = _Recorder()
    app = App(ServerSettings(served_model_names=["m"], max_model_len=8), recorder)  # type: ignore[arg-type]
    app.route("GET", "/v1/responses/{response_id}", ok)
    app.route("POST", "/v1/responses/{response_id}/cancel", ok)

    async def main() -> list[tuple[int, bytes]]:
        out = []
        for method, path in (
            ("GET", "/v1/responses/resp_1"),
            ("POST", "/v1/responses/r/cancel"),
            ("GET", "/v1/responses/a/b"),
            ("POST", "/v1/responses/r"),
        ):
            response = await app(Request(method, path, b"", {}, b""))
            if response.background is not None:
                response.background()
            out.append((response.status, response.body))
        return out

    assert asyncio.run(main()) == [
        (200, b"/v1/responses/resp_1"),
        (200, b"/v1/responses/r/cancel"),
        (404, b'{"detail":"Not Found"}'),
        (405, b'{"detail":"Method Not Allowed"}'),
    ]
    assert recorder.handlers == [
        "/v1/responses/{response_id}",
        "/v1/responses/{response_id}/cancel",
        "none",
        "none",  # a method the route lacks: partial match, as vLLM labels it
    ]


TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]
CALL_TEXT = '{"name": "get_weather", "parameters": {"city": "Paris"}}'


def test_tool_calls_become_function_call_items(tiny_model: pathlib.Path) -> None:
    app = _app(tiny_model, None, text=CALL_TEXT, tool_parser="llama3_json")
    body = {"model": "m", "input": "Weather?", "tools": TOOLS, "max_output_tokens": 100}
    _, full = asyncio.run(_call(app, "POST", "/v1/responses", body))
    [item] = full["output"]
    assert item["type"] == "function_call" and item["status"] == "completed"
    assert (item["name"], item["arguments"]) == ("get_weather", '{"city": "Paris"}')
    assert item["call_id"].startswith("chatcmpl-tool-") and item["id"].startswith("fc_")
    assert full["status"] == "incomplete"  # the scripted engine always stops on length
    _, events = asyncio.run(_call(app, "POST", "/v1/responses", {**body, "stream": True}))
    types = [e["type"] for e in events]
    assert types[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert types[-3:] == [
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    added = events[2]["item"]
    assert (added["type"], added["status"], added["arguments"]) == (
        "function_call",
        "in_progress",
        "",
    )
    # vLLM's server sends no created_by (tests/e2e/test_agent_api_fields.py, tools-required)
    assert "created_by" not in added and "created_by" not in events[-2]["item"]
    deltas = [e["delta"] for e in events if e["type"].endswith("arguments.delta")]
    assert "".join(deltas) == events[-3]["arguments"] == '{"city": "Paris"}'
    assert events[-1]["response"]["output"] == [events[-2]["item"]]

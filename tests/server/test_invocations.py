"""SageMaker's ``POST /invocations`` answers a chat body as ``/v1/chat/completions`` and a
completion body as ``/v1/completions`` (vLLM tries the chat request type first), and refuses
anything else with vLLM's message."""

from __future__ import annotations

import asyncio
import json
import pathlib
from typing import Any

from tests.server.test_kv_transfer_params import ConnectorClient
from tests.support.generation_app import generation_app
from tests.support.responses import body as body_of
from vllm_frontend.server.app import App
from vllm_frontend.server.sagemaker import invocations_handler
from vllm_frontend.server.transport import Request


def _app(model: pathlib.Path) -> App:
    app = generation_app(model, ConnectorClient(), max_model_len=128)
    routes = app._routes
    chat, completions = routes["/v1/chat/completions"]["POST"], routes["/v1/completions"]["POST"]
    app.route("POST", "/invocations", invocations_handler(chat, completions), json_body=True)
    return app


async def _post(app: App, path: str, raw: bytes) -> tuple[int, Any]:
    request = Request("POST", path, b"", {b"content-type": b"application/json"}, raw)
    response = await app(request)
    return response.status, json.loads(await body_of(response))


def _same(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert {k: v for k, v in a.items() if k not in ("id", "created", "kv_transfer_params")} == {
        k: v for k, v in b.items() if k not in ("id", "created", "kv_transfer_params")
    }


def test_chat_and_completion_bodies_go_to_their_routes(tiny_model: pathlib.Path) -> None:
    app = _app(tiny_model)
    for path, body in (
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
        ("/v1/completions", {"prompt": "hi"}),
    ):
        raw = json.dumps({"model": "m", "max_tokens": 3, **body}).encode()
        direct = asyncio.run(_post(app, path, raw))
        sagemaker = asyncio.run(_post(app, "/invocations", raw))
        assert direct[0] == sagemaker[0] == 200
        _same(direct[1], sagemaker[1])


def test_other_bodies_are_refused_as_vllm_refuses_them(tiny_model: pathlib.Path) -> None:
    app = _app(tiny_model)
    status, body = asyncio.run(_post(app, "/invocations", b'{"input": "hi"}'))
    assert status == 400
    assert body["error"]["message"] == (
        "Cannot find suitable handler for request. Expected one of: "
        "['ChatCompletionRequest', 'CompletionRequest']"
    )
    status, body = asyncio.run(_post(app, "/invocations", b"{nope"))
    assert status == 400 and body["error"]["message"].startswith("JSON decode error: ")

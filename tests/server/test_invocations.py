"""SageMaker's ``POST /invocations`` answers a chat body as ``/v1/chat/completions`` and a
completion body as ``/v1/completions`` (vLLM tries the chat request type first), and refuses
anything else with vLLM's message."""

from __future__ import annotations

import asyncio
import json
import pathlib
from typing import Any

import pytest

from tests.server.test_kv_transfer_params import ConnectorClient
from tests.support.generation_app import generation_app
from tests.support.responses import body as body_of
from vllm_frontend.server.app import App
from vllm_frontend.server.errors import ApiError
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
    for raw in (b'{"prompt": 5}', b'{"prompt": "hi", "max_tokens": "x"}', b"[]", b"5"):
        status, body = asyncio.run(_post(app, "/invocations", raw))
        assert status == 400
        assert body["error"]["message"] == (
            "Cannot find suitable handler for request. Expected one of: "
            "['ChatCompletionRequest', 'CompletionRequest']"
        )
    status, body = asyncio.run(_post(app, "/invocations", b"{nope"))
    assert status == 400 and body["error"]["message"].startswith("JSON decode error: ")


_USER = [{"role": "user", "content": "hi"}]
_ROUTED_BODIES: list[Any] = [
    {"messages": _USER},
    {"prompt": "hi"},
    {},
    {"input": "hi"},
    {"model": "nope"},
    {"max_tokens": -1},
    {"prompt": None},
    {"prompt": 5},
    {"prompt": "hi", "max_tokens": "x"},
    {"messages": "x"},
    {"messages": "x", "prompt": "hi"},
    {"messages": [], "max_tokens": 1},
    {"messages": _USER, "prompt": "x"},
    {"messages": _USER, "max_tokens": "x"},
    {"messages": _USER, "max_tokens": "x", "prompt": "hi"},
    {"messages": _USER, "n": 0},
    {"messages": _USER, "stream_options": {"include_usage": True}},
    {"messages": _USER, "top_logprobs": 3},
    {"messages": [{"role": "bogus", "content": "hi"}], "prompt": "hi"},
    {"messages": [{"role": "user"}], "prompt": "hi"},
    {"messages": _USER, "tools": 5, "prompt": "hi"},
    {"prompt": "hi", "stream_options": {"include_usage": True}},
    {"prompt": "hi", "echo": True, "prompt_embeds": "x"},
    {"prompt": [1, 2], "logprobs": -5},
]


def _vllm_route(body: Any) -> str | None:
    # vLLM's own invocation types, in its order: the first TypeAdapter that validates the body;
    # a model validator's VLLMValidationError escapes pydantic (and the loop) as the answer
    pydantic = pytest.importorskip("pydantic")
    exceptions = pytest.importorskip("vllm.exceptions")
    chat = pytest.importorskip("vllm.entrypoints.openai.chat_completion.protocol")
    completion = pytest.importorskip("vllm.entrypoints.openai.completion.protocol")
    for name, model in (
        ("chat", chat.ChatCompletionRequest),
        ("completions", completion.CompletionRequest),
    ):
        try:
            pydantic.TypeAdapter(model).validate_python(body)
        except pydantic.ValidationError:
            continue
        except exceptions.VLLMValidationError as exc:
            return f"refused: {exc}"
        return name
    return None


def test_bodies_go_where_vllms_request_types_take_them() -> None:
    # The handler a body reaches is the first of vLLM's request types that validates it (a
    # chat body with a bad field goes on to completions), or the refusal of a request model's
    # own validator (a body with no prompt: "Either prompt or prompt_embeds ..."), checked
    # against vLLM's TypeAdapters.
    reached: list[str] = []

    def handler(name: str) -> Any:
        async def answer(request: Request) -> Any:
            reached.append(name)
            raise RuntimeError("stop")

        return answer

    route = invocations_handler(handler("chat"), handler("completions"))
    for body in _ROUTED_BODIES:
        reached.clear()
        request = Request(
            "POST", "/invocations", b"", {b"content-type": b"application/json"},
            json.dumps(body).encode(),
        )  # fmt: skip
        answer: str | None = None
        try:
            asyncio.run(route(request))
        except RuntimeError:
            answer = reached[0]
        except ApiError as exc:
            if "Cannot find suitable handler" not in exc.message:
                answer = f"refused: {exc.message}"
        assert answer == _vllm_route(body), body

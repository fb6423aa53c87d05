"""A request whose ``model`` names a loaded LoRA adapter sends the adapter's ``LoRARequest``
with every engine request it makes (each sample of ``n``, each prompt, each beam-search step),
and its response names the adapter, as vLLM's ``_maybe_get_adapters`` and
``model_name(lora_request)`` do; the base model's requests carry none. (The same on the real
engine, against vLLM's frontend: tests/e2e/test_lora.py.)"""

from __future__ import annotations

import asyncio
import json
import pathlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from tests.support.generation_app import generation_app
from tests.support.responses import body as body_of
from vllm_frontend.engine.protocol import (
    EngineCoreOutput,
    EngineCoreRequest,
    FinishReason,
    LoRARequest,
)
from vllm_frontend.llm import LoraAdapters
from vllm_frontend.server.app import App
from vllm_frontend.server.transport import Request


class Client:
    """Two tokens per engine request; records the requests and the utility calls."""

    def __init__(self) -> None:
        self.requests: list[EngineCoreRequest] = []
        self.utility: list[tuple[str, tuple[Any, ...]]] = []

    async def _outputs(self, req: EngineCoreRequest) -> AsyncIterator[Any]:
        for i in range(2):
            await asyncio.sleep(0)
            yield EngineCoreOutput(
                req.request_id, [100 + i],
                finish_reason=FinishReason.LENGTH if i == 1 else None,
            )  # fmt: skip

    def add_request(self, request: EngineCoreRequest) -> Any:
        self.requests.append(request)
        return self._outputs(request)

    def abort_requests(self, request_ids: Sequence[str]) -> int:
        return len(request_ids)

    async def call_utility_all(self, method: str, *args: Any, timeout: float | None = 60.0
                               ) -> list[Any]:  # fmt: skip
        self.utility.append((method, args))
        return [True]


def _app(model: pathlib.Path) -> tuple[App, Client]:
    client = Client()
    adapters = LoraAdapters(client)
    asyncio.run(adapters.load("first", "/adapters/first"))
    asyncio.run(adapters.load("second", "/adapters/second", base_model_name="m"))
    return generation_app(model, client, max_model_len=128, adapters=adapters), client


async def _post(app: App, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    request = Request("POST", path, b"", {b"content-type": b"application/json"},
                      json.dumps({"max_tokens": 2, **body}).encode())  # fmt: skip
    response = await app(request)
    return response.status, json.loads(await body_of(response))


CHAT = {"messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize(
    "path,body",
    [
        ("/v1/completions", {"prompt": "Hello"}),
        ("/v1/completions", {"prompt": ["Hello", "there"], "n": 2}),
        ("/v1/completions", {"prompt": "Hello", "use_beam_search": True, "n": 2}),
        ("/v1/chat/completions", {**CHAT, "n": 3}),
    ],
)
def test_an_adapters_requests_carry_its_lora_request(
    tiny_model: pathlib.Path, path: str, body: dict[str, Any]
) -> None:
    app, client = _app(tiny_model)
    assert client.utility == [
        ("add_lora", (LoRARequest("first", 1, "/adapters/first"),)),
        ("add_lora", (LoRARequest("second", 2, "/adapters/second", "m"),)),
    ]
    status, answer = asyncio.run(_post(app, path, {"model": "second", **body}))
    assert status == 200 and answer["model"] == "second"
    assert client.requests
    want = LoRARequest("second", 2, "/adapters/second", "m")
    assert all(r.lora_request == want for r in client.requests)
    client.requests.clear()
    for model in ("m", None):
        status, answer = asyncio.run(_post(app, path, {**({"model": model} if model else {}),
                                                        **body}))  # fmt: skip
        assert status == 200 and answer["model"] == "m"
    assert client.requests and all(r.lora_request is None for r in client.requests)


def test_a_name_neither_served_nor_loaded_is_not_found(tiny_model: pathlib.Path) -> None:
    app, client = _app(tiny_model)
    status, answer = asyncio.run(_post(app, "/v1/completions", {"model": "third", "prompt": "a"}))
    assert status == 404
    assert answer["error"] == {
        "message": "The model `third` does not exist. Valid aliases: m.",
        "type": "NotFoundError", "param": "model", "code": 404,
    }  # fmt: skip
    assert client.requests == []

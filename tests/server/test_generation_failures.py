"""What a client sees when generation fails: an engine ERROR finish, a dead engine, a client
that goes away. A scripted engine client stands in for the engine (a real engine cannot be made
to fail on demand); expectations follow vLLM 0.32's serving code: ``GenerationError`` is a 500
``InternalServerError`` "Internal server error", and once a stream has started an error becomes
a ``data: {"error": …}`` event followed by ``data: [DONE]`` (status stays 200)."""

from __future__ import annotations

import asyncio
import json
import pathlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from tests.support.responses import BufferSink
from tests.support.responses import body as body_of
from tests.support.shared_tokenizer import shared_tokenizer
from vllm_frontend.chat import ChatRenderer, ModelChatTemplates, special_tokens_map
from vllm_frontend.engine.client import EngineDeadError
from vllm_frontend.engine.protocol import EngineCoreOutput, EngineCoreRequest, FinishReason
from vllm_frontend.engine.validate import RequestLimits, validate_request
from vllm_frontend.llm import LLM
from vllm_frontend.server.app import App, ServerSettings
from vllm_frontend.server.chat import ChatHandler
from vllm_frontend.server.completions import CompletionsHandler
from vllm_frontend.server.generation import ServingContext
from vllm_frontend.server.protocol import parse_chat_request, parse_completion_request
from vllm_frontend.server.transport import PushedStreamingResponse, Request
from vllm_frontend.text.sampling import ModelSamplingInfo


class ScriptedClient:
    """Every request yields `tokens` outputs, then `finish`; or raises `error` after them;
    with `hang`, it never finishes."""

    def __init__(self, tokens: int = 2, finish: FinishReason | None = FinishReason.LENGTH,
                 error: BaseException | None = None, hang: bool = False) -> None:  # fmt: skip
        self.tokens, self.finish, self.error, self.hang = tokens, finish, error, hang
        self.added: list[EngineCoreRequest] = []
        self.aborted: list[str] = []
        self.started = asyncio.Event()

    async def _run(self, req: EngineCoreRequest) -> AsyncIterator[EngineCoreOutput]:
        for i in range(self.tokens):
            last = i == self.tokens - 1 and not self.hang and self.error is None
            yield EngineCoreOutput(req.request_id, [1000 + i],
                                   finish_reason=self.finish if last else None)  # fmt: skip
            self.started.set()
            await asyncio.sleep(0)
        if self.error is not None:
            raise self.error
        if self.hang:
            await asyncio.Event().wait()

    def add_request(self, request: Any) -> AsyncIterator[Any]:
        self.added.append(request)
        return self._run(request)

    def abort_requests(self, request_ids: Sequence[str]) -> int:
        self.aborted.extend(request_ids)
        return len(request_ids)


def _app(model: pathlib.Path, client: ScriptedClient) -> App:
    tokenizer = shared_tokenizer(model)
    cfg = json.loads((model / "tokenizer_config.json").read_text())
    sampling = ModelSamplingInfo(max_model_len=128, eos_token_id=tokenizer.eos_token_id)

    def ctx(chat: bool) -> ServingContext:
        return ServingContext(
            llm=LLM(client, EngineCoreRequest), tokenizer=tokenizer, served_model_names=["m"],
            max_model_len=128, sampling=sampling,
            chat_renderer=ChatRenderer(ModelChatTemplates.from_model_dir(model, cfg),
                                       special_tokens_map(cfg)))  # fmt: skip

    app = App(ServerSettings(served_model_names=["m"], max_model_len=128))
    app.route("POST", "/v1/completions", CompletionsHandler(ctx(False), parse_completion_request))
    app.route("POST", "/v1/chat/completions", ChatHandler(ctx(True), parse_chat_request))
    return app


def _request(path: str, body: dict[str, Any]) -> Request:
    return Request("POST", path, b"", {b"content-type": b"application/json"},
                   json.dumps(body).encode())  # fmt: skip


async def _call(app: App, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
    response = await app(_request(path, body))
    return response.status, await body_of(response)


ROUTES = [
    ("/v1/completions", {"prompt": "hi", "max_tokens": 5}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}),
]
INTERNAL = {"message": "Internal server error", "type": "InternalServerError", "param": None,
            "code": 500}  # fmt: skip


@pytest.mark.parametrize("path,body", ROUTES)
def test_engine_error_finish_is_a_500(tiny_model: pathlib.Path, path: str, body: Any) -> None:
    app = _app(tiny_model, ScriptedClient(finish=FinishReason.ERROR))
    status, raw = asyncio.run(_call(app, path, body))
    assert status == 500
    assert json.loads(raw) == {"error": INTERNAL}


@pytest.mark.parametrize("path,body", ROUTES)
def test_engine_error_finish_mid_stream_is_an_error_event_then_done(
    tiny_model: pathlib.Path, path: str, body: Any
) -> None:
    app = _app(tiny_model, ScriptedClient(tokens=3, finish=FinishReason.ERROR))
    status, raw = asyncio.run(_call(app, path, {**body, "stream": True}))
    assert status == 200
    events = raw.decode().split("\n\n")
    assert events[-1] == "" and events[-2] == "data: [DONE]"
    assert json.loads(events[-3].removeprefix("data: ")) == {"error": INTERNAL}


def test_chat_stream_sends_its_role_chunk_before_an_error_in_the_first_output(
    tiny_model: pathlib.Path,
) -> None:
    # vLLM's chat stream generator sends the role chunk on its first iteration, then raises.
    app = _app(tiny_model, ScriptedClient(tokens=1, finish=FinishReason.ERROR))
    path, body = ROUTES[1]
    status, raw = asyncio.run(_call(app, path, {**body, "stream": True}))
    assert status == 200
    events = [e.removeprefix("data: ") for e in raw.decode().split("\n\n") if e]
    assert len(events) == 3
    assert json.loads(events[0])["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert json.loads(events[1]) == {"error": INTERNAL}
    assert events[2] == "[DONE]"


@pytest.mark.parametrize("path,body", ROUTES)
def test_a_dead_engine_fails_the_request_instead_of_hanging(
    tiny_model: pathlib.Path, path: str, body: Any
) -> None:
    dead = EngineDeadError("engine core died")
    for stream in (False, True):
        app = _app(tiny_model, ScriptedClient(tokens=1, error=dead))
        status, raw = asyncio.run(asyncio.wait_for(_call(app, path, {**body, "stream": stream}),
                                                   timeout=30))  # fmt: skip
        if stream:
            assert status == 200
            events = raw.decode().split("\n\n")
            assert events[-2] == "data: [DONE]"
            assert json.loads(events[-3].removeprefix("data: "))["error"]["code"] == 500
        else:
            assert status == 500
            assert json.loads(raw)["error"]["type"] == "InternalServerError"


@pytest.mark.parametrize("path,body", ROUTES)
def test_client_disconnect_aborts_the_engine_request(
    tiny_model: pathlib.Path, path: str, body: Any
) -> None:
    client = ScriptedClient(tokens=2, hang=True)
    app = _app(tiny_model, client)

    async def main() -> None:
        # Streaming: the server cancels the task producing the body when the client goes away.
        response = await app(_request(path, {**body, "stream": True}))
        assert isinstance(response, PushedStreamingResponse)
        sink = BufferSink()
        producing = asyncio.create_task(response.produce(sink))
        while len(sink.chunks) < 2:
            await asyncio.sleep(0)
        producing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await producing
        assert client.aborted == [client.added[0].request_id]
        # Non-streaming: the server cancels the handler task.
        task = asyncio.create_task(app(_request(path, body)))
        client.started.clear()
        await client.started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert client.aborted[-1] == client.added[1].request_id

    asyncio.run(main())


class ValidatingClient(ScriptedClient):
    """ScriptedClient behind the engine client's own request validation."""

    def add_request(self, request: Any) -> AsyncIterator[Any]:
        validate_request(request, RequestLimits(vocab_size=128256))
        return super().add_request(request)


@pytest.mark.parametrize("stream", [False, True])
def test_a_prompt_id_no_tokenizer_has_gets_the_out_of_vocabulary_error(
    tiny_model: pathlib.Path, stream: bool
) -> None:
    # An id past 32 bits must not trip the detokenizer before the engine client judges it.
    app = _app(tiny_model, ValidatingClient())
    body = {"prompt": [5, 2**40], "max_tokens": 3, "stream": stream}
    status, raw = asyncio.run(_call(app, "/v1/completions", body))
    if stream:
        assert status == 200
        error = json.loads(raw.decode().split("\n\n")[0].removeprefix("data: "))["error"]
    else:
        assert status == 400
        error = json.loads(raw)["error"]
    assert error["message"] == f"Token id {2**40} is out of vocabulary"
    assert error["code"] == 400

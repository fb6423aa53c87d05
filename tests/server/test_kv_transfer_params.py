"""``kv_transfer_params`` of the engine's final output come back in the response, as vLLM 0.32's
frontend returns ``RequestOutput.kv_transfer_params`` (disaggregated prefill/decode proxies read
them from the prefill server's answer); ``ec_transfer_params`` (the encoder-cache connector's,
for disaggregated encode) come back wherever those do.

Where vLLM puts them (vllm/entrypoints/openai/{completion,chat_completion}/serving.py): in the
non-streaming response only (never in a stream's chunks); for completions, the first prompt's;
with ``n`` > 1, those of the output that finished the request's last sample (vllm/outputs.py's
``RequestOutput`` keeps the latest). A scripted engine plays the KV connector, which sets them
on a request's finished output.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from tests.support.generation_app import generation_app
from tests.support.responses import body as body_of
from vllm_frontend.engine.protocol import EngineCoreOutput, EngineCoreRequest, FinishReason
from vllm_frontend.server.app import App
from vllm_frontend.server.transport import Request


class ConnectorClient:
    """Each engine request makes 3 tokens; its finished output carries the KV connector's
    parameters, naming the request and echoing what the request sent. The first request added
    finishes last."""

    def __init__(self) -> None:
        self.added: list[str] = []

    def _params(self, req: EngineCoreRequest) -> dict[str, Any]:
        extra = req.sampling_params.extra_args or {}
        return {"request": req.request_id, "sent": extra.get("kv_transfer_params")}

    def _ec_params(self, req: EngineCoreRequest) -> dict[str, Any] | None:
        # The encoder-cache connector's: only for a request that sent some.
        sent = (req.sampling_params.extra_args or {}).get("ec_transfer_params")
        return None if sent is None else {"encoder": req.request_id, "sent": sent}

    async def _outputs(self, req: EngineCoreRequest, delay: int) -> AsyncIterator[Any]:
        for i in range(3):
            for _ in range(delay if i == 2 else 1):
                await asyncio.sleep(0)
            last = i == 2
            yield EngineCoreOutput(
                req.request_id,
                [100 + i],
                finish_reason=FinishReason.LENGTH if last else None,
                kv_transfer_params=self._params(req) if last else None,
                ec_transfer_params=self._ec_params(req) if last else None,
            )

    def add_request(self, request: EngineCoreRequest) -> Any:
        self.added.append(request.request_id)
        return self._outputs(request, 20 if len(self.added) == 1 else 1)

    def abort_requests(self, request_ids: Sequence[str]) -> int:
        return len(request_ids)


def _app(model: pathlib.Path) -> tuple[App, ConnectorClient]:
    client = ConnectorClient()
    return generation_app(model, client, max_model_len=128), client


async def _post(app: App, path: str, body: dict[str, Any]) -> bytes:
    request = Request("POST", path, b"", {b"content-type": b"application/json"},
                      json.dumps({"model": "m", "max_tokens": 3, **body}).encode())  # fmt: skip
    response = await app(request)
    assert response.status == 200, getattr(response, "body", response)
    return await body_of(response)


SENT = {"do_remote_decode": True}
CHAT = {"messages": [{"role": "user", "content": "hi"}]}


def test_chat_returns_the_final_outputs_params(tiny_model: pathlib.Path) -> None:
    app, client = _app(tiny_model)
    body = json.loads(
        asyncio.run(_post(app, "/v1/chat/completions", {**CHAT, "kv_transfer_params": SENT}))
    )
    assert body["kv_transfer_params"] == {"request": client.added[0], "sent": SENT}


def test_completion_returns_the_first_prompts_params(tiny_model: pathlib.Path) -> None:
    app, client = _app(tiny_model)
    body = json.loads(
        asyncio.run(
            _post(app, "/v1/completions", {"prompt": ["a", "b"], "kv_transfer_params": SENT})
        )
    )
    assert len(client.added) == 2
    # the first prompt's request finishes last: its params are the response's all the same
    assert body["kv_transfer_params"] == {"request": client.added[0], "sent": SENT}


def test_with_n_the_last_sample_to_finish_gives_them(tiny_model: pathlib.Path) -> None:
    for path, extra in (("/v1/completions", {"prompt": "a"}), ("/v1/chat/completions", CHAT)):
        app, client = _app(tiny_model)
        body = json.loads(asyncio.run(_post(app, path, {**extra, "n": 2})))
        assert len(client.added) == 2
        assert body["kv_transfer_params"] == {"request": client.added[0], "sent": None}


def test_without_a_connector_they_are_null(tiny_model: pathlib.Path) -> None:
    class Plain(ConnectorClient):
        def _params(self, req: EngineCoreRequest) -> dict[str, Any]:
            return None  # type: ignore[return-value]

    for path, extra in (("/v1/completions", {"prompt": "a"}), ("/v1/chat/completions", CHAT)):
        client = Plain()
        app = generation_app(tiny_model, client, max_model_len=128)
        body = json.loads(asyncio.run(_post(app, path, extra)))
        assert "kv_transfer_params" in body
        assert body["kv_transfer_params"] is None


def test_streams_never_carry_them(tiny_model: pathlib.Path) -> None:
    for path, extra in (("/v1/completions", {"prompt": "a"}), ("/v1/chat/completions", CHAT)):
        app, _ = _app(tiny_model)
        raw = asyncio.run(
            _post(app, path, {**extra, "stream": True, "stream_options": {"include_usage": True}})
        )
        events = [line[6:] for line in raw.decode().split("\n") if line.startswith("data: ")]
        assert events[-1] == "[DONE]" and len(events) > 3
        assert not any("kv_transfer_params" in json.loads(e) for e in events[:-1])


class RecordingClient(ConnectorClient):
    """Also keeps every request sent, and how many streams were closed."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[EngineCoreRequest] = []
        self.closed = 0

    def add_request(self, request: EngineCoreRequest) -> Any:
        self.requests.append(request)
        if request.abort_immediately:
            client = self

            class Closed:
                async def aclose(self) -> None:
                    client.closed += 1

            return Closed()
        return super().add_request(request)


def _rejection_app(model: pathlib.Path, connector: bool) -> tuple[App, RecordingClient]:
    client = RecordingClient()
    return generation_app(model, client, max_model_len=128, has_kv_connector=connector), client


REMOTE = {"do_remote_prefill": True, "remote_block_ids": [1, 2]}


async def _status(app: App, path: str, body: dict[str, Any]) -> int:
    request = Request("POST", path, b"", {b"content-type": b"application/json",
                                          b"x-data-parallel-rank": b"0"},
                      json.dumps({"model": "m", **body}).encode())  # fmt: skip
    response = await app(request)
    await body_of(response)
    return response.status


def test_a_remote_prefill_request_refused_here_is_sent_pre_aborted(
    tiny_model: pathlib.Path,
) -> None:
    """vLLM's ``_with_kv_transfer_rejection_cleanup`` / ``notify_kv_transfer_request_rejected``:
    the engines get a one-token request carrying the params, aborted on arrival, so that their
    connector frees what the prefill side holds for it."""
    too_long = {"max_tokens": 1000, "kv_transfer_params": REMOTE, "request_id": "r1"}
    for path, extra in (("/v1/completions", {"prompt": "a"}), ("/v1/chat/completions", CHAT)):
        app, client = _rejection_app(tiny_model, connector=True)
        assert asyncio.run(_status(app, path, {**extra, **too_long})) == 400
        [sent] = client.requests
        assert sent.request_id == "r1" and sent.abort_immediately
        assert sent.prompt_token_ids == [0] and sent.data_parallel_rank == 0
        params = sent.sampling_params
        assert params.max_tokens == 1 and params.extra_args == {"kv_transfer_params": REMOTE}
        assert client.closed == 1


def test_nothing_is_sent_without_a_connector_a_remote_prefill_or_a_failure(
    tiny_model: pathlib.Path,
) -> None:
    cases = [
        (False, {"max_tokens": 1000, "kv_transfer_params": REMOTE}, 400),
        (True, {"max_tokens": 1000, "kv_transfer_params": {"do_remote_decode": True}}, 400),
        (True, {"max_tokens": 3, "kv_transfer_params": REMOTE}, 200),
        (True, {"max_tokens": 3, "kv_transfer_params": REMOTE, "stream": True}, 200),
    ]
    for connector, body, status in cases:
        app, client = _rejection_app(tiny_model, connector)
        assert asyncio.run(_status(app, "/v1/completions", {"prompt": "a", **body})) == status
        assert not any(r.abort_immediately for r in client.requests)


def _agent_app(model: pathlib.Path) -> tuple[App, ConnectorClient]:
    """/v1/messages and /v1/responses over the connector engine."""
    from tests.server.messages_support import messages_app
    from tests.support.generation_app import generation_context
    from tests.support.shared_tokenizer import shared_tokenizer
    from vllm_frontend.chat.output_parser import OutputParsers
    from vllm_frontend.server.responses import ResponsesHandler
    from vllm_frontend.server.responses_protocol import parse_responses_request
    from vllm_frontend.server.responses_store import ResponseStore

    client = ConnectorClient()
    app = messages_app(model, client, max_model_len=128)
    ctx = generation_context(model, client, max_model_len=128)
    parsers = OutputParsers.for_tokenizer(shared_tokenizer(model).token_to_id)
    handler = ResponsesHandler(ctx, parse_responses_request, parsers, store=ResponseStore())
    for (method, path), route in handler.routes().items():
        app.route(method, path, route)
    return app, client


def test_messages_and_responses_return_the_final_outputs_params(tiny_model: pathlib.Path) -> None:
    """vLLM's Messages response is its chat response's (``kv_transfer_params`` left out when
    None, as it dumps with ``exclude_none``); its Responses response has the field always, the
    final output's or null, in the stream's ``response.completed`` too."""
    app, client = _agent_app(tiny_model)
    body = json.loads(asyncio.run(_post(app, "/v1/messages", {**CHAT, "kv_transfer_params": SENT})))
    assert body["kv_transfer_params"] == {"request": client.added[-1], "sent": SENT}
    request = {"input": "hi", "kv_transfer_params": SENT}
    body = json.loads(asyncio.run(_post(app, "/v1/responses", request)))
    assert body["kv_transfer_params"] == {"request": client.added[-1], "sent": SENT}
    raw = asyncio.run(_post(app, "/v1/responses", {"input": "hi", "stream": True}))
    events = [
        json.loads(line[6:]) for line in raw.decode().split("\n") if line.startswith("data: ")
    ]
    [done] = [e for e in events if e["type"] == "response.completed"]
    assert done["response"]["kv_transfer_params"] == {"request": client.added[-1], "sent": None}


def test_messages_leave_them_out_without_a_connector(tiny_model: pathlib.Path) -> None:
    from tests.server.messages_support import messages_app

    class Plain(ConnectorClient):
        def _params(self, req: EngineCoreRequest) -> dict[str, Any]:
            return None  # type: ignore[return-value]

    app = messages_app(tiny_model, Plain(), max_model_len=128)
    body = json.loads(asyncio.run(_post(app, "/v1/messages", CHAT)))
    assert "kv_transfer_params" not in body


EC_SENT = {"do_remote_encode": True}


def test_ec_transfer_params_come_back_where_kv_transfer_params_do(
    tiny_model: pathlib.Path,
) -> None:
    """vLLM 0.32 returns ``RequestOutput.ec_transfer_params`` beside ``kv_transfer_params``: in
    the chat, completion, Messages (left out when None), Responses and token-in/token-out
    answers; ``null`` without a connector."""
    from tests.support.generation_app import generation_context
    from vllm_frontend.server.generate import GENERATE_PATH, GenerateHandler

    app, client = _agent_app(tiny_model)
    ctx = generation_context(tiny_model, client, max_model_len=128)
    app.route("POST", GENERATE_PATH, GenerateHandler(ctx))
    for path, extra in (
        ("/v1/messages", CHAT),
        ("/v1/responses", {"input": "hi"}),
        (GENERATE_PATH, {"token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 3}}),
    ):
        body = json.loads(asyncio.run(_post(app, path, {**extra, "ec_transfer_params": EC_SENT})))
        assert body["ec_transfer_params"] == {"encoder": client.added[-1], "sent": EC_SENT}
        body = json.loads(asyncio.run(_post(app, path, extra)))
        if path == "/v1/messages":
            assert "ec_transfer_params" not in body
        else:
            assert body["ec_transfer_params"] is None
    for path, extra in (("/v1/completions", {"prompt": "a"}), ("/v1/chat/completions", CHAT)):
        app, client = _app(tiny_model)
        body = json.loads(asyncio.run(_post(app, path, {**extra, "ec_transfer_params": EC_SENT})))
        assert body["ec_transfer_params"] == {"encoder": client.added[0], "sent": EC_SENT}
        body = json.loads(asyncio.run(_post(app, path, extra)))
        assert body["ec_transfer_params"] is None


def test_responses_send_the_extra_args_vllm_sends(tiny_model: pathlib.Path) -> None:
    """The Responses engine request's ``extra_args`` as vLLM's
    ``ResponsesRequest.to_sampling_params`` sets them: ``{}`` (not None) when the request sends
    none, which a logits processor or KV connector reading them sees."""
    protocol = pytest.importorskip("vllm.entrypoints.openai.responses.protocol")

    app, client = _agent_app(tiny_model)
    sent: list[Any] = []
    add_request = client.add_request

    def recording(request: EngineCoreRequest) -> Any:
        sent.append(request.sampling_params.extra_args)
        return add_request(request)

    client.add_request = recording  # type: ignore[method-assign]
    for extra in ({}, {"vllm_xargs": {"a": 1}}, {"kv_transfer_params": SENT},
                  {"ec_transfer_params": EC_SENT, "vllm_xargs": {"b": "x"}}):  # fmt: skip
        body = {"input": "hi", **extra}
        asyncio.run(_post(app, "/v1/responses", body))
        vllm = protocol.ResponsesRequest(model="m", **body).to_sampling_params(16)
        assert sent[-1] == vllm.extra_args, extra

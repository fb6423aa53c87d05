"""Health, models, version, load, metrics, tokenize and detokenize, over the real server; shapes
compared with vLLM's own pydantic response models and error helpers."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from vllm_frontend.metrics.registry import MetricsRegistry
from vllm_frontend.metrics.series import Counter, SeriesCollector
from vllm_frontend.server import errors
from vllm_frontend.server.app import ServerSettings, make_server
from vllm_frontend.server.protocol import TokenizeChatRequest
from vllm_frontend.server.routes import Services, build_app
from vllm_frontend.server.transport import HttpLimits, Request, Response, StreamingResponse

from .support import HTTP, RunningServer

JSON = {"content-type": "application/json"}


class FakeEngine:
    def __init__(self) -> None:
        self.is_dead = False


class FakeTokenizer:
    """Characters as token ids: an independent, obviously-correct tokenizer."""

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return ([1] if add_special_tokens else []) + [ord(c) for c in text]

    def decode(self, token_ids: Any, skip_special_tokens: bool = False) -> str:
        return "".join("<s>" if i == 1 else chr(i) for i in token_ids)

    def convert_ids_to_tokens(self, token_ids: Any) -> list[str | None]:
        return ["<s>" if i == 1 else chr(i) for i in token_ids]

    async def ensure_backend(self) -> None:
        return None


class Gate:
    def __init__(self) -> None:
        self.streaming = threading.Event()
        self.finished = threading.Event()
        self.release: asyncio.Event | None = None


@pytest.fixture
def env() -> Iterator[tuple[RunningServer, FakeEngine, Gate, MetricsRegistry]]:
    engine = FakeEngine()
    gate = Gate()
    registry = MetricsRegistry()
    prompt_tokens = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", ())
    prompt_tokens.child(()).inc(7)
    registry.register(SeriesCollector([prompt_tokens]))

    async def chat_tokens(req: TokenizeChatRequest) -> list[int]:
        text = "".join(f"<{m['role']}>{m['content']}" for m in req.messages)
        return [ord(c) for c in text]

    async def completions(request: Request) -> StreamingResponse:
        gate.release = asyncio.Event()
        release = gate.release

        async def body() -> AsyncIterator[bytes]:
            try:
                yield b"data: 1\n\n"
                gate.streaming.set()
                await release.wait()
                yield b"data: [DONE]\n\n"
            finally:
                gate.finished.set()

        return StreamingResponse(body())

    settings = ServerSettings(
        served_model_names=["tiny", "alias"], max_model_len=512, enable_server_load_tracking=True
    )
    services = Services(
        engine=engine,
        tokenizer=FakeTokenizer(),
        chat_tokenizer=chat_tokens,
        model_root="/models/tiny",
        metrics_registry=registry,
    )
    app = build_app(settings, services, {("POST", "/v1/completions"): completions})
    srv = RunningServer(app)
    yield srv, engine, gate, registry
    srv.stop()


def test_health_is_200_empty_then_503_once_the_engine_is_dead(env: Any) -> None:
    srv, engine, _, _ = env
    probes = [("GET", "/health"), ("GET", "/ping"), ("POST", "/ping")]
    for method, path in probes:
        r = HTTP.request(method, srv.url + path)
        assert r.status_code == 200 and r.content == b""
    engine.is_dead = True
    for method, path in probes:
        r = HTTP.request(method, srv.url + path)
        assert r.status_code == 503 and r.content == b""


@pytest.mark.oracle
def test_models_list_has_vllms_shape(env: Any) -> None:
    from vllm.entrypoints.serve.engine.protocol import ModelCard, ModelList, ModelPermission

    srv = env[0]
    mine = HTTP.get(srv.url + "/v1/models").json()
    theirs = ModelList(
        data=[
            ModelCard(
                id=name, max_model_len=512, root="/models/tiny", permission=[ModelPermission()]
            )
            for name in ("tiny", "alias")
        ]
    ).model_dump()

    def strip(d: Any) -> Any:
        # ids and timestamps differ by construction
        if isinstance(d, dict):
            return {k: strip(v) for k, v in d.items() if k not in ("created",) and k != "id"}
        if isinstance(d, list):
            return [strip(x) for x in d]
        return d

    assert strip(mine) == strip(theirs)
    assert list(mine["data"][0]) == list(theirs["data"][0])  # same key order
    assert [c["id"] for c in mine["data"]] == ["tiny", "alias"]
    assert mine["data"][0]["permission"][0]["id"].startswith("modelperm-")


@pytest.mark.oracle
def test_version_reports_the_vllm_release_we_mirror(env: Any) -> None:
    import vllm

    assert HTTP.get(env[0].url + "/version").json() == {"version": vllm.__version__}


def test_load_counts_an_inference_request_until_its_stream_ends(env: Any) -> None:
    srv, _, gate, _ = env
    assert HTTP.get(srv.url + "/load").json() == {"server_load": 0}
    with (
        httpx.Client(base_url=srv.url) as client,
        client.stream("POST", "/v1/completions", content=b"{}", headers=JSON) as r,
    ):
        it = r.iter_bytes()
        assert next(it).startswith(b"data: 1")
        assert gate.streaming.wait(10)
        assert HTTP.get(srv.url + "/load").json() == {"server_load": 1}
        assert gate.release is not None
        srv.loop.call_soon_threadsafe(gate.release.set)
        assert b"".join(it).endswith(b"[DONE]\n\n")
    # the count drops when the response has been sent; a later request observes it
    assert HTTP.get(srv.url + "/load").json() == {"server_load": 0}


def test_load_drops_when_the_client_disconnects_mid_stream(env: Any) -> None:
    srv, _, gate, _ = env
    with (
        httpx.Client(base_url=srv.url) as client,
        client.stream("POST", "/v1/completions", content=b"{}", headers=JSON) as r,
    ):
        next(r.iter_bytes())
        assert gate.streaming.wait(10)
    assert gate.finished.wait(10)

    async def load_after_the_handler_task() -> int:
        # the count is released in the same task step that closed the body
        return int(app_of(srv).server_load)

    assert srv.call(load_after_the_handler_task()) == 0


def app_of(srv: RunningServer) -> Any:
    return srv.server.app


def test_metrics_render_the_injected_registry(env: Any) -> None:
    r = HTTP.get(env[0].url + "/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=")
    assert "vllm:prompt_tokens_total 7.0" in r.text


@pytest.mark.oracle
def test_tokenize_prompt_and_messages(env: Any) -> None:
    from vllm.entrypoints.serve.tokenize.protocol import TokenizeResponse

    srv = env[0]
    r = HTTP.post(srv.url + "/tokenize", json={"prompt": "hi", "return_token_strs": True})
    expected = TokenizeResponse(
        count=3, max_model_len=512, tokens=[1, 104, 105], token_strs=["<s>", "h", "i"]
    ).model_dump()
    assert r.json() == expected and list(r.json()) == list(expected)
    r = HTTP.post(srv.url + "/tokenize", json={"prompt": "hi", "add_special_tokens": False})
    assert r.json() == {"count": 2, "max_model_len": 512, "tokens": [104, 105], "token_strs": None}
    r = HTTP.post(srv.url + "/tokenize", json={"messages": [{"role": "user", "content": "x"}]})
    assert r.json()["tokens"] == [ord(c) for c in "<user>x"]


def test_detokenize(env: Any) -> None:
    r = HTTP.post(env[0].url + "/detokenize", json={"tokens": [1, 104, 105]})
    assert r.json() == {"prompt": "<s>hi"}


def test_tokenize_with_an_unknown_model_is_a_404_listing_the_aliases(env: Any) -> None:
    r = HTTP.post(env[0].url + "/tokenize", json={"prompt": "hi", "model": "gpt-9"})
    assert r.status_code == 404
    assert r.json() == {
        "error": {
            "message": "The model `gpt-9` does not exist. Valid aliases: tiny, alias.",
            "type": "NotFoundError",
            "param": "model",
            "code": 404,
        }
    }


def test_load_stays_0_without_load_tracking_like_vllm() -> None:
    async def completions(request: Request) -> Response:
        assert srv.server.app.server_load == 0  # type: ignore[attr-defined]
        return Response()

    app = build_app(ServerSettings(), Services(), {("POST", "/v1/completions"): completions})
    srv = RunningServer(app)
    try:
        r = HTTP.post(srv.url + "/v1/completions", content=b"{}", headers=JSON)
        assert r.status_code == 200
        assert HTTP.get(srv.url + "/load").json() == {"server_load": 0}
    finally:
        srv.stop()


def test_make_server_applies_the_http_settings() -> None:
    settings = ServerSettings(
        http_timeout_keep_alive=1.5,
        max_body_size=10,
        max_head_size=1000,
        max_header_count=7,
        http_timeout_head=2.5,
        http_timeout_body=3.5,
    )
    server = make_server(build_app(settings, Services()))
    assert server.limits == HttpLimits(
        max_head_size=1000,
        max_header_count=7,
        max_body_size=10,
        head_timeout=2.5,
        body_timeout=3.5,
        keep_alive_timeout=1.5,
    )
    assert server.refusal is errors.refusal_response


# -- the error mapping against vLLM's own create_error_response ---------------------------------


def _vllm_error_cases() -> list[tuple[BaseException, BaseException]]:
    from vllm.exceptions import VLLMNotFoundError, VLLMValidationError

    class TemplateError(Exception):
        pass

    return [
        (ValueError("bad value"), ValueError("bad value")),
        (TypeError("bad type"), TypeError("bad type")),
        (OverflowError("too big"), OverflowError("too big")),
        (NotImplementedError("nope"), NotImplementedError("nope")),
        (RuntimeError("boom"), RuntimeError("boom")),
        (TemplateError("bad template"), TemplateError("bad template")),
        (
            errors.InvalidParameter("x is bad.", parameter="x", value=3),
            VLLMValidationError("x is bad.", parameter="x", value=3),
        ),
        (errors.NotFound("missing"), VLLMNotFoundError("missing")),
        (
            RuntimeError('failed at /home/u/x.py\n  File "/usr/lib/a.py", line 3, in f'),
            RuntimeError('failed at /home/u/x.py\n  File "/usr/lib/a.py", line 3, in f'),
        ),
    ]


@pytest.mark.oracle
@pytest.mark.parametrize("index", range(9))
def test_exception_mapping_matches_vllms_create_error_response(index: int) -> None:
    from vllm.entrypoints.serve.exception_handling.error_response import create_error_response

    ours, theirs = _vllm_error_cases()[index]
    expected = create_error_response(theirs).model_dump()  # type: ignore[arg-type]
    response = errors.error_response(ours)
    assert json.loads(response.body) == expected
    assert response.status == expected["error"]["code"]
    # after a stream started, the same error goes out as one SSE event built with json.dumps
    assert errors.error_sse_event(ours) == b"data: " + json.dumps(expected).encode() + b"\n\n"


@pytest.mark.oracle
def test_tokenize_messages_form_renders_the_models_chat_template(
    tiny_model: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import datetime as dt

    import transformers.utils.chat_template_utils as hf_utils
    from transformers import AutoTokenizer

    from vllm_frontend.chat import ChatRenderer
    from vllm_frontend.chat import template as chat_template
    from vllm_frontend.chat.llm import chat_tokenizer
    from vllm_frontend.text.tokenizer import Tokenizer

    # both renderers see one fixed "now" (the Llama 3 template prints today's date)
    now = dt.datetime(2024, 2, 29, 13, 5, 9)

    class FrozenDatetime(dt.datetime):
        @classmethod
        def now(cls, tz: dt.tzinfo | None = None) -> FrozenDatetime:  # type: ignore[override]
            return cls.fromtimestamp(now.timestamp(), tz)

    monkeypatch.setattr(chat_template, "_time_ns", lambda: int(now.timestamp()) * 1_000_000_000)
    monkeypatch.setattr(hf_utils, "datetime", FrozenDatetime)

    tokenizer = Tokenizer.from_dir(tiny_model)
    services = Services(
        tokenizer=tokenizer,
        chat_tokenizer=chat_tokenizer(ChatRenderer.from_model_dir(tiny_model), tokenizer),
    )
    srv = RunningServer(build_app(ServerSettings(max_model_len=64), services))
    try:
        messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hé"}]
        r = HTTP.post(srv.url + "/tokenize", json={"messages": messages})
        hf = AutoTokenizer.from_pretrained(tiny_model)
        # vLLM renders the text, then tokenizes it with add_special_tokens=False
        prompt = hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        assert r.json()["tokens"] == hf.encode(prompt, add_special_tokens=False)
        r = HTTP.post(
            srv.url + "/tokenize",
            json={"messages": messages, "chat_template": "{{ messages[0].content }}"},
        )
        assert r.status_code == 400 and r.json()["error"]["type"] == "BadRequestError"
    finally:
        srv.stop()

"""``/v1/load_lora_adapter``, ``/v1/unload_lora_adapter`` and ``/v1/models`` answer as vLLM
0.32's do, and send the engines the same ``add_lora`` calls (the same ``LoRARequest``: names,
paths, ids as vLLM numbers them).

vLLM's side is its own routers and ``OpenAIServingModels`` (with ``--lora-modules`` loaded by
its ``init_static_loras``) over a stand-in engine client; ours is the same routes over the same
stand-in. The engine's refusals (no adapter at the path, anything else) are scripted with the
engines' messages; tests/e2e/test_lora.py has the real engine's.
"""

from __future__ import annotations

import asyncio
import json
import re
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest

from vllm_frontend.engine.errors import UtilityCallError
from vllm_frontend.llm import LoraAdapters
from vllm_frontend.server.app import ServerSettings
from vllm_frontend.server.lora import load_adapter, lora_routes
from vllm_frontend.server.routes import Services, build_app
from vllm_frontend.server.transport import Request

pytestmark = pytest.mark.oracle

BASE = "base-model"
ROOT = "/models/base"
STATIC = [("static-a", "/adapters/a", None), ("static-b", "/adapters/b", BASE)]


class Engine:
    """Records each ``add_lora`` argument (as a plain dict) and refuses the paths named so."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def add_lora(self, lora: Any) -> bool:
        self.calls.append({f: getattr(lora, f) for f in lora.__struct_fields__})
        if "missing" in lora.lora_path:
            # what the engine's worker raises, wrapped as its utility failure
            raise Exception(
                f"Call to add_lora method failed: Loading lora {lora.lora_name} failed: No "
                f"adapter found for {lora.lora_path}"
            )
        if "bad" in lora.lora_path:
            raise Exception(
                "Call to add_lora method failed: LoRA rank 16 is greater than max_lora_rank 8."
            )
        return True


class OurClient:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    async def call_utility_all(self, method: str, *args: Any, timeout: float | None = 60.0
                               ) -> list[Any]:  # fmt: skip
        assert method == "add_lora"
        try:
            return [self.engine.add_lora(*args)]
        except Exception as e:
            raise UtilityCallError(method, 0, str(e)) from None


def _vllm(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> Any:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient
    from vllm.entrypoints.openai.models.api_router import router as models_router
    from vllm.entrypoints.openai.models.protocol import BaseModelPath, LoRAModulePath
    from vllm.entrypoints.openai.models.serving import OpenAIServingModels
    from vllm.entrypoints.serve.exception_handling.register import init_exception_handler
    from vllm.entrypoints.serve.lora.api_router import attach_router

    monkeypatch.setenv("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "1")

    async def add_lora(lora: Any) -> bool:
        return engine.add_lora(lora)

    client = SimpleNamespace(
        model_config=SimpleNamespace(model=ROOT, max_model_len=256),
        renderer=None,
        input_processor=None,
        add_lora=add_lora,
    )
    serving = OpenAIServingModels(
        client,  # type: ignore[arg-type]
        [BaseModelPath(BASE, ROOT)],
        lora_modules=[LoRAModulePath(n, p, b) for n, p, b in STATIC],
    )
    asyncio.run(serving.init_static_loras())
    app = FastAPI()
    app.include_router(models_router)
    attach_router(app)
    init_exception_handler(app)
    app.state.openai_serving_models = serving
    app.state.args = SimpleNamespace(log_error_stack=False)
    test_client = TestClient(app, raise_server_exceptions=False)

    def send(method: str, path: str, body: bytes | None) -> tuple[int, Any, str | None]:
        headers = {"content-type": "application/json"} if body is not None else {}
        response = test_client.request(method, path, content=body, headers=headers)
        return (
            response.status_code,
            _decoded(response.content),
            response.headers.get("content-type"),
        )

    return send


def _ours(engine: Engine) -> Any:
    adapters = LoraAdapters(OurClient(engine))

    async def static() -> None:
        for name, path, base in STATIC:
            await load_adapter(adapters, [BASE], name, path, base_model_name=base)

    asyncio.run(static())
    settings = ServerSettings(served_model_names=[BASE], max_model_len=256)
    app = build_app(
        settings,
        Services(model_root=ROOT, adapters=adapters),
        api_routes=lora_routes(adapters, [BASE]),
    )

    def send(method: str, path: str, body: bytes | None) -> tuple[int, Any, str | None]:
        headers = {b"content-type": b"application/json"} if body is not None else {}
        response = asyncio.run(app(Request(method, path, b"", headers, body or b"")))
        content_type = dict(response.headers).get(b"content-type")  # type: ignore[union-attr]
        return (
            response.status,  # type: ignore[union-attr]
            _decoded(response.body),  # type: ignore[union-attr]
            content_type.decode() if content_type else None,
        )

    return send


def _decoded(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return body.decode()


def _load(**fields: Any) -> bytes:
    return json.dumps(fields).encode()


STEPS: list[tuple[str, str, bytes | None]] = [
    ("GET", "/v1/models", None),
    ("POST", "/v1/load_lora_adapter", _load(lora_name="dyn", lora_path="/adapters/dyn")),
    ("POST", "/v1/load_lora_adapter", _load(lora_name="dyn", lora_path="/adapters/dyn")),
    ("POST", "/v1/load_lora_adapter", _load(lora_name=BASE, lora_path="/adapters/x")),
    ("POST", "/v1/load_lora_adapter", _load(lora_name="", lora_path="/adapters/x")),
    ("POST", "/v1/load_lora_adapter", _load(lora_name="x", lora_path="")),
    ("POST", "/v1/load_lora_adapter", _load(lora_name="gone", lora_path="/tmp/missing")),
    ("POST", "/v1/load_lora_adapter", _load(lora_name="big", lora_path="/adapters/bad")),
    ("POST", "/v1/load_lora_adapter", _load(lora_path="/adapters/x")),
    ("POST", "/v1/load_lora_adapter", _load(lora_name=3, lora_path="/adapters/x")),
    ("POST", "/v1/load_lora_adapter", b"[1]"),
    ("POST", "/v1/load_lora_adapter",
     _load(lora_name="dyn", lora_path="/adapters/dyn2", load_inplace=True)),
    ("POST", "/v1/load_lora_adapter",
     _load(lora_name="dyn", lora_path="/adapters/dyn2", load_inplace="true")),
    ("POST", "/v1/load_lora_adapter",
     _load(lora_name="three-d", lora_path="/adapters/3d", is_3d_lora_weight=True)),
    ("GET", "/v1/models", None),
    ("POST", "/v1/unload_lora_adapter", _load(lora_name="static-a")),
    ("POST", "/v1/unload_lora_adapter", _load(lora_name="static-a")),
    ("POST", "/v1/unload_lora_adapter", _load(lora_name="")),
    ("POST", "/v1/unload_lora_adapter", _load(lora_name="dyn", lora_int_id=2)),
    ("POST", "/v1/unload_lora_adapter", _load(lora_int_id=2)),
    ("POST", "/v1/load_lora_adapter", _load(lora_name="static-a", lora_path="/adapters/a")),
    ("GET", "/v1/models", None),
]  # fmt: skip


def _masked(body: Any) -> Any:
    """A body with what differs between any two servers (timestamps, random ids' digits)
    masked."""
    if isinstance(body, dict):
        return {
            k: "*" if k == "created"
            else re.sub("[0-9a-f]", "h", v) if k == "id" and str(v).startswith("modelperm-")
            else _masked(v)
            for k, v in body.items()
        }  # fmt: skip
    if isinstance(body, list):
        return [_masked(v) for v in body]
    return body


def test_lora_routes_and_models_answer_as_vllms(monkeypatch: pytest.MonkeyPatch) -> None:
    their_engine, our_engine = Engine(), Engine()
    theirs = _vllm(their_engine, monkeypatch)
    ours = _ours(our_engine)
    for method, path, body in STEPS:
        want = theirs(method, path, body)
        got = ours(method, path, body)
        assert (got[0], _masked(got[1])) == (want[0], _masked(want[1])), (method, path, body)
        if want[0] == 200 and method == "POST":
            assert got[2] == want[2]  # the plain success sentence's content type (none)
    assert our_engine.calls == their_engine.calls
    assert [c["lora_int_id"] for c in our_engine.calls] == [1, 2, 3, 4, 5, 3, 3, 6, 7]


def test_an_adapter_request_encodes_as_vllms_struct() -> None:
    """What ``LoraAdapters.load`` sends is vLLM's ``LoRARequest`` with the same fields."""
    from vllm.lora.request import LoRARequest as VllmLoRARequest
    from vllm.v1.serial_utils import MsgpackEncoder

    engine = Engine()
    adapters = LoraAdapters(OurClient(engine))
    lora = asyncio.run(adapters.load("n", "/p", base_model_name=BASE, is_3d_lora_weight=True))
    [theirs] = MsgpackEncoder().encode(VllmLoRARequest(**engine.calls[0]))
    assert msgspec.msgpack.encode(lora) == bytes(theirs)

"""The development routes (``VLLM_SERVER_DEV_MODE=1``) and the profiler routes answer as vLLM
0.32's do and make the same utility calls on the same engines.

vLLM's side is its own routers (vllm/entrypoints/serve/dev, rl/online, serve/profile) with its
exception handlers, over its own ``AsyncLLM`` methods and engine-core client methods (the
data-parallel client's with two engines), bound to stand-in engines that record each utility
call and answer as scripted. Ours runs over the same stand-ins. Both see the same requests;
status, body and the calls each engine received must agree.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from vllm_frontend.engine.errors import UtilityCallError
from vllm_frontend.server.app import App, ServerSettings
from vllm_frontend.server.dev import add_profiler_routes, dev_handlers
from vllm_frontend.server.transport import Request
from vllm_frontend.server.weights import weight_handlers

pytestmark = pytest.mark.oracle


class Engines:
    """Stand-in engines: record ``(engine, method, args)`` and answer from ``script`` (a
    method's per-engine results; an Exception is the engine's failure message)."""

    def __init__(self, count: int, script: dict[str, list[Any]] | None = None) -> None:
        self.count = count
        self.script = script or {}
        self.calls: list[tuple[int, str, tuple[Any, ...]]] = []

    def answer(self, engine: int, method: str, args: tuple[Any, ...]) -> Any:
        self.calls.append((engine, method, args))
        defaults = {"is_sleeping": False, "is_scheduler_paused": False, "wake_up": True,
                    "reset_prefix_cache": True, "collective_rpc": [None]}  # fmt: skip
        result = self.script.get(method, [defaults.get(method)] * self.count)[engine]
        if isinstance(result, Exception):
            raise result
        return result


class OurClient:
    """What our routes call: ``EngineCoreClient.call_utility_all``'s contract."""

    def __init__(self, engines: Engines) -> None:
        self.engines = engines

    async def call_utility_all(self, method: str, *args: Any, timeout: float | None = 60.0
                               ) -> list[Any]:  # fmt: skip
        out: list[Any] = []
        for i in range(self.engines.count):  # every engine gets the call (asyncio.gather)
            try:
                out.append(self.engines.answer(i, method, args))
            except Exception as e:
                out.append(UtilityCallError(method, i, str(e)))
        for result in out:
            if isinstance(result, UtilityCallError):
                raise result
        return out


def _vllm_engine_client(engines: Engines) -> Any:
    from vllm.v1.engine.async_llm import AsyncLLM
    from vllm.v1.engine.core_client import AsyncMPClient, DPLBAsyncMPClient

    core_methods = {name: AsyncMPClient.__dict__[name] for name in (
        "call_utility_all_async", "call_utility_consensus_async", "pause_scheduler_async",
        "resume_scheduler_async", "is_scheduler_paused_async", "profile_async",
        "reset_mm_cache_async", "reset_prefix_cache_async", "reset_encoder_cache_async",
        "sleep_async", "release_kv_cache_memory_async", "wake_up_async", "is_sleeping_async",
        "collective_rpc_async", "set_weight_version_async", "get_weight_version_async",
        "compute_weight_checksums_async")}  # fmt: skip
    client_class = DPLBAsyncMPClient if engines.count > 1 else AsyncMPClient
    core_methods["call_utility_async"] = client_class.__dict__["call_utility_async"]

    async def _call_utility_async(self: Any, method: str, *args: Any, engine: int) -> Any:
        return engines.answer(engine, method, args)

    Core = type("Core", (), {**core_methods, "_call_utility_async": _call_utility_async})
    core = Core()
    core.core_engines = list(range(engines.count))
    core.core_engine = 0

    llm_methods = {name: AsyncLLM.__dict__[name] for name in (
        "sleep", "wake_up", "is_sleeping", "pause_generation", "resume_generation", "is_paused",
        "reset_prefix_cache", "reset_mm_cache", "reset_encoder_cache", "collective_rpc",
        "start_profile", "stop_profile", "release_kv_cache_memory",
        "init_weight_transfer_engine", "shutdown_weight_transfer_engine", "start_weight_update",
        "start_draft_weight_update", "update_weights", "finish_weight_update",
        "update_weight_version", "get_weight_version", "compute_weight_checksums")}  # fmt: skip

    async def nothing() -> None:
        return None

    Llm = type("Llm", (), llm_methods)
    llm = Llm()
    llm.engine_core = core
    llm.renderer = SimpleNamespace(clear_mm_cache_async=nothing, _join_mm_warmup=lambda: None)
    llm.logger_manager = None
    llm.profiler = None
    llm._profile_lock = asyncio.Lock()
    llm._profile_session_guard_enabled = False
    llm._profile_session_active = False
    llm.vllm_config = SimpleNamespace(
        parallel_config=SimpleNamespace(world_size=2, world_size_across_dp=2 * engines.count)
    )
    return llm


def _vllm(engines: Engines) -> Callable[[str, str, bytes | None], tuple[int, Any]]:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient
    from vllm.entrypoints.rl.online.api_router import router as rl_router
    from vllm.entrypoints.serve.dev.cache.api_router import router as cache_router
    from vllm.entrypoints.serve.dev.rpc.api_router import router as rpc_router
    from vllm.entrypoints.serve.dev.sleep.api_router import router as sleep_router
    from vllm.entrypoints.serve.exception_handling.register import init_exception_handler
    from vllm.entrypoints.serve.profile.api_router import router as profile_router

    app = FastAPI()
    for router in (cache_router, rpc_router, sleep_router, rl_router, profile_router):
        app.include_router(router)
    init_exception_handler(app)
    app.state.engine_client = _vllm_engine_client(engines)
    app.state.args = SimpleNamespace(log_error_stack=False)
    client = TestClient(app, raise_server_exceptions=False)

    def send(method: str, path: str, body: bytes | None) -> tuple[int, Any]:
        headers = {"content-type": "application/json"} if body is not None else {}
        response = client.request(method, path, content=body, headers=headers)
        return response.status_code, _decoded(response.content)

    return send


def _ours(engines: Engines) -> Callable[[str, str, bytes | None], tuple[int, Any]]:
    client = OurClient(engines)
    world = SimpleNamespace(world_size=2, data_parallel_size=engines.count)
    app = App(ServerSettings())
    for (method, path), handler in dev_handlers(client, world, {"vllm_config": {}}).items():
        app.route(method, path, handler)
    add_profiler_routes(app, client)
    for (method, path), handler in weight_handlers(client).items():
        app.route(method, path, handler)

    def send(method: str, path: str, body: bytes | None) -> tuple[int, Any]:
        route, _, query = path.partition("?")
        headers = {b"content-type": b"application/json"} if body is not None else {}
        request = Request(method, route, query.encode(), headers, body or b"")
        response = asyncio.run(app(request))
        return response.status, _decoded(response.body)  # type: ignore[union-attr]

    return send


def _decoded(body: bytes) -> Any:
    return json.loads(body) if body else b""


CASES: list[tuple[str, str, bytes | None, dict[str, list[Any]]]] = [
    ("POST", "/sleep", None, {}),
    ("POST", "/sleep?level=2&mode=keep", None, {}),
    ("POST", "/sleep?level=0&mode=wait", None, {}),
    ("POST", "/sleep?level=2.00&mode=keep", None, {}),
    ("POST", "/sleep?level=%201_0.0", None, {}),
    ("POST", "/sleep", None, {"sleep": [None, RuntimeError("Sleep mode is not supported")]}),
    ("POST", "/release_kv_cache_memory", None, {}),
    ("POST", "/wake_up", None, {}),
    ("POST", "/wake_up?tags=weights&tags=kv_cache", None, {"wake_up": [True, False]}),
    ("GET", "/is_sleeping", None, {"is_sleeping": [True, True]}),
    ("GET", "/is_sleeping", None, {"is_sleeping": [True, False]}),
    ("POST", "/reset_prefix_cache", None, {}),
    ("POST", "/reset_prefix_cache?reset_running_requests=true&reset_external=1", None,
     {"reset_prefix_cache": [True, False]}),
    ("POST", "/reset_mm_cache", None, {}),
    ("POST", "/reset_encoder_cache", None, {}),
    ("POST", "/collective_rpc", b'{"method": "echo", "args": ["a"], "kwargs": {"k": "v"}, '
     b'"timeout": 5}', {"collective_rpc": [[1, "x", {"a": 1}, None, [2]], [3]]}),
    ("POST", "/collective_rpc", b'{"method": "noop"}', {"collective_rpc": [None, None]}),
    ("POST", "/collective_rpc", b"[1]", {}),
    ("POST", "/collective_rpc", b'{"args": []}', {}),
    ("POST", "/pause", None, {}),
    ("POST", "/pause?mode=keep&clear_cache=false", None, {}),
    ("POST", "/pause?mode=wait", None,
     {"pause_scheduler": [RuntimeError("'wait' mode can't be used"), None]}),
    ("POST", "/resume", None, {}),
    ("POST", "/resume", None, {"resume_scheduler": [None, RuntimeError("boom")]}),
    ("GET", "/is_paused", None, {"is_scheduler_paused": [True, True]}),
    ("GET", "/is_paused", None, {"is_scheduler_paused": [False, True]}),
    ("GET", "/get_world_size", None, {}),
    ("GET", "/get_world_size?include_dp=false", None, {}),
    ("POST", "/start_profile", None, {}),
    ("POST", "/start_profile", b'{"profile_prefix": "run1", "max_iterations": 3}', {}),
    ("POST", "/stop_profile", None, {}),
    # the RL trainers' weight-transfer routes
    ("POST", "/init_weight_transfer_engine", b'{"init_info": {"master_port": 1, "x": [1]}}', {}),
    ("POST", "/init_weight_transfer_engine", b'{"init_info": {}}',
     {"collective_rpc": [RuntimeError("no weight transfer backend"), None]}),
    ("POST", "/init_weight_transfer_engine", b"{}", {}),
    ("POST", "/init_weight_transfer_engine", b'{"init_info": 5}', {}),
    ("POST", "/init_weight_transfer_engine", b'{"init_info": null}', {}),
    ("POST", "/init_weight_transfer_engine", b"[1]", {}),
    ("POST", "/init_weight_transfer_engine", b"null", {}),
    ("POST", "/init_weight_transfer_engine", b"{bad", {}),
    ("POST", "/init_weight_transfer_engine", None, {}),
    ("POST", "/shutdown_weight_transfer_engine", None, {}),
    ("POST", "/start_weight_update", None, {}),
    ("POST", "/start_draft_weight_update", b"{}", {}),
    ("POST", "/update_weights", b'{"update_info": {"names": ["w"], "shapes": [[2]]}}', {}),
    ("POST", "/update_weights", b'{"update_info": [{"a": 1}, {}]}', {}),
    ("POST", "/update_weights", b'{"update_info": [5, {}]}', {}),
    ("POST", "/update_weights", b'{"update_info": "x"}', {}),
    ("POST", "/update_weights", None, {}),
    ("POST", "/finish_weight_update", None, {}),
    ("POST", "/finish_weight_update", b'{"weight_version": "v3"}', {}),
    ("POST", "/finish_weight_update", b'{"weight_version": null}', {}),
    ("POST", "/finish_weight_update", b'{"weight_version": 5}', {}),
    ("POST", "/update_weight_version", b'{"new_version": "v2"}', {}),
    ("POST", "/update_weight_version", b'{"new_version": 2}', {}),
    ("POST", "/update_weight_version", b'{"version": "v2"}', {}),
    ("GET", "/weight_info", None, {"get_weight_version": ["v1", "v1"]}),
    ("GET", "/weight_info", None, {"get_weight_version": ["v1", "v2"]}),
    ("POST", "/weight_checker", b'{"action": "reset"}', {}),
    ("POST", "/weight_checker", b'{"action": "checksum"}',
     {"compute_weight_checksums": [[{"b": "2"}, {"a": "1"}], [{"c": "3"}]]}),
    ("POST", "/weight_checker", b'{"action": "checksum"}',
     {"compute_weight_checksums": [[{"a": "1"}], [{"a": "2", "b": "1"}]]}),
    ("POST", "/weight_checker", b'{"action": "compare", "baseline": {"a": "1", "z": "9"}}',
     {"compute_weight_checksums": [[{"a": "1", "b": "2"}], [{"c": "3"}]]}),
    ("POST", "/weight_checker", b'{"action": "compare", "baseline": {"a": "1"}}',
     {"compute_weight_checksums": [[{"a": "1"}], []]}),
    ("POST", "/weight_checker", b'{"action": "compare"}', {}),
    ("POST", "/weight_checker", b'{"action": "bogus", "baseline": {"a": 1}}', {}),
    ("POST", "/weight_checker", b"{}", {}),
]  # fmt: skip

INVALID = [
    ("POST", "/sleep?level=3", None),
    ("POST", "/sleep?level=x", None),
    ("POST", "/sleep?level=1.5", None),
    ("POST", "/sleep?level=1.", None),
    ("POST", "/sleep?mode=later", None),
    ("POST", "/pause?mode=later", None),
    ("POST", "/pause?clear_cache=maybe", None),
    ("GET", "/get_world_size?include_dp=2", None),
]


@pytest.mark.parametrize("count", [1, 2])
@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]} {c[1]}" for c in CASES])
def test_dev_route_answers_and_engine_calls_match_vllm(
    case: tuple[str, str, bytes | None, dict[str, list[Any]]], count: int
) -> None:
    method, path, body, script = case
    script = {k: v[:count] for k, v in script.items()}
    theirs_engines, ours_engines = Engines(count, script), Engines(count, script)
    theirs = _vllm(theirs_engines)(method, path, body)
    ours = _ours(ours_engines)(method, path, body)
    assert ours == theirs
    assert ours_engines.calls == theirs_engines.calls


@pytest.mark.parametrize("case", INVALID, ids=[f"{c[0]} {c[1]}" for c in INVALID])
def test_invalid_query_values_are_refused_as_vllm_refuses_them(
    case: tuple[str, str, bytes | None],
) -> None:
    method, path, body = case
    theirs_engines, ours_engines = Engines(1), Engines(1)
    status, theirs = _vllm(theirs_engines)(method, path, body)
    our_status, ours = _ours(ours_engines)(method, path, body)
    assert (our_status, ours_engines.calls) == (status, theirs_engines.calls == [] and [])
    assert ours["error"]["type"] == theirs["error"]["type"]
    assert ours["error"]["param"] == theirs["error"]["param"]
    assert ours["error"]["message"] == theirs["error"]["message"]

"""The development routes vLLM 0.32 serves with ``VLLM_SERVER_DEV_MODE=1`` (sleep / wake,
caches, collective RPC, pause / resume, world size, server info), and the profiler routes it
serves when ``--profiler-config`` names a profiler.

Each maps onto the engines' utility calls as vLLM's ``AsyncLLM`` and its engine-core client
make them (vllm/v1/engine/async_llm.py, core_client.py): with several engines every call
reaches every engine (as its data-parallel client does); a call whose answer must agree
(``is_sleeping``, ``is_scheduler_paused``) fails when the engines disagree, and the others
answer with the first engine's result (``wake_up`` and ``reset_prefix_cache``: all of them).
A paused engine holds (or, paused with ``abort``, aborts) requests itself: the frontend sends
them as usual.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import platform
import sys
from collections.abc import Callable, Sequence
from typing import Any, Protocol
from urllib.parse import parse_qs

from vllm_frontend.engine.errors import UtilityCallError

from . import errors
from .app import App, Handler
from .transport import Request, Response, json_response
from .validation import lax_int

__all__ = [
    "DevEngine",
    "WorldSize",
    "add_dev_routes",
    "add_profiler_routes",
    "all_results",
    "consensus_result",
    "dev_mode",
    "first_result",
]

logger = logging.getLogger(__name__)

_PAUSE_MODES = ("abort", "wait", "keep")


def dev_mode() -> bool:
    """``VLLM_SERVER_DEV_MODE`` read as vLLM reads it (an integer; non-zero is on)."""
    return bool(int(os.environ.get("VLLM_SERVER_DEV_MODE", "0")))


class DevEngine(Protocol):
    """The engine client's utility calls (``EngineCoreClient`` satisfies it)."""

    async def call_utility_all(
        self, method: str, *args: Any, timeout: float | None = 60.0
    ) -> list[Any]:
        """``method(*args)`` on every engine; results in engine order."""
        ...


class WorldSize(Protocol):
    """What ``/get_world_size`` reports (from the engines' parallel options)."""

    @property
    def world_size(self) -> int:
        """Processes per engine: pipeline x tensor x prefill-context parallel sizes."""
        ...

    @property
    def data_parallel_size(self) -> int:
        """Engines (data-parallel ranks)."""
        ...


async def all_results(engine: DevEngine, method: str, *args: Any) -> list[Any]:
    """``method(*args)`` on every engine (no timeout), failing as vLLM's client fails: with
    the engine's failure message as a plain exception."""
    try:
        return await engine.call_utility_all(method, *args, timeout=None)
    except UtilityCallError as e:
        # vLLM's client raises the engine's failure message as a bare Exception.
        raise RuntimeError(e.failure_message) from None


async def first_result(engine: DevEngine, method: str, *args: Any) -> Any:
    """:func:`all_results`' first engine's result (vLLM's ``call_utility_async``)."""
    return (await all_results(engine, method, *args))[0]


async def consensus_result(engine: DevEngine, method: str) -> Any:
    """The engines' common result of ``method()``, failing when they disagree."""
    results = await all_results(engine, method)
    if any(r != results[0] for r in results):
        raise RuntimeError(f"Engines returned different {method} results: {results}")
    return results[0]


def _query(request: Request) -> dict[str, list[str]]:
    return parse_qs(request.query.decode("latin-1"), keep_blank_values=True)


_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})


def _invalid(
    loc: str, kind: str, message: str, value: str, ctx: dict[str, Any] | None = None
) -> errors.RequestValidationFailed:
    # vLLM's report of one FastAPI/pydantic query validation error (a dict's repr).
    error: dict[str, Any] = {"type": kind, "loc": f"query.{loc}", "msg": message, "input": value}
    if ctx is not None:
        error["ctx"] = ctx
    return errors.RequestValidationFailed(f"1 validation error:\n  {error!r}", param=f"query.{loc}")


def _bool(query: dict[str, list[str]], name: str, default: bool) -> bool:
    values = query.get(name)
    if not values:
        return default
    value = values[-1]
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise _invalid(
        name, "bool_parsing", "Input should be a valid boolean, unable to interpret input", value
    )


def _int(query: dict[str, list[str]], name: str, default: int, low: int, high: int) -> int:
    values = query.get(name)
    if not values:
        return default
    value = values[-1]
    number = lax_int(value)  # pydantic's reading: "1.0" and " 1 " are 1
    if number is None:
        raise _invalid(
            name,
            "int_parsing",
            "Input should be a valid integer, unable to parse string as an integer",
            value,
        )
    if number < low:
        message = f"Input should be greater than or equal to {low}"
        raise _invalid(name, "greater_than_equal", message, value, {"ge": low})
    if number > high:
        message = f"Input should be less than or equal to {high}"
        raise _invalid(name, "less_than_equal", message, value, {"le": high})
    return number


def _mode(query: dict[str, list[str]]) -> str:
    values = query.get("mode")
    if not values:
        return "abort"
    if values[-1] not in _PAUSE_MODES:
        expected = "'abort', 'wait' or 'keep'"
        raise _invalid(
            "mode", "literal_error", f"Input should be {expected}", values[-1],
            {"expected": expected},
        )  # fmt: skip
    return values[-1]


def _error(status: int, message: str) -> Response:
    return json_response({"error": message}, status)


def dev_handlers(engine: DevEngine, world: WorldSize, server_info: dict[str, Any],
                 clear_mm_cache: Callable[[], None] | None = None,
                 ) -> dict[tuple[str, str], Handler]:  # fmt: skip
    """The development routes over ``engine`` (see the module docstring);
    ``clear_mm_cache`` forgets what the frontend knows of the engines' multimodal cache (its
    mirror), called before the engines reset theirs, as vLLM clears its renderer's first."""

    async def reset_prefix_cache(request: Request) -> Response:
        query = _query(request)
        running = _bool(query, "reset_running_requests", False)
        external = _bool(query, "reset_external", False)
        logger.info("Resetting prefix cache...")
        results = await all_results(engine, "reset_prefix_cache", running, external)
        return json_response({"success": bool(all(results))})

    async def reset_mm_cache(request: Request) -> Response:
        logger.info("Resetting multi-modal cache...")
        if clear_mm_cache is not None:
            clear_mm_cache()
        await first_result(engine, "reset_mm_cache")
        return Response(b"")

    async def reset_encoder_cache(request: Request) -> Response:
        logger.info("Resetting encoder cache...")
        await first_result(engine, "reset_encoder_cache")
        return Response(b"")

    async def collective_rpc(request: Request) -> Response:
        try:
            body = json.loads(request.body)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise errors.HttpError(400, f"JSON decode error: {e}") from None
        if not isinstance(body, dict):
            raise errors.HttpError(400, "Request body must be a JSON object")
        method = body.get("method")
        if method is None:
            raise errors.HttpError(400, "Missing 'method' in request body")
        args = tuple(body.get("args", []))
        kwargs = body.get("kwargs", {})
        timeout = body.get("timeout")
        results = await first_result(engine, "collective_rpc", method, timeout, args, kwargs)
        if results is None:
            return Response(b"")
        out = [r if r is None or isinstance(r, dict | list) else str(r) for r in results]
        return json_response({"results": out})

    async def sleep(request: Request) -> Response:
        query = _query(request)
        level = _int(query, "level", 1, 0, 2)
        mode = _mode(query)
        await first_result(engine, "sleep", level, mode)
        return json_response({"status": "sleeping", "level": level})

    async def release_kv_cache_memory(request: Request) -> Response:
        await first_result(engine, "release_kv_cache_memory")
        return json_response({"status": "kv_cache_released"})

    async def wake_up(request: Request) -> Response:
        tags: list[str] | None = _query(request).get("tags") or None
        logger.info("wake up the engine with tags: %s", tags)
        awake = all(await all_results(engine, "wake_up", tags))
        return json_response({"status": "awake" if awake else "sleeping", "tags": tags})

    async def is_sleeping(request: Request) -> Response:
        return json_response({"is_sleeping": await consensus_result(engine, "is_sleeping")})

    async def pause(request: Request) -> Response:
        query = _query(request)
        mode = _mode(query)
        clear_cache = _bool(query, "clear_cache", True)
        try:
            await first_result(engine, "pause_scheduler", mode, clear_cache)
        except Exception as e:
            logger.exception("Failed to pause generation")
            return _error(500, f"Failed to pause generation: {e}")
        # as vLLM: let the final outputs of aborted requests go out before answering
        await asyncio.sleep(0.02)
        return json_response({"status": "paused"})

    async def resume(request: Request) -> Response:
        try:
            await first_result(engine, "resume_scheduler")
        except Exception as e:
            logger.exception("Failed to resume generation")
            return _error(500, f"Failed to resume generation: {e}")
        return json_response({"status": "resumed"})

    async def is_paused(request: Request) -> Response:
        try:
            paused = await consensus_result(engine, "is_scheduler_paused")
        except Exception as e:
            logger.exception("Failed to fetch pause status")
            return _error(500, f"Failed to fetch pause status: {e}")
        return json_response({"is_paused": paused})

    async def get_world_size(request: Request) -> Response:
        include_dp = _bool(_query(request), "include_dp", True)
        size = world.world_size * (world.data_parallel_size if include_dp else 1)
        return json_response({"world_size": size})

    async def show_server_info(request: Request) -> Response:
        values = _query(request).get("config_format") or ["text"]
        if values[-1] not in ("text", "json"):
            expected = "'text' or 'json'"
            raise _invalid(
                "config_format", "literal_error", f"Input should be {expected}", values[-1],
                {"expected": expected},
            )  # fmt: skip
        info = dict(server_info)
        if values[-1] == "text":
            config = server_info["vllm_config"]
            info["vllm_config"] = ", ".join(f"{k}={v!r}" for k, v in config.items())
        return json_response(info)

    return {
        ("POST", "/reset_prefix_cache"): reset_prefix_cache,
        ("POST", "/reset_mm_cache"): reset_mm_cache,
        ("POST", "/reset_encoder_cache"): reset_encoder_cache,
        ("POST", "/collective_rpc"): collective_rpc,
        ("POST", "/sleep"): sleep,
        ("POST", "/release_kv_cache_memory"): release_kv_cache_memory,
        ("POST", "/wake_up"): wake_up,
        ("GET", "/is_sleeping"): is_sleeping,
        ("POST", "/pause"): pause,
        ("POST", "/resume"): resume,
        ("GET", "/is_paused"): is_paused,
        ("GET", "/get_world_size"): get_world_size,
        ("GET", "/server_info"): show_server_info,
    }


def add_dev_routes(
    app: App,
    engine: DevEngine,
    world: WorldSize,
    frontend_config: dict[str, Any],
    clear_mm_cache: Callable[[], None] | None = None,
) -> None:
    """Register the development routes (call only in dev mode, as vLLM does);
    ``clear_mm_cache``: see :func:`dev_handlers`."""
    logger.warning(
        "SECURITY WARNING: Development endpoints are enabled! "
        "This should NOT be used in production!"
    )
    info = {
        "vllm_config": frontend_config,
        "vllm_env": {
            k: v for k, v in sorted(os.environ.items()) if k.startswith("VLLM_") and "KEY" not in k
        },
        "system_env": {
            "python_version": sys.version,
            "python_platform": platform.platform(),
            "os": platform.system(),
        },
    }
    for (method, path), handler in dev_handlers(engine, world, info, clear_mm_cache).items():
        app.route(method, path, handler)


_PROFILE_FIELDS = {"profile_prefix": str, "delay_iterations": int, "max_iterations": int}


def add_profiler_routes(app: App, engine: DevEngine) -> None:
    """``/start_profile`` and ``/stop_profile`` (vLLM serves them when a profiler is set)."""

    async def start_profile(request: Request) -> Response:
        overrides: dict[str, Any] = {}
        if request.body.strip():
            try:
                body = json.loads(request.body)
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise errors.HttpError(400, f"JSON decode error: {e}") from None
            if isinstance(body, dict):
                for key, kind in _PROFILE_FIELDS.items():
                    value = body.get(key)
                    if value is None:
                        continue
                    if type(value) is not kind:  # the request model is strict
                        raise errors.RequestValidationFailed(
                            f"1 validation error:\n  {key}: expected {kind.__name__}",
                            param=key,
                        )
                    overrides[key] = value
        logger.info("Starting profiler...")
        args: Sequence[Any] = (
            True,
            overrides.get("profile_prefix"),
            overrides.get("delay_iterations"),
            overrides.get("max_iterations"),
        )
        await first_result(engine, "profile", *args)
        logger.info("Profiler started.")
        return Response(b"")

    async def stop_profile(request: Request) -> Response:
        logger.info("Stopping profiler...")
        await first_result(engine, "profile", False, None, None, None)
        logger.info("Profiler stopped.")
        return Response(b"")

    app.route("POST", "/start_profile", start_profile)
    app.route("POST", "/stop_profile", stop_profile)

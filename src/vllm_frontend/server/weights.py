"""The weight-transfer routes vLLM 0.32 serves with ``VLLM_SERVER_DEV_MODE=1`` for RL trainers
(vllm/entrypoints/rl/online/api_router.py): ``/init_weight_transfer_engine``,
``/shutdown_weight_transfer_engine``, ``/start_weight_update``, ``/start_draft_weight_update``,
``/update_weights``, ``/finish_weight_update``, ``/update_weight_version``, ``/weight_info``
and ``/weight_checker``.

Each makes the engine calls vLLM's ``AsyncLLM`` makes (a ``collective_rpc`` to the workers, the
engines' ``set_weight_version`` / ``get_weight_version`` / ``compute_weight_checksums``), on every
engine, as its data-parallel client does, timed in vLLM's ``vllm:rl_weight_update_*`` metrics
(``vllm_frontend.metrics.weight_ops``). Bodies are read as FastAPI reads ``Body(embed=True)``
parameters: a field of a JSON object, validated as pydantic validates it.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

from vllm_frontend.metrics.weight_ops import WeightOperationMetrics

from . import errors
from .app import Handler
from .dev import DevEngine, all_results, consensus_result, first_result
from .transport import Request, Response, json_response
from .validation import (
    AnyValue,
    DictOf,
    ListOf,
    Literal,
    Optional,
    Spec,
    Str,
    Union,
    decode_embedded_body,
    validation_error,
)

__all__ = ["weight_handlers"]

_CHECKER_ACTIONS = ("checksum", "reset", "compare")


def _fields(request: Request, fields: dict[str, tuple[Spec, bool]]) -> dict[str, Any]:
    """The ``Body(embed=True)`` parameters ``fields`` (name: spec, required) of ``request``, or
    FastAPI's validation report of every field that fails."""
    body = decode_embedded_body(request.body, request.header(b"content-type"))
    values: dict[str, Any] = {}
    found: list[dict[str, Any]] = []
    for name, (spec, required) in fields.items():
        loc = ("body", name)
        value = body.get(name) if isinstance(body, dict) else None
        if body is not None and not isinstance(body, dict | bytes):
            # FastAPI's ``body.get`` fails on any other JSON value: the field is missing
            found.append({"type": "missing", "loc": loc, "msg": "Field required", "input": None})
            continue
        if value is None:
            if required:
                found.append(
                    {"type": "missing", "loc": loc, "msg": "Field required", "input": None}
                )
            else:
                values[name] = None
            continue
        problems = spec.errors(value, loc)
        if problems:
            found.extend(problems)
        else:
            values[name] = value
    if found:
        raise validation_error(found)
    return values


async def _rpc(engine: DevEngine, method: str, kwargs: dict[str, Any] | None = None) -> Any:
    # AsyncLLM.collective_rpc(method, kwargs=...): timeout None, no args
    return await first_result(engine, "collective_rpc", method, None, (), kwargs)


def weight_handlers(
    engine: DevEngine, metrics: WeightOperationMetrics | None = None
) -> dict[tuple[str, str], Handler]:
    """The weight-transfer routes over ``engine`` (see the module docstring); ``metrics``
    records the operations as vLLM records them."""

    def record(operation: str) -> AbstractContextManager[None]:
        return nullcontext() if metrics is None else metrics.record(operation)

    async def init_weight_transfer_engine(request: Request) -> Response:
        body = _fields(request, {"init_info": (DictOf(AnyValue()), True)})
        with record("init"):
            await _rpc(engine, "init_weight_transfer_engine", {"init_info": body["init_info"]})
        return json_response({"message": "Weight transfer initialized"})

    async def shutdown_weight_transfer_engine(request: Request) -> Response:
        with record("shutdown"):
            await _rpc(engine, "shutdown_weight_transfer_engine")
        return json_response({"message": "Weight transfer shut down"})

    async def start_weight_update(request: Request) -> Response:
        with record("start"):
            await _rpc(engine, "start_weight_update")
        return json_response({"message": "Weight update started"})

    async def start_draft_weight_update(request: Request) -> Response:
        with record("start_draft"):
            await _rpc(engine, "start_draft_weight_update")
        return json_response({"message": "Draft weight update started"})

    async def update_weights(request: Request) -> Response:
        payload = Union(DictOf(AnyValue()), ListOf(DictOf(AnyValue())))
        body = _fields(request, {"update_info": (payload, True)})
        with record("update"):
            await _rpc(engine, "update_weights", {"update_info": body["update_info"]})
        return json_response({"message": "Weights updated"})

    async def finish_weight_update(request: Request) -> Response:
        body = _fields(request, {"weight_version": (Optional(Str()), False)})
        with record("finish"):
            await _rpc(engine, "finish_weight_update")
            if body["weight_version"] is not None:
                await first_result(engine, "set_weight_version", body["weight_version"])
        return json_response({"message": "Weight update finished"})

    async def update_weight_version(request: Request) -> Response:
        body = _fields(request, {"new_version": (Str(), True)})
        await first_result(engine, "set_weight_version", body["new_version"])
        return json_response({"success": True, "new_version": body["new_version"]})

    async def weight_info(request: Request) -> Response:
        version = await consensus_result(engine, "get_weight_version")
        return json_response({"weight_version": version})

    async def weight_checker(request: Request) -> Response:
        body = _fields(
            request,
            {
                "action": (Literal(*_CHECKER_ACTIONS), True),
                "baseline": (Optional(DictOf(Str())), False),
            },
        )
        action, baseline = body["action"], body["baseline"]
        if action == "reset":
            await _rpc(engine, "reset_weights")
            return json_response({"status": "reset"})
        if action == "compare" and baseline is None:
            raise errors.HttpError(400, "action='compare' requires a 'baseline' object")
        checksums: dict[str, str] = {}
        for workers in await all_results(engine, "compute_weight_checksums"):
            for worker in workers:
                duplicates = checksums.keys() & worker.keys()
                if duplicates:
                    message = f"Duplicate weight checksum keys: {sorted(duplicates)}"
                    raise errors.HttpError(500, message)
                checksums.update(worker)
        if action == "checksum":
            return json_response({"checksums": checksums})
        names = checksums.keys() | baseline.keys()
        mismatches = sorted(k for k in names if checksums.get(k) != baseline.get(k))
        return json_response({"match": not mismatches, "mismatches": mismatches})

    return {
        ("POST", "/init_weight_transfer_engine"): init_weight_transfer_engine,
        ("POST", "/shutdown_weight_transfer_engine"): shutdown_weight_transfer_engine,
        ("POST", "/start_weight_update"): start_weight_update,
        ("POST", "/start_draft_weight_update"): start_draft_weight_update,
        ("POST", "/update_weights"): update_weights,
        ("POST", "/finish_weight_update"): finish_weight_update,
        ("POST", "/update_weight_version"): update_weight_version,
        ("GET", "/weight_info"): weight_info,
        ("POST", "/weight_checker"): weight_checker,
    }

"""``POST /scale_elastic_ep`` and ``POST /is_scaling_elastic_ep``, which vLLM 0.32 serves for
every generating model (vllm/entrypoints/serve/elastic_ep/api_router.py).

The body is checked as vLLM checks it (JSON content type, JSON, a positive integer
``new_data_parallel_size`` and ``drain_timeout``), but for a body that is not a JSON object:
vLLM's handler fails on it (a 500), this one refuses it with a 400. Scaling itself needs vLLM's Ray
data-parallel backend, which this frontend does not drive: a request for the size the engines
already have answers as vLLM's (nothing to do), any other fails as vLLM's engine client fails
without Ray (500 "Scale failed"). Nothing is ever scaling.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from . import errors
from .app import App
from .transport import Request, Response, json_response

__all__ = ["add_elastic_ep_routes"]

logger = logging.getLogger(__name__)


def add_elastic_ep_routes(app: App, data_parallel_size: int) -> None:
    """Register both routes for engines of ``data_parallel_size`` ranks."""

    async def scale_elastic_ep(request: Request) -> Response:
        try:
            body: Any = json.loads(request.body)
        except json.JSONDecodeError:
            raise errors.HttpError(400, "Invalid JSON format") from None
        if not isinstance(body, dict):
            # vLLM fails here with an AttributeError (a 500); bad input is a 400 here
            raise errors.HttpError(400, "Request body must be a JSON object")
        size = body.get("new_data_parallel_size")
        drain_timeout = body.get("drain_timeout", 120)
        if size is None:
            raise errors.HttpError(400, "new_data_parallel_size is required")
        if not isinstance(size, int) or size <= 0:
            raise errors.HttpError(400, "new_data_parallel_size must be a positive integer")
        if not isinstance(drain_timeout, int) or drain_timeout <= 0:
            raise errors.HttpError(400, "drain_timeout must be a positive integer")
        if size != data_parallel_size:
            logger.error("Scale failed: elastic EP scaling needs the Ray data-parallel backend")
            raise errors.HttpError(500, "Scale failed")
        logger.info("Data parallel size is already %s, skipping scale", size)
        return json_response({"message": f"Scaled to {size} data parallel engines"})

    async def is_scaling_elastic_ep(request: Request) -> Response:
        return json_response({"is_scaling_elastic_ep": False})

    app.route("POST", "/scale_elastic_ep", scale_elastic_ep, json_body=True)
    app.route("POST", "/is_scaling_elastic_ep", is_scaling_elastic_ep)

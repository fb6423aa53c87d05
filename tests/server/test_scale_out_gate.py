"""Without ``--enable-scale-out`` every scale-out route answers as vLLM 0.32's server does: 403
``PermissionDeniedError`` with its message, whatever the body; the routes are vLLM's."""

from __future__ import annotations

import asyncio
import json
from http import HTTPStatus
from typing import Any

import pytest

from vllm_frontend.cmd.assemble import add_scale_out_routes
from vllm_frontend.cmd.config import FrontendConfig
from vllm_frontend.server.app import App, ServerSettings
from vllm_frontend.server.render import SCALE_OUT_PATHS
from vllm_frontend.server.transport import Request


def _disabled_app() -> App:
    app = App(ServerSettings())
    add_scale_out_routes(app, FrontendConfig(model="m"), ctx=None, chat=None)  # type: ignore[arg-type]
    return app


def _call(app: App, path: str, body: bytes, content_type: bytes) -> Any:
    request = Request("POST", path, b"", {b"content-type": content_type}, body)
    return asyncio.run(app(request))


@pytest.mark.parametrize("path", SCALE_OUT_PATHS)
def test_disabled_routes_answer_403(path: str) -> None:
    app = _disabled_app()
    for body, kind in ((b"{}", b"application/json"), (b"not json", b"text/plain")):
        response = _call(app, path, body, kind)
        assert response.status == 403
        assert response.body == (
            b'{"error":{"message":"Scale-out endpoints are disabled. Restart vllm serve with '
            b'--enable-scale-out to enable them.","type":"PermissionDeniedError","param":null,'
            b'"code":403}}'
        )


@pytest.mark.oracle
def test_the_gated_routes_and_body_are_vllms() -> None:
    from fastapi.routing import APIRoute
    from vllm.entrypoints.scale_out.derender.api_router import router as derender
    from vllm.entrypoints.scale_out.render.api_router import router as render
    from vllm.entrypoints.scale_out.token_in_token_out.api_router import router as tokens
    from vllm.entrypoints.serve.exception_handling.error_response import create_error_response

    theirs = {
        (method, route.path)
        for route in (*render.routes, *derender.routes, *tokens.routes)
        if isinstance(route, APIRoute)
        for method in route.methods
    }
    assert theirs == {("POST", path) for path in SCALE_OUT_PATHS}
    message = (
        "Scale-out endpoints are disabled. Restart vllm serve with --enable-scale-out to "
        "enable them."
    )
    error = create_error_response(message, "PermissionDeniedError", HTTPStatus.FORBIDDEN)

    response = _call(_disabled_app(), SCALE_OUT_PATHS[0], b"{}", b"application/json")
    assert json.loads(response.body) == error.model_dump()

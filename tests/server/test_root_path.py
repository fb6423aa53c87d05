"""``--root-path``: vLLM sets it as FastAPI's ``root_path``, and Starlette then routes a path
under the prefix without it, and any other path as it is. Our app routes the same paths to the
same places (and guards the same ones with the API key) as a FastAPI app built like vLLM's."""

from __future__ import annotations

import asyncio

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from vllm_frontend.server.app import App, ServerSettings
from vllm_frontend.server.transport import Request, json_response

PATHS = ["/v1/models", "/api/v1/models", "/api", "/api/", "/apiv1/models", "/health",
         "/api/health", "/api/api/health", "/other/v1/models", "/"]  # fmt: skip


def _fastapi(root: str) -> TestClient:
    app = FastAPI(root_path=root)

    @app.get("/v1/models")
    def models() -> dict[str, str]:
        return {"route": "/v1/models"}

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"route": "/health"}

    return TestClient(app)


def _ours(root: str) -> App:
    app = App(ServerSettings(root_path=root))
    for path in ("/v1/models", "/health"):

        async def handler(request: Request, path: str = path) -> object:
            return json_response({"route": path})

        app.route("GET", path, handler)  # type: ignore[arg-type]
    return app


@pytest.mark.parametrize("root", ["/api", "/api/", "/"])
def test_paths_route_as_under_fastapis_root_path(root: str) -> None:
    theirs = _fastapi(root)
    ours = _ours(root)
    for path in PATHS:
        expected = theirs.get(path, follow_redirects=False)
        response = asyncio.run(ours(Request("GET", path, b"", {}, b"")))
        got = response.body if response.status == 200 else b""  # type: ignore[union-attr]
        assert (response.status, got) == (
            expected.status_code,
            expected.content if expected.status_code == 200 else b"",
        ), path

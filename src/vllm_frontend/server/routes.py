"""The operations routes (health, ping, version, load) and :func:`build_app`, which assembles
the route table once at startup from them and the API modules (models, tokenize, metrics, and
the generation routes the caller passes).

Response shapes follow vLLM 0.32 (vllm/entrypoints/serve/instrumentator/basic.py, health.py).
"""

from __future__ import annotations

from vllm_frontend.metrics.http_series import HttpMetrics
from vllm_frontend.metrics.registry import MetricsRegistry

from .app import App, Handler, ServerSettings
from .metrics_route import METRICS_PREFIX, metrics_handlers
from .models import models_handler
from .services import Services
from .tokenize import tokenize_handlers
from .transport import Request, Response, json_response

__all__ = ["VLLM_VERSION", "Services", "build_app"]

VLLM_VERSION = "0.32.0"
"""What ``GET /version`` reports: the vLLM release whose API this frontend implements."""


def build_app(
    settings: ServerSettings,
    services: Services,
    generation_routes: dict[tuple[str, str], Handler] | None = None,
    api_routes: dict[tuple[str, str], Handler] | None = None,
) -> App:
    """The app with every route: ours plus ``generation_routes`` (e.g.
    ``{("POST", "/v1/completions"): handler}``, which get the JSON content-type check) and
    ``api_routes`` (paths may be templates; a ``POST`` to the exact path of a generation route
    gets the JSON check, the others not, as vLLM's routers)."""
    registry = services.metrics_registry
    if registry is None:
        registry = MetricsRegistry()
    http_metrics = HttpMetrics(registry) if settings.http_metrics else None
    app = App(settings, http_metrics)

    async def health(request: Request) -> Response:
        engine = services.engine
        if engine is not None and engine.is_dead:
            return Response(status=503)
        return Response()

    async def version(request: Request) -> Response:
        return json_response({"version": VLLM_VERSION})

    async def load(request: Request) -> Response:
        return json_response({"server_load": app.server_load})

    models = models_handler(settings, services)
    metrics, metrics_mount = metrics_handlers(registry)
    tokenize, detokenize = tokenize_handlers(settings, services)

    app.route("GET", "/health", health)
    # SageMaker's health probe (vLLM serves it on both methods)
    app.route("GET", "/ping", health)
    app.route("POST", "/ping", health)
    app.route("GET", "/version", version)
    app.route("GET", "/load", load)
    app.route("GET", "/v1/models", models)
    app.route("GET", METRICS_PREFIX, metrics)
    app.mount(METRICS_PREFIX, metrics_mount)
    app.route("POST", "/tokenize", tokenize, json_body=True)
    app.route("POST", "/detokenize", detokenize, json_body=True)
    for (method, path), handler in (generation_routes or {}).items():
        app.route(method, path, handler, json_body=True)
    for (method, path), handler in (api_routes or {}).items():
        app.route(method, path, handler, json_body=method == "POST" and "{" not in path)
    return app

"""``/metrics``: the registry's exposition, as vLLM's frontend serves it.

vLLM (``vllm/entrypoints/serve/instrumentator/metrics.py``) answers ``GET /metrics`` from
prometheus-fastapi-instrumentator's route: the text format, never compressed, whatever the
request asks for (:func:`metrics_page`). Every other request to a path starting with
``/metrics`` (``GET /metrics/``, ``HEAD``/``POST /metrics``, ``/metricsxyz`` …) reaches the
prometheus_client app vLLM mounts there, which negotiates the format, name escaping, gzip and a
``name[]`` filter (:func:`negotiated_page`, rules in ``vllm_frontend.metrics.negotiation``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable

from vllm_frontend.metrics.exposition import MetricFamily
from vllm_frontend.metrics.negotiation import encode_page
from vllm_frontend.metrics.registry import MetricsRegistry, render_metrics

from .transport import Request, Response, StreamingResponse

__all__ = ["METRICS_PREFIX", "metrics_handlers", "negotiated_page"]

METRICS_PREFIX = "/metrics"
"""The path of ``GET /metrics`` and the prefix of the negotiating mount."""


def _names(query: bytes) -> list[str] | None:
    if not query:
        return None
    from urllib.parse import parse_qs

    return parse_qs(query.decode("utf-8", "replace")).get("name[]")


def negotiated_page(request: Request, families: Iterable[MetricFamily]) -> StreamingResponse:
    """``families`` in the format, escaping and encoding ``request`` asks for."""
    page = encode_page(
        families,
        request.header(b"accept") or "",
        request.header(b"accept-encoding") or "",
        _names(request.query),
    )
    headers = [(b"content-encoding", b"gzip")] if page.gzipped else []
    # prometheus_client's ASGI app gives no Content-Length: uvicorn sends the body chunked
    # (to HEAD: neither header, and no body)
    return StreamingResponse(_once(page.body), 200, page.content_type.encode(), headers)


async def _once(body: bytes) -> AsyncIterator[bytes]:
    yield body


def metrics_handlers(
    registry: MetricsRegistry,
) -> tuple[
    Callable[[Request], Awaitable[Response]], Callable[[Request], Awaitable[StreamingResponse]]
]:
    """The handler of ``GET /metrics`` and the one of the rest of the ``/metrics`` mount."""

    async def metrics_page(request: Request) -> Response:
        body, content_type = render_metrics(registry)
        return Response(body, 200, content_type.encode())

    async def metrics_mount(request: Request) -> StreamingResponse:
        return negotiated_page(request, registry.collect())

    return metrics_page, metrics_mount

"""The application seam: settings built once, a route table, and vLLM's middleware behaviour.

A route handler is ``async def handler(request: Request) -> AnyResponse``; it
raises (see ``errors.py``) instead of building error responses. :class:`App` is the callable the
:class:`~vllm_frontend.server.transport.HttpServer` runs for every request. In order, like vLLM's
middleware stack (vllm/entrypoints/serve/middleware/register.py, outermost first):
X-Request-Id header, API-key check on guarded prefixes, CORS, routing (404/405 in FastAPI's
shape), load tracking for inference routes, error mapping.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from functools import partial

import msgspec

from vllm_frontend.metrics.http_series import HttpMetrics, metrics_excluded

from . import errors
from .redirects import slash_toggled, trailing_slash_redirect
from .transport import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_HEAD_TIMEOUT,
    DEFAULT_MAX_BODY_SIZE,
    DEFAULT_MAX_HEAD_SIZE,
    DEFAULT_MAX_HEADER_COUNT,
    AnyResponse,
    Headers,
    HttpLimits,
    HttpServer,
    Request,
    Response,
)

logger = logging.getLogger(__name__)

Handler = Callable[[Request], Awaitable[AnyResponse]]

GUARDED_PREFIXES = ("/v1", "/v2", "/inference", "/cohere")
"""Paths that need the API key when one is configured (vLLM's AuthenticationMiddleware)."""

LOAD_TRACKED_PATHS = frozenset(
    {
        "/v1/responses",
        "/v1/responses/{response_id}",
        "/v1/responses/{response_id}/cancel",
        "/v1/messages",
        "/v1/messages/count_tokens",
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/audio/transcriptions",
        "/v1/audio/translations",
        "/v1/embeddings",
        "/pooling",
        "/classify",
        "/score",
        "/v1/score",
        "/rerank",
        "/v1/rerank",
        "/v2/rerank",
        "/inference/v1/generate",
    }
)
"""Inference routes counted by ``GET /load`` (vLLM's list)."""

_CORS_ALL_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "QUERY")
_CORS_SAFELISTED_HEADERS = {"Accept", "Accept-Language", "Content-Language", "Content-Type"}


class ServerSettings(msgspec.Struct):
    """HTTP-level settings, with vLLM 0.32's defaults and argument names."""

    served_model_names: list[str] = msgspec.field(default_factory=lambda: ["model"])
    max_model_len: int | None = None
    api_key: list[str] = msgspec.field(default_factory=list)
    """Accepted bearer tokens; empty disables the check (vLLM also reads ``VLLM_API_KEY``,
    which the CLI layer resolves)."""
    allowed_origins: list[str] = msgspec.field(default_factory=list)
    allowed_methods: list[str] = msgspec.field(default_factory=lambda: ["*"])
    allowed_headers: list[str] = msgspec.field(default_factory=lambda: ["*"])
    allow_credentials: bool = False
    enable_request_id_headers: bool = False
    enable_server_load_tracking: bool = False
    """Count in-flight inference requests for ``GET /load`` (off: it reports 0, as in vLLM)."""
    http_timeout_keep_alive: float = 5.0
    max_body_size: int = DEFAULT_MAX_BODY_SIZE
    """Largest request body (bytes); a larger one is refused with 413."""
    max_head_size: int = DEFAULT_MAX_HEAD_SIZE
    """Largest request line + headers (bytes); a larger head is refused with 431 (414)."""
    max_header_count: int = DEFAULT_MAX_HEADER_COUNT
    """Most request headers; more are refused with 431."""
    http_timeout_head: float = DEFAULT_HEAD_TIMEOUT
    """Seconds a started request head may take to arrive before 408."""
    http_timeout_body: float = DEFAULT_BODY_TIMEOUT
    """Seconds a started request body may go without data before 408."""
    root_path: str | None = None
    """``--root-path``: a request path under this prefix is routed without it (FastAPI's
    ``root_path`` as vLLM sets it; paths outside it are routed as they are)."""
    http_metrics: bool = True
    """Record vLLM's ``http_*`` Prometheus series (its instrumentator's defaults)."""
    scheme: str = "http"
    """``https`` when the server speaks TLS: the scheme of the trailing-slash redirects."""


class _Cors:
    """Starlette's CORSMiddleware behaviour (which vLLM installs), precomputed as bytes."""

    def __init__(self, settings: ServerSettings) -> None:
        origins = settings.allowed_origins
        methods: Sequence[str] = settings.allowed_methods
        if "*" in methods:
            methods = _CORS_ALL_METHODS
        self.allow_all_origins = "*" in origins
        self.allow_all_headers = "*" in settings.allowed_headers
        self.credentials = settings.allow_credentials
        self.origins = set(origins)
        self.methods = set(methods)
        allow_headers = sorted(_CORS_SAFELISTED_HEADERS | set(settings.allowed_headers))
        self.allow_headers = {h.lower() for h in allow_headers}
        self.explicit_preflight_origin = not self.allow_all_origins or self.credentials
        simple: Headers = []
        if self.allow_all_origins:
            simple.append((b"access-control-allow-origin", b"*"))
        if self.credentials:
            simple.append((b"access-control-allow-credentials", b"true"))
        self.simple = simple
        pre: Headers = [
            (
                b"vary",
                b"Origin, Access-Control-Request-Method, Access-Control-Request-Headers, "
                b"Access-Control-Request-Private-Network",
            )
        ]
        if not self.explicit_preflight_origin:
            pre.append((b"access-control-allow-origin", b"*"))
        pre.append((b"access-control-allow-methods", ", ".join(methods).encode()))
        pre.append((b"access-control-max-age", b"600"))
        if allow_headers and not self.allow_all_headers:
            pre.append((b"access-control-allow-headers", ", ".join(allow_headers).encode()))
        if self.credentials:
            pre.append((b"access-control-allow-credentials", b"true"))
        self.preflight = pre

    def allowed_origin(self, origin: str) -> bool:
        return self.allow_all_origins or origin in self.origins

    def preflight_response(self, request: Request, origin: str) -> Response:
        headers = list(self.preflight)
        failures = []
        if self.allowed_origin(origin):
            if self.explicit_preflight_origin:
                headers.append((b"access-control-allow-origin", origin.encode("latin-1")))
        else:
            failures.append("origin")
        if request.header(b"access-control-request-method") not in self.methods:
            failures.append("method")
        requested = request.headers.get(b"access-control-request-headers")
        if self.allow_all_headers and requested is not None:
            headers.append((b"access-control-allow-headers", requested))
        elif requested is not None:
            for h in requested.decode("latin-1").split(","):
                if h.lower().strip() not in self.allow_headers:
                    failures.append("headers")
                    break
        if request.headers.get(b"access-control-request-private-network") is not None:
            failures.append("private-network")
        ctype = b"text/plain; charset=utf-8"
        if failures:
            body = ("Disallowed CORS " + ", ".join(failures)).encode()
            return Response(body, 400, ctype, headers)
        return Response(b"OK", 200, ctype, headers)

    def decorate(self, headers: Headers, origin: str | None) -> None:
        """Add the simple-response headers (Starlette also adds ``vary: Origin`` when it does
        not mirror the origin, i.e. on every request without an ``Origin`` header)."""
        if origin is not None:
            headers.extend(self.simple)
            if (self.allow_all_origins and self.credentials) or (
                not self.allow_all_origins and origin in self.origins
            ):
                headers.append((b"access-control-allow-origin", origin.encode("latin-1")))
        _append_vary_origin(headers)


def _require_json(handler: Handler) -> Handler:
    # Not a coroutine of its own: it refuses when called and hands back the handler's
    # awaitable, which the caller awaits (one coroutine frame less per request to create and
    # resume through).
    def checked(request: Request) -> Awaitable[AnyResponse]:
        ctype = request.headers.get(b"content-type", b"")
        # vLLM compares the part before any ";" as it is (no space trimmed within the value)
        if ctype.lower().split(b";", 1)[0] != b"application/json":
            raise errors.RequestValidationFailed(
                f"1 validation error:\n  {errors.UNSUPPORTED_MEDIA_TYPE}"
            )
        return handler(request)

    return checked


def _route_path(path: str, root: str) -> str:
    """``path`` without the ``root`` prefix where it is a whole path segment (Starlette's
    ``get_route_path``)."""
    if not path.startswith(root):
        return path
    if len(path) == len(root):
        return ""
    return path[len(root) :] if path[len(root)] == "/" else path


def _append_vary_origin(headers: Headers) -> None:
    for i, (name, value) in enumerate(headers):
        if name == b"vary":
            headers[i] = (b"vary", value + b", Origin")
            return
    headers.append((b"vary", b"Origin"))


class App:
    """Routes requests to handlers with vLLM's middleware semantics; the HTTP server's app."""

    def __init__(self, settings: ServerSettings, metrics: HttpMetrics | None = None) -> None:
        self.settings = settings
        self.metrics = metrics
        """vLLM's ``http_*`` series, recorded when given."""
        self.server_load = 0
        """In-flight requests on inference routes (``GET /load``)."""
        self._routes: dict[str, dict[str, Handler]] = {}
        self._allow: dict[str, str] = {}
        self._excluded: dict[str, bool] = {}
        self._mounts: list[tuple[str, Handler]] = []
        self._templates: list[tuple[re.Pattern[str], str]] = []
        self._tracked = LOAD_TRACKED_PATHS if settings.enable_server_load_tracking else frozenset()
        self._api_tokens = [hashlib.sha256(k.encode()).digest() for k in settings.api_key if k]
        self._cors = _Cors(settings)
        self._root_path = settings.root_path or ""
        self._closers: list[Callable[[], Awaitable[None]]] = []

    def on_close(self, closer: Callable[[], Awaitable[None]]) -> None:
        """Have :meth:`aclose` await ``closer`` (resources the handlers hold: HTTP sessions,
        periodic tasks)."""
        self._closers.append(closer)

    async def aclose(self) -> None:
        """Release what the handlers hold, once the server has stopped serving (each closer
        runs even when an earlier one fails)."""
        closers, self._closers = self._closers, []
        for closer in closers:
            try:
                await closer()
            except Exception:
                logger.warning("closing %r failed", closer, exc_info=True)

    def route(self, method: str, path: str, handler: Handler, json_body: bool = False) -> None:
        """Register ``handler`` for ``method`` (e.g. ``"POST"``) on the exact ``path``, or on
        a path template such as ``/v1/responses/{response_id}`` (a ``{name}`` segment matches
        one non-empty path segment, as Starlette's; the template labels the metrics).

        With ``json_body`` the request must declare ``Content-Type: application/json`` (vLLM's
        ``validate_json_request`` dependency), else it gets vLLM's 400 without reaching the
        handler."""
        if json_body:
            handler = _require_json(handler)
        if "{" in path and path not in self._routes:
            pattern = re.sub(r"\\\{[^/]*?\\\}", "[^/]+", re.escape(path))
            self._templates.append((re.compile(pattern + "$"), path))
        self._routes.setdefault(path, {})[method] = handler
        # vLLM registers one route per method, and Starlette's 405 names the methods of the
        # first route on the path only (GET and POST /ping: ``allow: GET``)
        self._allow.setdefault(path, method)
        self._excluded[path] = metrics_excluded(path)

    def mount(self, prefix: str, handler: Handler) -> None:
        """Register ``handler`` for every method on every path starting with ``prefix`` that no
        route takes (as Starlette's ``Mount`` with vLLM's ``^/metrics(?P<path>.*)$`` regex)."""
        self._mounts.append((prefix, handler))

    def _authorized(self, request: Request) -> bool:
        value = request.header(b"authorization")
        if not value:
            return False
        scheme, _, token = value.partition(" ")
        if scheme.lower() != "bearer":
            return False
        digest = hashlib.sha256(token.encode()).digest()
        ok = False
        for expected in self._api_tokens:
            ok |= hmac.compare_digest(digest, expected)
        return ok

    async def __call__(self, request: Request) -> AnyResponse:
        response = await self._dispatch(request)
        if self.settings.enable_request_id_headers:
            rid = request.headers.get(b"x-request-id")
            if rid is None:  # (an empty header is echoed, as vLLM's middleware does)
                rid = uuid.uuid4().hex.encode()
            response.headers.append((b"x-request-id", rid))
        return response

    async def _dispatch(self, request: Request) -> AnyResponse:
        full_path = request.path
        if self._root_path:
            request.path = _route_path(request.path, self._root_path)
        path = request.path
        if (
            self._api_tokens
            and request.method != "OPTIONS"
            and path.startswith(GUARDED_PREFIXES)
            and not self._authorized(request)
        ):
            return Response(errors.UNAUTHORIZED_BODY, 401)
        origin = request.header(b"origin")
        if (
            origin is not None
            and request.method == "OPTIONS"
            and b"access-control-request-method" in request.headers
        ):
            return self._cors.preflight_response(request, origin)
        response = await self._route(request, path, full_path)
        self._cors.decorate(response.headers, origin)
        return response

    def _methods(self, path: str) -> tuple[str, dict[str, Handler] | None]:
        """The route (or template) taking ``path``, and its handlers by method."""
        methods = self._routes.get(path)
        if methods is None and self._templates:
            for pattern, template in self._templates:
                if pattern.match(path):
                    return template, self._routes[template]
        return path, methods

    async def _route(self, request: Request, path: str, full_path: str) -> AnyResponse:
        start = time.perf_counter()
        # routes, metrics and load tracking go by the template
        path, methods = self._methods(path)
        handler = None if methods is None else methods.get(request.method)
        if handler is None:
            for prefix, mounted in self._mounts:
                if path.startswith(prefix):
                    return await self._mounted(request, prefix, mounted, start)
            if methods is None:
                response: AnyResponse = self._not_found(request, path, full_path)
            else:
                response = errors.method_not_allowed(self._allow[path])
            # vLLM's instrumentator labels what did not fully match a route "none"
            if self.metrics is not None and not metrics_excluded(path):
                self._instrument(request, "none", response, start)
            return response
        tracked = path in self._tracked
        if tracked:
            self.server_load += 1
        try:
            response = await handler(request)
        except BaseException as exc:
            if tracked:
                self.server_load -= 1
            if not isinstance(exc, Exception):
                raise  # cancellation: the client is gone
            if not isinstance(exc, errors.ApiError):
                logger.debug("Request failed", exc_info=exc)
            response = errors.error_response(exc)
        else:
            if tracked:
                _on_sent(response, self._release_load)
        if self.metrics is not None and not self._excluded[path]:
            self._instrument(request, path, response, start)
        return response

    def _not_found(self, request: Request, path: str, full_path: str) -> Response:
        """FastAPI's 404, or Starlette's trailing-slash redirect when a route takes the path
        with its trailing slash toggled."""
        if path != "/" and self._methods(slash_toggled(path))[1] is not None:
            return trailing_slash_redirect(
                self.settings.scheme,
                request.header(b"host"),
                slash_toggled(full_path),
                request.query,
                request.server,
            )
        return errors.not_found()

    async def _mounted(
        self, request: Request, prefix: str, handler: Handler, start: float
    ) -> AnyResponse:
        try:
            response = await handler(request)
        except Exception as exc:
            response = errors.error_response(exc)
        if self.metrics is not None and not metrics_excluded(request.path):
            self._instrument(request, prefix, response, start)
        return response

    def _instrument(
        self, request: Request, handler: str, response: AnyResponse, start: float
    ) -> None:
        metrics = self.metrics
        assert metrics is not None
        length = request.headers.get(b"content-length")
        request_size = int(length) if length is not None and length.isdigit() else 0
        response_size = len(response.body) if isinstance(response, Response) else 0
        record = partial(metrics.observe_since, request.method, handler, response.status,
                         request_size, response_size, start)  # fmt: skip
        if response.background is None:
            response.background = record
        else:
            _on_sent(response, record)

    def record_refusal(self, method: str, status: int, duration: float) -> None:
        """Count a request the transport refused before routing (handler ``"none"``, as vLLM's
        instrumentator labels what matched no route; sizes unknown, so 0)."""
        if self.metrics is not None:
            self.metrics.observe(method, "none", status, 0, 0, duration)

    def _release_load(self) -> None:
        self.server_load -= 1


def _on_sent(response: AnyResponse, callback: Callable[[], None]) -> None:
    """Run ``callback`` once the response has been sent (or abandoned)."""
    previous = response.background
    if previous is None:
        response.background = callback
        return

    def both() -> None:
        try:
            previous()
        finally:
            callback()

    response.background = both


def make_server(app: App, wrap: Callable[[Handler], Handler] | None = None) -> HttpServer:
    """The HTTP server for ``app``, with its settings' limits, refusals worded and counted by
    the app; ``wrap(app)``, when given, takes the requests instead (e.g. to answer a route
    otherwise)."""
    return HttpServer(
        wrap(app) if wrap is not None else app,
        limits=http_limits(app.settings),
        refusal=errors.refusal_response,
        on_refusal=app.record_refusal,
    )


def http_limits(settings: ServerSettings) -> HttpLimits:
    """The transport limits of ``settings``."""
    return HttpLimits(
        max_head_size=settings.max_head_size,
        max_header_count=settings.max_header_count,
        max_body_size=settings.max_body_size,
        head_timeout=settings.http_timeout_head,
        body_timeout=settings.http_timeout_body,
        keep_alive_timeout=settings.http_timeout_keep_alive,
    )

"""A small HTTP/1.1 server on asyncio + httptools: the transport under the OpenAI routes.

Why our own: SSE streaming is the hot path of the frontend, and an ASGI stack costs several
Python calls, dicts and awaits per chunk (see bench/bench_http.py and BENCHMARKS.md). Here a
streamed chunk is one ``transport.write`` of ``<hex len>\\r\\n<bytes>\\r\\n``.

The surface: :class:`Request` (what a handler gets); :class:`Response`,
:class:`StreamingResponse` (an iterated body) and :class:`PushedStreamingResponse` (a body pushed
into a :class:`StreamSink` from callbacks) for what it returns; and :class:`HttpServer`, which
serves an ``async def app(request) -> AnyResponse`` on any listening socket (inherited fd, TCP or
Unix) within :class:`HttpLimits`. The app must turn its own exceptions into responses; anything
that escapes it is answered with a plain 500 here (a last resort, logged). The transport knows
no API error format: requests it refuses itself are worded by a renderer the app layer passes.

Client disconnect cancels the task running the app for that request (and closes a streaming body
iterator), so the generation code's cancellation path aborts the engine request.

Modules: ``messages`` (request/response types), ``framing`` (response heads), ``limits``,
``reader`` / ``writer`` / ``connection`` (the protocol), ``state`` (what a server's connections
share), ``server``, ``sockets``, ``tls``.
"""

from .framing import SSE_KEEP_ALIVE_COMMENT
from .limits import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_HEAD_TIMEOUT,
    DEFAULT_KEEP_ALIVE_TIMEOUT,
    DEFAULT_MAX_BODY_SIZE,
    DEFAULT_MAX_HEAD_SIZE,
    DEFAULT_MAX_HEADER_COUNT,
    INVALID_REQUEST,
    HttpLimits,
    RefusalRecorder,
    RefusalRenderer,
    plain_refusal,
)
from .messages import (
    AnyResponse,
    App,
    Headers,
    PushedStreamingResponse,
    Request,
    Response,
    StreamingResponse,
    StreamSink,
    json_response,
)
from .server import HttpServer
from .sockets import LISTEN_BACKLOG, bind_tcp, bind_unix, socket_from_fd
from .tls import CertificateRefresher, TlsSettings, server_ssl_context

__all__ = [
    "DEFAULT_BODY_TIMEOUT",
    "DEFAULT_HEAD_TIMEOUT",
    "DEFAULT_KEEP_ALIVE_TIMEOUT",
    "DEFAULT_MAX_BODY_SIZE",
    "DEFAULT_MAX_HEADER_COUNT",
    "DEFAULT_MAX_HEAD_SIZE",
    "INVALID_REQUEST",
    "LISTEN_BACKLOG",
    "SSE_KEEP_ALIVE_COMMENT",
    "AnyResponse",
    "App",
    "CertificateRefresher",
    "Headers",
    "HttpLimits",
    "HttpServer",
    "PushedStreamingResponse",
    "RefusalRecorder",
    "RefusalRenderer",
    "Request",
    "Response",
    "StreamSink",
    "StreamingResponse",
    "TlsSettings",
    "bind_tcp",
    "bind_unix",
    "json_response",
    "plain_refusal",
    "server_ssl_context",
    "socket_from_fd",
]

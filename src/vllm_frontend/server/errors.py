"""The one place where exceptions become HTTP error responses, in vLLM's Python-frontend shape.

vLLM 0.32 (vllm/entrypoints/serve/exception_handling/) answers every error with
``{"error": {"message": str, "type": str, "param": str | null, "code": <status int>}}``
(``param`` is always present, ``null`` when unknown). ``type`` is an exception-style name
(``BadRequestError``, ``NotFoundError``, ...) for errors raised by vLLM code, and the HTTP
status phrase (``"Bad Request"``, ``"Request Entity Too Large"``) for framework-level errors
such as body validation. Unknown routes and wrong methods are FastAPI's ``{"detail": ...}``.

Lower layers (text, chat, engine) raise ``ValueError`` subclasses for client mistakes; an
exception with a ``parameter`` (or ``param``) attribute is reported with that ``param``.
Everything else is a 500 ``InternalServerError``, matching vLLM's fallback handlers.
"""

from __future__ import annotations

import json
import re
from http import HTTPStatus

import msgspec

from vllm_frontend.engine.errors import EngineDeadError
from vllm_frontend.llm.admission import AdmissionRejected
from vllm_frontend.multimodal.media.errors import MediaError

from .transport import Response

_encode = msgspec.json.Encoder().encode


class _ErrorInfo(msgspec.Struct):
    message: str
    type: str
    param: str | None
    code: int


class _ErrorBody(msgspec.Struct):
    error: _ErrorInfo


def error_json(message: str, err_type: str, status: int, param: str | None = None) -> bytes:
    """The JSON bytes of vLLM's error body (a lone surrogate from the request, which a JSON
    body may spell as ``\\ud800`` and a message may quote, is written as that escape)."""
    body = _ErrorBody(_ErrorInfo(message, err_type, param, status))
    try:
        return _encode(body)
    except UnicodeEncodeError:
        text = json.dumps(msgspec.to_builtins(body), ensure_ascii=False, separators=(",", ":"))
        return _LONE_SURROGATE.sub(_escape_surrogate, text).encode()


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape_surrogate(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


class ApiError(Exception):
    """Base of errors that carry their own HTTP status, vLLM ``type`` name and ``param``."""

    status: int = 500
    err_type: str = "InternalServerError"

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


class BadRequest(ApiError):
    """400 ``BadRequestError`` (vLLM's ``create_error_response`` default)."""

    status = 400
    err_type = "BadRequestError"


class InvalidParameter(BadRequest):
    """400 for one bad parameter, worded like vLLM's ``VLLMValidationError``:
    ``"<message> (parameter=<name>[, value=<value>])"`` with ``param`` = the name."""

    def __init__(self, message: str, *, parameter: str, value: object = None) -> None:
        extras = [f"parameter={parameter}"]
        if value is not None:
            extras.append(f"value={value}")
        super().__init__(f"{message} ({', '.join(extras)})", param=parameter)


class RequestValidationFailed(ApiError):
    """400 for a body that does not match the request schema (FastAPI's RequestValidationError):
    ``type`` is the status phrase ``"Bad Request"``, ``param`` the dotted location."""

    status = 400
    err_type = HTTPStatus.BAD_REQUEST.phrase


class NotFound(ApiError):
    """404 ``NotFoundError`` (e.g. an unknown model)."""

    status = 404
    err_type = "NotFoundError"


class PermissionDenied(ApiError):
    """403 ``PermissionDeniedError`` (e.g. a scale-out route without ``--enable-scale-out``)."""

    status = 403
    err_type = "PermissionDeniedError"


class UnprocessableEntity(ApiError):
    """422 ``UnprocessableEntityError``."""

    status = 422
    err_type = "UnprocessableEntityError"


class NotImplementedFeature(ApiError):
    """501 ``NotImplementedError``."""

    status = 501
    err_type = "NotImplementedError"


class InternalError(ApiError):
    """500 ``InternalServerError``."""


class ServiceUnavailable(ApiError):
    """503 ``ServiceUnavailableError`` (e.g. a retryable engine failure)."""

    status = 503
    err_type = "ServiceUnavailableError"


class HttpError(ApiError):
    """A framework-level HTTP error: ``type`` is the status phrase (vLLM's HTTPException path)."""

    def __init__(self, status: int, message: str | None = None) -> None:
        phrase = HTTPStatus(status).phrase
        super().__init__(message if message is not None else phrase)
        self.status = status
        self.err_type = phrase


class DetailHttpError(ApiError):
    """An HTTP error FastAPI answers itself, before vLLM's handlers see it: the body is
    ``{"detail": message}`` (e.g. a body it cannot read as JSON at all)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.err_type = HTTPStatus(status).phrase


# vLLM strips addresses, tracebacks and file paths from every error message
# (vllm/entrypoints/serve/exception_handling/utils.py); same idea here.
_ADDR = re.compile(r" at 0x[0-9a-fA-F]+>")
_TRACE = re.compile(r'\n?\s*File "[^"]+", line \d+, in \S+(\n\s+.*)?')
_ROOTED_PATH = re.compile(r"/(?:home|usr|opt|var|tmp|root|lib|mnt|srv)(?:/[\w.\-]+)+")
_FILE_PATH = re.compile(r"(?:/[\w\-]+)+/[\w\-]+\.\w+")


def sanitize_message(message: str) -> str:
    """Remove memory addresses, traceback lines and file paths from a message."""
    if "/" in message or " at 0x" in message:
        message = _ADDR.sub(">", message)
        message = _TRACE.sub("", message)
        message = _ROOTED_PATH.sub("<path>", message)
        message = _FILE_PATH.sub("<path>", message)
    return message.strip()


ENGINE_DEAD_MESSAGE = "EngineCore encountered an issue. See stack trace (above) for the root cause."
"""What a request failed by a dead engine is told (vllm/v1/engine/exceptions.py)."""


def classify(exc: BaseException) -> tuple[int, str, str, str | None]:
    """(status, type, message, param) for any exception, following vLLM's mapping."""
    if isinstance(exc, ApiError):
        return exc.status, exc.err_type, exc.message, exc.param
    if isinstance(exc, MediaError):
        return exc.status, exc.err_type, exc.message, exc.param
    if isinstance(exc, EngineDeadError):
        # vLLM's EngineDeadError says only this, whatever killed the engine (the log has ours)
        return 500, "InternalServerError", ENGINE_DEAD_MESSAGE, None
    if isinstance(exc, AdmissionRejected):
        # vLLM's GracefulHTTPError: ``type`` is the status phrase.
        return 503, HTTPStatus.SERVICE_UNAVAILABLE.phrase, exc.message, None
    if isinstance(exc, (ValueError, TypeError, OverflowError)):
        # lower layers name the field as ``parameter`` (like VLLMValidationError) or ``param``
        param = getattr(exc, "parameter", None)
        if param is None:
            param = getattr(exc, "param", None)
        return 400, "BadRequestError", str(exc), param if isinstance(param, str) else None
    if isinstance(exc, NotImplementedError):
        return 501, "NotImplementedError", str(exc), None
    if any(cls.__name__ == "TemplateError" for cls in type(exc).__mro__):
        return 400, "BadRequestError", str(exc), None
    return 500, "InternalServerError", str(exc), None


def error_response(
    exc: BaseException, headers: list[tuple[bytes, bytes]] | None = None
) -> Response:
    """The HTTP response vLLM sends for ``exc``."""
    if isinstance(exc, DetailHttpError):
        return Response(_encode({"detail": exc.message}), exc.status, headers=headers)
    status, err_type, message, param = classify(exc)
    return Response(
        error_json(sanitize_message(message), err_type, status, param), status, headers=headers
    )


def error_sse_event(exc: BaseException) -> bytes:
    """An error raised after a stream started, as one SSE ``data:`` event (status stays 200)."""
    status, err_type, message, param = classify(exc)
    # vLLM builds this event with json.dumps (spaced separators, ASCII escapes): same bytes here.
    info = {"message": sanitize_message(message), "type": err_type, "param": param, "code": status}
    return b"data: " + json.dumps({"error": info}).encode() + b"\n\n"


def not_found() -> Response:
    """FastAPI's answer for an unknown path."""
    return Response(b'{"detail":"Not Found"}', 404)


def method_not_allowed(allowed: str) -> Response:
    """FastAPI's answer for a known path with the wrong method (``allow`` lists the methods)."""
    return Response(b'{"detail":"Method Not Allowed"}', 405, headers=[(b"allow", allowed.encode())])


UNSUPPORTED_MEDIA_TYPE = "Unsupported Media Type: Only 'application/json' is allowed"
"""vLLM's message (inside a validation-error report) for a body that is not declared JSON."""

UNAUTHORIZED_BODY = b'{"error":"Unauthorized"}'
"""vLLM's AuthenticationMiddleware body for a missing or wrong API key (status 401)."""


def refusal_response(status: int, message: str) -> Response:
    """How the app words a request the HTTP transport refuses before routing it: a 400 for an
    unparsable request as uvicorn's plain text; every other status (408, 413, 414, 431) in
    vLLM's shape for framework-level errors (``type`` is the status phrase)."""
    if status == 400:
        return Response(message.encode(), 400, b"text/plain; charset=utf-8")
    return Response(error_json(message, HTTPStatus(status).phrase, status), status)

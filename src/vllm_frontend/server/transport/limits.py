"""How much, and how slowly, a client may send; and how the server words its own refusals.

Every limit answers with the status a careful server gives, then closes the connection: 400 for
a request that cannot be framed safely, 408 for a head or body that stops arriving, 413 for a
body over ``max_body_size`` (or, counting chunk framing and extensions, twice that plus a head's
worth of bytes read for it), 414/431 for a request line/head over ``max_head_size`` (or more
than ``max_header_count`` headers). The transport knows no error-body format: the app layer
passes a :data:`RefusalRenderer` (the default writes the message as plain text).
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from .messages import Response

DEFAULT_MAX_BODY_SIZE = 64 * 1024 * 1024
"""Largest request body accepted (bytes) before answering 413."""
DEFAULT_MAX_HEAD_SIZE = 64 * 1024
"""Most bytes of request line + headers before answering 431 (414 for the line alone)."""
DEFAULT_MAX_HEADER_COUNT = 256
"""Most request headers (vLLM's ``h11_max_header_count`` default)."""
DEFAULT_HEAD_TIMEOUT = 30.0
"""Seconds a started request head may take to arrive in full before 408."""
DEFAULT_BODY_TIMEOUT = 30.0
"""Seconds a started request body may go without a byte arriving before 408."""
DEFAULT_KEEP_ALIVE_TIMEOUT = 5.0
"""Seconds an idle connection stays open (vLLM's ``VLLM_HTTP_TIMEOUT_KEEP_ALIVE``)."""


class HttpLimits(msgspec.Struct, frozen=True):
    """The limits one server applies to every connection."""

    max_head_size: int = DEFAULT_MAX_HEAD_SIZE
    max_header_count: int = DEFAULT_MAX_HEADER_COUNT
    max_body_size: int = DEFAULT_MAX_BODY_SIZE
    head_timeout: float = DEFAULT_HEAD_TIMEOUT
    body_timeout: float = DEFAULT_BODY_TIMEOUT
    keep_alive_timeout: float = DEFAULT_KEEP_ALIVE_TIMEOUT


RefusalRenderer = Callable[[int, str], Response]
"""Builds the response for a request the transport refuses: ``(status, message) -> Response``."""

RefusalRecorder = Callable[[str, int, float], None]
"""Told of every refusal sent: ``(method or "", status, seconds since the request began)``."""


def plain_refusal(status: int, message: str) -> Response:
    """The default refusal: ``message`` as ``text/plain``."""
    return Response(message.encode(), status, b"text/plain; charset=utf-8")


INVALID_REQUEST = "Invalid HTTP request received."
"""The message of a 400 for a request that cannot be parsed or framed (uvicorn's words)."""
BODY_TOO_LARGE = "Request body too large."
"""The message of a 413."""

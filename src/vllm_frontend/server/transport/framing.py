"""Response heads and body framing bytes."""

from __future__ import annotations

from email.utils import formatdate
from http import HTTPStatus

from .messages import AnyResponse, Response


def _status_line(status: int) -> bytes:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    return f"HTTP/1.1 {status} {phrase}\r\n".encode("latin-1")


_STATUS_LINES: dict[int, bytes] = {s.value: _status_line(s.value) for s in HTTPStatus}

SSE_KEEP_ALIVE_COMMENT = b": keep-alive\n\n"
"""What an idle SSE stream sends every ``keep_alive_interval`` seconds (vLLM's comment)."""
KEEP_ALIVE_CHUNK = b"%x\r\n%b\r\n" % (len(SSE_KEEP_ALIVE_COMMENT), SSE_KEEP_ALIVE_COMMENT)
"""The keep-alive comment as one chunk of a chunked body."""
LAST_CHUNK = b"0\r\n\r\n"
"""The end of a chunked body."""
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
"""The interim response to ``Expect: 100-continue``."""


def default_lines(now: float) -> bytes:
    """The header lines uvicorn (vLLM's server) puts before every response's own: ``date``
    (RFC 9110 §6.6.1: ``now`` in whole seconds, as uvicorn formats it) and ``server``."""
    date = formatdate(int(now), usegmt=True).encode()
    return b"date: %b\r\nserver: uvicorn\r\n" % date


def response_head(
    response: AnyResponse, keep_alive: bool, defaults: bytes, chunked: bool = True
) -> bytes:
    """Status line and headers of ``response``, after the ``defaults`` lines (see
    :func:`default_lines`): ``Content-Length`` for a complete body, else
    ``Transfer-Encoding: chunked`` (or nothing with ``chunked=False``: a close-delimited body
    for an HTTP/1.0 client, which needs ``keep_alive=False``)."""
    status = response.status
    line = _STATUS_LINES.get(status) or _status_line(status)
    parts = [line, defaults]
    for name, value in response.headers:
        parts.append(b"%b: %b\r\n" % (name, value))
    if isinstance(response, Response):
        parts.append(b"content-length: %d\r\n" % len(response.body))
    elif chunked:
        parts.append(b"transfer-encoding: chunked\r\n")
    if not keep_alive:
        parts.append(b"connection: close\r\n")
    parts.append(b"\r\n")
    return b"".join(parts)

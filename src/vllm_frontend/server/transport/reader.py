"""The reading half of a connection: httptools' callbacks assemble requests within the limits.

Beyond what httptools (llhttp, strict) refuses, the reader refuses itself what could frame a
request two ways (``Content-Length`` with ``Transfer-Encoding``, a repeated framing header, a
transfer coding other than ``chunked``), an HTTP/1.1 request without exactly one ``Host``, and
what is too large or too slow (see ``limits``).
Timers cost nothing for a request that arrives in one read: one is armed only when a read ends
inside a request.
"""

from __future__ import annotations

import asyncio
from urllib.parse import unquote

import httptools

from .framing import CONTINUE
from .limits import BODY_TOO_LARGE, INVALID_REQUEST, HttpLimits
from .messages import Request
from .writer import ResponseWriter

_SINGLE_HEADERS = (b"content-length", b"transfer-encoding", b"host")
"""Headers a request may carry once (RFC 9112 §3.2, §6.3): a repeat is refused, not merged."""


class _NoCallbacks:
    """A parser protocol without callbacks."""


DETACHED_PARSER = httptools.HttpRequestParser(_NoCallbacks())
"""The parser a closed connection keeps in place of its own (which references it back)."""


class Refused(Exception):
    """Raised from a parser callback to refuse the request with ``status``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class RequestReader(ResponseWriter):
    """Parse state of a connection and the httptools callbacks."""

    __slots__ = (
        "_body",
        "_body_size",
        "_continue_due",
        "_head_done",
        "_head_room",
        "_headers",
        "_headers_left",
        "_http11",
        "_idle_since",
        "_in_message",
        "_keep_alive_handle",
        "_last_read",
        "_limits",
        "_local_address",
        "_message_started",
        "_parser",
        "_read_timer",
        "_received",
        "_refusal",
        "_url",
    )

    def _init_reader(self, limits: HttpLimits) -> None:
        self._limits = limits
        self._parser = httptools.HttpRequestParser(self)
        self._keep_alive_handle: asyncio.TimerHandle | None = None
        self._idle_since = 0.0
        """When the connection last fell idle (its keep-alive timeout runs from there); 0.0
        while a request is on its way or being answered."""
        self._refusal: tuple[int, str] | None = None
        self._local_address: tuple[str, int | None] | None = None
        self._in_message = False
        self._head_done = False
        self._http11 = True
        self._continue_due = False
        self._received = 0
        self._message_started = 0.0
        self._last_read = 0.0
        self._read_timer: asyncio.TimerHandle | None = None
        self._url = b""
        self._headers: dict[bytes, bytes] = {}
        self._body: list[bytes] = []
        self._body_size = 0
        self._head_room = 0
        self._headers_left = 0

    # -- what the connection provides -----------------------------------------------------------

    def _dispatch(self, request: Request, keep_alive: bool, http11: bool) -> None:
        raise NotImplementedError

    def _refuse(self, status: int, message: str) -> None:
        raise NotImplementedError

    def _idle(self) -> bool:
        raise NotImplementedError

    # -- feeding ---------------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        """Parse ``data``; refuse what the parser or the limits reject."""
        if self._refusal is not None:
            return  # refused: what else arrives is discarded until we close
        # Not idle any more. The keep-alive timer is left to fire (and find the connection
        # busy) rather than cancelled and made again per request: in a running uvloop, a timer
        # made and cancelled costs ~1 us, and a connection kept busy needs none.
        self._idle_since = 0.0
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade as upgrade:
            # e.g. "Upgrade: h2c" or a WebSocket handshake: like uvicorn, ignore the upgrade and
            # answer the request (already dispatched by on_message_complete) over HTTP/1.1; what
            # follows it is the next request
            rest = data[upgrade.args[0] :]
            if rest:
                self.data_received(rest)
            return
        except httptools.HttpParserError as exc:
            cause = exc.__context__
            if isinstance(cause, Refused):
                self._refuse(cause.status, cause.message)
            else:
                self._refuse(400, INVALID_REQUEST)
            return
        if self._in_message:
            # Reads that end inside a request count whole towards its limits, so that what the
            # parser consumes without a callback (header padding, chunk extensions) cannot
            # grow without bound: the head's fields are counted by callbacks where it began.
            limits = self._limits
            received = self._received
            if not self._head_done:
                if received < 0:
                    received = limits.max_head_size - self._head_room
                else:
                    received += len(data)
                self._received = received
                if received > limits.max_head_size:
                    self._refuse(431, "Request header fields too large.")
                    return
            else:
                self._received = received = max(received, 0) + len(data)
                if received > 2 * limits.max_body_size + limits.max_head_size:
                    self._refuse(413, BODY_TOO_LARGE)
                    return
            self._watch_read()

    def _watch_read(self) -> None:
        # A read ended inside a request: time it (the head from its first read, the body
        # between reads).
        now = self._loop.time()
        self._last_read = now
        if self._read_timer is None and not self._continue_due:
            # (a client waiting for "100 Continue" is timed from when it gets it)
            if not self._message_started:
                self._message_started = now
            limits = self._limits
            timeout = limits.body_timeout if self._head_done else limits.head_timeout
            self._read_timer = self._loop.call_at(now + timeout, self._read_check)

    def _read_check(self) -> None:
        self._read_timer = None
        if not self._in_message or self._closed:
            return
        if self._head_done:
            deadline = self._last_read + self._limits.body_timeout
        else:
            deadline = self._message_started + self._limits.head_timeout
        if self._loop.time() >= deadline:
            self._refuse(408, "Request timed out.")
        else:
            self._read_timer = self._loop.call_at(deadline, self._read_check)

    def _cancel_read_timer(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    # -- httptools callbacks -------------------------------------------------------------------

    def on_message_begin(self) -> None:
        """A request starts."""
        self._in_message = True
        self._head_done = False
        self._received = -1  # began in the read being parsed
        self._url = b""
        self._headers = {}
        self._body = []
        self._body_size = 0
        limits = self._limits
        self._head_room = limits.max_head_size
        self._headers_left = limits.max_header_count

    def on_url(self, url: bytes) -> None:
        """(A piece of) the request target."""
        self._url += url
        self._head_room -= len(url)
        if self._head_room < 0:
            raise Refused(414, "Request line too long.")

    def on_header(self, name: bytes, value: bytes) -> None:
        """One header line."""
        self._headers_left -= 1
        self._head_room -= len(name) + len(value) + 4
        if self._head_room < 0 or self._headers_left < 0:
            raise Refused(431, "Request header fields too large.")
        key = name.lower()
        # the first of repeated headers counts (as Starlette's Headers.get reads them); an
        # identity check cannot tell a repeat: CPython shares one-byte values such as b"y"
        headers = self._headers
        if key not in headers:
            headers[key] = value
        elif key in _SINGLE_HEADERS:
            raise Refused(400, INVALID_REQUEST)  # e.g. a second Content-Length: ambiguous length

    def on_headers_complete(self) -> None:
        """The head is complete: check the framing and the declared size."""
        self._head_done = True
        if self._read_timer is not None:
            self._cancel_read_timer()
            self._message_started = 0.0
        version = self._parser.get_http_version()
        self._http11 = http11 = version == "1.1"
        if not http11 and version != "1.0":
            raise Refused(400, INVALID_REQUEST)  # HTTP/0.9 (no version), 1.2, ...
        headers = self._headers
        coding = headers.get(b"transfer-encoding")
        length = headers.get(b"content-length")
        if coding is not None and (length is not None or coding.strip().lower() != b"chunked"):
            raise Refused(400, INVALID_REQUEST)  # CL with TE, or a coding we cannot frame
        if length is not None and int(length) > self._limits.max_body_size:
            raise Refused(413, BODY_TOO_LARGE)
        if b"expect" in headers and headers[b"expect"].lower() == b"100-continue" and http11:
            # Only once every earlier response is out; the connection sends it when it gets
            # there (or skips it if the body comes anyway).
            if self._idle():
                assert self._transport is not None
                self._write(self._transport, CONTINUE)
            else:
                self._continue_due = True

    def on_body(self, body: bytes) -> None:
        """A piece of the body."""
        self._body_size += len(body)
        if self._body_size > self._limits.max_body_size:
            self._body = []
            raise Refused(413, BODY_TOO_LARGE)
        self._body.append(body)

    def on_message_complete(self) -> None:
        """The request is complete: hand it to the connection."""
        self._in_message = False
        if self._read_timer is not None or self._continue_due:
            self._continue_due = False
            self._cancel_read_timer()
            self._message_started = 0.0
        url = self._url
        hpos = url.find(b"#")
        if hpos >= 0:
            url = url[:hpos]  # a fragment is the client's business (uvicorn's parse_url drops it)
        qpos = url.find(b"?")
        if qpos >= 0:
            raw_path, query = url[:qpos], url[qpos + 1 :]
        else:
            raw_path, query = url, b""
        path = raw_path.decode("latin-1")
        if "%" in path:
            path = unquote(path)
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        parser = self._parser
        method = parser.get_method().decode("ascii")
        request = Request(method, path, query, self._headers, body, self._local_address)
        # HTTP/1.0 keep-alive is not offered (as uvicorn/h11, thus vLLM): such a client gets
        # Connection: close, and close-delimited streams need the close anyway
        http11 = self._http11
        self._dispatch(request, http11 and parser.should_keep_alive(), http11)

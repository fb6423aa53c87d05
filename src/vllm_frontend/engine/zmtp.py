"""ZMTP 3.1 with the NULL mechanism, without I/O: greeting, commands, frames, a session parser.

The wire protocol libzmq speaks between sockets (rfc.zeromq.org 23/ZMTP and 37/ZMTP): a 64-byte
greeting each way (signature ``FF 00*8 7F``, version 3.1, mechanism ``NULL`` padded to 20 bytes,
the as-server flag, 31 bytes of filler), then a ``READY`` command each way carrying the socket's
properties (``Socket-Type``, and ``Identity`` for DEALER/ROUTER), then frames. A frame is a flags
byte (bit 0 MORE, bit 1 LONG: an 8-byte size instead of a 1-byte one, bit 2 COMMAND; the other
bits zero), its size in network order and its body. A message is a run of frames with MORE set
on all but the last. After the handshake a peer may send ``PING`` (a 2-byte TTL in tenths of a
second and up to 16 bytes of context), to be answered with ``PONG`` carrying the same context.

:class:`Session` is one connection's state: feed it received bytes, it returns whole messages as
lists of zero-copy ``memoryview`` frames (views of the bytes passed in, or of one buffer per large
frame) and queues what must be sent back (a ``PONG``). It raises :class:`ZmtpError` where libzmq
would drop the connection (a bad greeting, a mechanism other than NULL, a READY from a socket
type that may not talk to ours, a message or another command before READY); like libzmq it
ignores reserved flag bits and, after the handshake, commands it has no use for.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

__all__ = [
    "GREETING_SIZE",
    "PEERS",
    "Session",
    "ZmtpError",
    "command",
    "frame_header",
    "greeting",
    "message",
    "parse_properties",
    "ping",
    "ready",
]

GREETING_SIZE = 64
"""Bytes in a ZMTP 3.x greeting."""

PEERS: dict[bytes, frozenset[bytes]] = {
    b"ROUTER": frozenset((b"DEALER", b"REQ", b"ROUTER")),
    b"PULL": frozenset((b"PUSH",)),
    b"DEALER": frozenset((b"DEALER", b"REP", b"ROUTER")),
    b"PUSH": frozenset((b"PULL",)),
}
"""The socket types each socket type accepts as a peer (23/ZMTP, as libzmq checks them)."""

_MORE = 1
_LONG = 2
_COMMAND = 4
_U64 = struct.Struct(">Q")
_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")
_SIGNATURE_HEAD = 0xFF
_SIGNATURE_TAIL = 0x7F
_LARGE = 64 * 1024  # a frame at least this big is gathered in its own buffer, not the tail


class ZmtpError(Exception):
    """The peer broke the protocol; the connection must be dropped."""


def greeting(*, as_server: bool) -> bytes:
    """Our greeting: ZMTP 3.1, mechanism NULL."""
    mechanism = b"NULL".ljust(20, b"\0")
    return b"\xff" + b"\0" * 8 + b"\x7f" + b"\x03\x01" + mechanism + bytes([as_server]) + b"\0" * 31


def frame_header(size: int, *, more: bool = False, command: bool = False) -> bytes:
    """The flags byte and size that precede a frame body of ``size`` bytes."""
    flags = (_MORE if more else 0) | (_COMMAND if command else 0)
    if size > 255:
        return bytes((flags | _LONG,)) + _U64.pack(size)
    return bytes((flags, size))


def command(name: bytes, data: bytes = b"") -> bytes:
    """A whole command frame: ``name`` (1-255 bytes) followed by ``data``."""
    body = bytes((len(name),)) + name + data
    return frame_header(len(body), command=True) + body


def ready(socket_type: bytes, identity: bytes | None = None) -> bytes:
    """The READY command of a socket of ``socket_type`` (with ``Identity`` if given)."""
    props = [(b"Socket-Type", socket_type)]
    if identity is not None:
        props.append((b"Identity", identity))
    data = b"".join(bytes((len(k),)) + k + _U32.pack(len(v)) + v for k, v in props)
    return command(b"READY", data)


def ping(ttl_ds: int = 0, context: bytes = b"") -> bytes:
    """A PING command (TTL in tenths of a second, context of at most 16 bytes)."""
    return command(b"PING", _U16.pack(ttl_ds) + context)


def message(parts: Sequence[Any]) -> list[Any]:
    """The buffers to write for a message: a header before each part, the parts themselves
    untouched (a large part is written from the caller's buffer, not copied)."""
    out: list[Any] = []
    last = len(parts) - 1
    short = _SHORT_MORE
    for i, part in enumerate(parts):
        if i == last:
            short = _SHORT_LAST
        size = len(part) if type(part) is bytes else memoryview(part).nbytes
        out.append(short[size] if size < 256 else frame_header(size, more=i < last))
        out.append(part)
    return out


# Every short frame header, made once: a request's small parts then cost a list index each.
_SHORT_MORE = [bytes((_MORE, n)) for n in range(256)]
_SHORT_LAST = [bytes((0, n)) for n in range(256)]


def parse_properties(data: bytes | memoryview) -> dict[bytes, bytes]:
    """The properties of a READY command's data (name-size, name, 4-byte value-size, value)."""
    data = bytes(data)
    props: dict[bytes, bytes] = {}
    i, n = 0, len(data)
    while i < n:
        klen = data[i]
        i += 1
        if klen == 0 or i + klen + 4 > n:
            raise ZmtpError("malformed READY property")
        key = data[i : i + klen]
        i += klen
        (vlen,) = _U32.unpack_from(data, i)
        i += 4
        if i + vlen > n:
            raise ZmtpError("malformed READY property value")
        props[key.lower()] = data[i : i + vlen]
        i += vlen
    return props


class Session:
    """One ZMTP connection of ours (the server side, mechanism NULL), sans I/O.

    :meth:`opening` is what we send first; :meth:`receive` takes whatever bytes arrived and
    returns the complete messages they finish. Replies owed to the peer (``PONG``) collect in
    :attr:`outgoing`; :attr:`ready` turns true once the peer's READY was read, with
    :attr:`peer_socket_type` and :attr:`peer_identity` set.
    """

    __slots__ = (
        "_big",
        "_big_fill",
        "_big_flags",
        "_frames",
        "_greeted",
        "_socket_type",
        "_tail",
        "_want",
        "outgoing",
        "peer_identity",
        "peer_socket_type",
        "peer_ttl_s",
        "ready",
    )

    def __init__(self, socket_type: bytes) -> None:
        if socket_type not in PEERS:
            raise ValueError(f"unsupported socket type {socket_type!r}")
        self._socket_type = socket_type
        self._greeted = False
        self._tail = bytearray()
        self._want = GREETING_SIZE  # bytes the tail needs before parsing can go on
        self._frames: list[Any] = []  # the current message's frames so far
        self._big: bytearray | None = None  # a large frame's body being gathered
        self._big_fill = 0
        self._big_flags = 0
        self.ready = False
        """Whether the peer's READY was read (messages flow from then on)."""
        self.peer_socket_type: bytes | None = None
        """The peer's ``Socket-Type`` property."""
        self.peer_identity: bytes | None = None
        """The peer's ``Identity`` property (``b""`` if it sent none)."""
        self.peer_ttl_s = 0.0
        """The TTL of the peer's latest PING: how long it may stay silent after it (0: none)."""
        self.outgoing: list[bytes] = []
        """Bytes owed to the peer (command replies), to be sent and cleared by the caller."""

    def opening(self) -> bytes:
        """Our greeting and READY, sent at once (NULL needs no round trip)."""
        return greeting(as_server=True) + ready(self._socket_type)

    def receive(self, data: bytes | memoryview) -> list[list[Any]]:
        """The messages that ``data`` completes (frames as memoryviews); raises ZmtpError."""
        out: list[list[Any]] = []
        if self._big is not None:
            data = self._fill_big(data, out)
            if self._big is not None:
                return out
        if self._tail:
            self._tail += data
            if len(self._tail) < self._want:
                return out
            data, self._tail = bytes(self._tail), bytearray()
        elif len(data) < self._want:
            self._tail += data
            return out
        if not self._greeted:
            data = self._greet(data)
        self._parse(data, out)
        return out

    def _greet(self, data: bytes | memoryview) -> memoryview:
        g = memoryview(data)[:GREETING_SIZE]
        if g[0] != _SIGNATURE_HEAD or g[9] != _SIGNATURE_TAIL:
            raise ZmtpError("not a ZMTP 3 greeting (bad signature)")
        if g[10] < 3:
            raise ZmtpError(f"unsupported ZMTP version {g[10]}.{g[11]}")
        mechanism = bytes(g[12:32]).rstrip(b"\0")
        if mechanism != b"NULL":
            raise ZmtpError(f"unsupported security mechanism {mechanism!r}")
        self._greeted = True
        self._want = 2
        return memoryview(data)[GREETING_SIZE:]

    def _fill_big(self, data: bytes | memoryview, out: list[list[Any]]) -> memoryview:
        big = self._big
        assert big is not None
        view = memoryview(data)
        take = min(len(big) - self._big_fill, len(view))
        big[self._big_fill : self._big_fill + take] = view[:take]
        self._big_fill += take
        if self._big_fill == len(big):
            self._big = None
            if self._big_flags & _COMMAND:
                self._command(memoryview(big))
                self._want = 2
            else:
                self._frame(memoryview(big), bool(self._big_flags & _MORE), out)
        return view[take:]

    def _parse(self, buf: bytes | memoryview, out: list[list[Any]]) -> None:
        view = memoryview(buf)
        n = len(view)
        i = 0
        frames = self._frames
        while i < n:
            flags = view[i]
            if flags & _LONG:
                if n - i < 9:
                    self._want = 9
                    break
                (size,) = _U64.unpack_from(view, i + 1)
                start = i + 9
            else:
                if n - i < 2:
                    self._want = 2
                    break
                size = view[i + 1]
                start = i + 2
            end = start + size
            if end > n:
                if size >= _LARGE:
                    if size >= 1 << 63:
                        raise ZmtpError(f"frame size {size} out of range")
                    try:
                        big = bytearray(size)
                    except MemoryError:
                        raise ZmtpError(f"no memory for a frame of {size} bytes") from None
                    big[: n - start] = view[start:]
                    self._big, self._big_fill, self._big_flags = big, n - start, flags
                    i = n
                    break
                self._want = end - i
                break
            if flags & _COMMAND:  # between a message's frames too, as libzmq takes it
                self._command(view[start:end])
            elif not self.ready:
                raise ZmtpError("a message before READY")
            elif flags & _MORE:
                frames.append(view[start:end])
            else:
                frames.append(view[start:end])
                out.append(frames)
                self._frames = frames = []
            i = end
        else:
            self._want = 2
        if i < n:
            self._tail += view[i:]

    def _frame(self, body: memoryview, more: bool, out: list[list[Any]]) -> None:
        if not self.ready:
            raise ZmtpError("a message before READY")
        self._frames.append(body)
        if not more:
            out.append(self._frames)
            self._frames = []
        self._want = 2

    def _command(self, body: memoryview) -> None:
        # What libzmq 4.3.5 does with each, checked side by side in the tests: during the
        # handshake only READY (or ERROR, which ends it) may come; afterwards a PING is answered,
        # everything else (a second READY, ERROR, PONG, unknown names) ignored.
        if len(body) < 1 or len(body) < 1 + body[0]:
            raise ZmtpError("malformed command")
        name = bytes(body[1 : 1 + body[0]])
        data = body[1 + body[0] :]
        if not self.ready:
            if name == b"READY":
                self._ready(data)
            elif name == b"ERROR":
                reason = bytes(data[1 : 1 + data[0]]) if len(data) else b""
                raise ZmtpError(f"the peer sent ERROR {reason!r}")
            else:
                raise ZmtpError(f"command {name!r} before READY")
        elif name == b"PING":
            # libzmq echoes at most 16 bytes of context, however many were sent. To a PING too
            # short for its TTL it answers with 16 bytes of its own stale buffer; we answer
            # with no context.
            self.outgoing.append(command(b"PONG", bytes(data[2:18])))
            self.peer_ttl_s = _U16.unpack_from(data)[0] / 10 if len(data) >= 2 else 0.0

    def _ready(self, data: memoryview) -> None:
        props = parse_properties(data)
        peer = props.get(b"socket-type")
        # libzmq checks the type only when the property is there.
        if peer is not None and peer not in PEERS[self._socket_type]:
            raise ZmtpError(
                f"a {peer!r} socket may not talk to a {self._socket_type.decode()} socket"
            )
        self.peer_socket_type = peer
        self.peer_identity = props.get(b"identity", b"")
        self.ready = True

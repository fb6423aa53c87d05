"""Recorded ADD requests: a mock engine started with ``--record-requests PATH`` appends each ADD
request's frames to PATH, and tests read them back to compare what two frontends sent.

A record is a 4-byte little-endian length followed by a msgpack array of the frames (bytes),
``[type byte, payload, aux1, ...]`` exactly as received.
"""

from __future__ import annotations

import pathlib
from collections.abc import Sequence
from typing import Any

import msgspec

from vllm_frontend.engine.codec import RequestDecoder

__all__ = ["append_request", "read_requests"]


def append_request(path: str, frames: Sequence[Any]) -> None:
    """Append one request's frames to the file at ``path``."""
    record = msgspec.msgpack.encode([bytes(f) for f in frames])
    with open(path, "ab") as out:
        out.write(len(record).to_bytes(4, "little") + record)


def read_requests(path: str | pathlib.Path) -> list[Any]:
    """The recorded requests, decoded (``EngineCoreRequest`` values, tensors resolved)."""
    data = pathlib.Path(path).read_bytes() if pathlib.Path(path).exists() else b""
    decoder = RequestDecoder()
    out = []
    pos = 0
    while pos < len(data):
        size = int.from_bytes(data[pos : pos + 4], "little")
        frames = msgspec.msgpack.decode(data[pos + 4 : pos + 4 + size])
        pos += 4 + size
        out.append(decoder.decode(frames)[1])
    return out

"""Request identities: the public id a client sees and the engine id that must be unique.

Follows vLLM 0.32 (``vllm/entrypoints/serve/engine/serving.py`` ``_base_request_id`` and
``vllm/v1/engine/input_processor.py``): the base id is the ``X-Request-Id`` header, else the body's
``request_id``, else 16 random hex digits (vLLM's ``random_uuid``); the public id is
``<prefix>-<base>``; the engine id appends ``-<8 random hex>`` so that two concurrent requests
carrying the same client id never clash on the engine (a duplicate live id is fatal to it).

The random digits come from the OS's CSPRNG, as ``uuid.uuid4`` and ``secrets.token_hex`` take
them, but read 4 KiB at a time: two ``getrandom`` calls and a ``UUID`` per request were ~4% of
a short request's profile. The random base id keeps uuid4's shape: the low 64 bits of a version-4
UUID, whose top two bits are its variant (``10``).
"""

from __future__ import annotations

import os

__all__ = ["base_request_id", "child_request_id", "engine_request_id", "public_request_id"]

_POOL_SIZE = 4096
_VARIANT_MASK = ~(0b11 << 62) & 0xFFFF_FFFF_FFFF_FFFF
_VARIANT = 0b10 << 62


class _RandomPool:
    """Random bytes from ``os.urandom``, read in blocks (refilled empty after a fork, so that a
    child never repeats its parent's digits)."""

    __slots__ = ("_data", "_pos")

    def __init__(self) -> None:
        self._data = b""
        self._pos = 0

    def reset(self) -> None:
        """Drop what is buffered."""
        self._data = b""
        self._pos = 0

    def take(self, n: int) -> bytes:
        """``n`` fresh random bytes."""
        pos = self._pos
        end = pos + n
        data = self._data
        if end > len(data):
            self._data = data = os.urandom(_POOL_SIZE)
            pos, end = 0, n
        self._pos = end
        return data[pos:end]


_pool = _RandomPool()
os.register_at_fork(after_in_child=_pool.reset)


def base_request_id(header_value: str | None, body_value: str | None) -> str:
    """The client-chosen id: ``X-Request-Id`` header first, then the body field, else random."""
    if header_value is not None:
        return header_value
    if body_value is not None:
        return body_value
    bits = int.from_bytes(_pool.take(8), "big")
    return f"{(bits & _VARIANT_MASK) | _VARIANT:016x}"


def public_request_id(prefix: str, header_value: str | None, body_value: str | None) -> str:
    """The id returned to the client, e.g. ``cmpl-<base>`` or ``chatcmpl-<base>``."""
    return f"{prefix}-{base_request_id(header_value, body_value)}"


def engine_request_id(public_id: str) -> str:
    """A fresh engine-side id for ``public_id``: ``<public id>-<8 random hex>``."""
    return f"{public_id}-{_pool.take(4).hex()}"


def child_request_id(parent_engine_id: str, index: int) -> str:
    """The engine id of sample ``index`` of an ``n > 1`` request (vLLM: ``<index>_<parent id>``)."""
    return f"{index}_{parent_engine_id}"

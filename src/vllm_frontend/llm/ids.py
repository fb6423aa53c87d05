"""Request identities: the public id a client sees and the engine id that must be unique.

Follows vLLM 0.32 (``vllm/entrypoints/serve/engine/serving.py`` ``_base_request_id`` and
``vllm/v1/engine/input_processor.py``): the base id is the ``X-Request-Id`` header, else the body's
``request_id``, else 16 random hex digits (vLLM's ``random_uuid``); the public id is
``<prefix>-<base>``; the engine id appends ``-<8 random hex>`` so that two concurrent requests
carrying the same client id never clash on the engine (a duplicate live id is fatal to it).
"""

from __future__ import annotations

import secrets
import uuid

__all__ = ["base_request_id", "child_request_id", "engine_request_id", "public_request_id"]


def base_request_id(header_value: str | None, body_value: str | None) -> str:
    """The client-chosen id: ``X-Request-Id`` header first, then the body field, else random."""
    if header_value is not None:
        return header_value
    if body_value is not None:
        return body_value
    return f"{uuid.uuid4().int & 0xFFFF_FFFF_FFFF_FFFF:016x}"


def public_request_id(prefix: str, header_value: str | None, body_value: str | None) -> str:
    """The id returned to the client, e.g. ``cmpl-<base>`` or ``chatcmpl-<base>``."""
    return f"{prefix}-{base_request_id(header_value, body_value)}"


def engine_request_id(public_id: str) -> str:
    """A fresh engine-side id for ``public_id``: ``<public id>-<8 random hex>``."""
    return f"{public_id}-{secrets.token_hex(4)}"


def child_request_id(parent_engine_id: str, index: int) -> str:
    """The engine id of sample ``index`` of an ``n > 1`` request (vLLM: ``<index>_<parent id>``)."""
    return f"{index}_{parent_engine_id}"

"""The multimodal ``features`` of a ``/inference/v1/generate`` request (what a render route
wrote, checked by :mod:`.generate_protocol`) as the engine's multimodal features, as vLLM 0.32's
``ServingTokens`` takes them (``mm_kwargs_from_features`` and ``mm_input``, then its input
processor): each item's serialized fields decoded and merged with its metadata subset (an item
with neither goes without data: the engine resolves it from its cache), its hash as identifier,
its placeholder range as given, ordered by their place in the prompt.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from vllm_frontend.engine.codec import decode_mm_item
from vllm_frontend.engine.errors import ProtocolError
from vllm_frontend.engine.protocol import (
    MultiModalFeatureSpec,
    MultiModalFieldElem,
    PlaceholderRange,
)

from . import errors

__all__ = ["engine_features", "placeholder_ranges"]


def _item(encoded: str | None) -> dict[str, MultiModalFieldElem] | None:
    if encoded is None:
        return None
    try:
        return decode_mm_item(base64.b64decode(encoded, validate=True))
    except (binascii.Error, ValueError, ProtocolError) as e:
        raise errors.BadRequest(f"Invalid serialized multimodal item: {e}") from None


def engine_features(features: dict[str, Any]) -> list[MultiModalFeatureSpec]:
    """The engine features of a checked ``MultiModalFeatures`` (JSON)."""
    kwargs_data = features.get("kwargs_data") or {}
    metadata = features.get("mm_metadata") or {}
    out: list[MultiModalFeatureSpec] = []
    for modality, hashes in features["mm_hashes"].items():
        count = len(hashes)
        datas = kwargs_data.get(modality, [None] * count)
        metas = metadata.get(modality, [None] * count)
        for mm_hash, place, data, meta in zip(
            hashes, features["mm_placeholders"][modality], datas, metas, strict=True
        ):
            item, extra = _item(data), _item(meta)
            if item is None:
                item = extra
            elif extra is not None:
                item = {**item, **extra}
            position = PlaceholderRange(int(place["offset"]), int(place["length"]))
            out.append(MultiModalFeatureSpec(item, modality, mm_hash, position, mm_hash))
    out.sort(key=lambda f: f.mm_position.offset)
    return out


def placeholder_ranges(features: dict[str, Any]) -> dict[str, list[dict[str, int]]]:
    """A response's ``mm_placeholders`` for a request with ``features`` (vLLM's
    ``placeholder_ranges_from_engine_input``): per modality the items' ranges, as given."""
    return {
        modality: [{"offset": int(p["offset"]), "length": int(p["length"])} for p in ranges]
        for modality, ranges in features["mm_placeholders"].items()
    }

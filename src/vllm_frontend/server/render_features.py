"""The ``features`` of a rendered multimodal prompt, as vLLM 0.32's render routes write them
(``MultiModalFeatures``, vllm/entrypoints/scale_out/token_in_token_out/mm_features.py): per
modality the items' hashes and placeholder ranges, and with ``mm_payload: "tensors"`` each
item's processed fields as vLLM's msgpack encoder writes a ``MultiModalKwargsItem`` (every
tensor inline), in base64, plus the subset a disaggregated prefill needs once the embeddings
come from the encoder cache (``mm_metadata``: the fields kept on the CPU and those that size the
placeholder range).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Collection, Sequence
from typing import Any

import msgspec

from vllm_frontend.engine.codec import MessageEncoder
from vllm_frontend.engine.protocol import MultiModalFeatureSpec, MultiModalFieldElem

__all__ = ["MultiModalFeaturesJSON", "PlaceholderRangeJSON", "render_features"]

_INLINE = MessageEncoder(zero_copy_threshold=2**62)  # vLLM's: every tensor inline


class PlaceholderRangeJSON(msgspec.Struct):
    """vLLM's ``PlaceholderRangeInfo``."""

    offset: int
    length: int


class MultiModalFeaturesJSON(msgspec.Struct):
    """vLLM's ``MultiModalFeatures`` as its render routes dump it."""

    mm_hashes: dict[str, list[str]]
    mm_placeholders: dict[str, list[PlaceholderRangeJSON]]
    kwargs_data: dict[str, list[str | None]] | None = None
    mm_metadata: dict[str, list[str | None]] | None = None


def _encoded(item: dict[str, MultiModalFieldElem]) -> str:
    payload, aux = _INLINE.encode(item)
    assert not aux, "all tensors inline"
    return base64.b64encode(payload).decode("ascii")


def _keeps_on_cpu(elem: MultiModalFieldElem) -> bool:
    return bool(elem.field[1].get("keep_on_cpu", False))


def render_features(
    features: Sequence[MultiModalFeatureSpec] | None,
    mm_payload: str,
    metadata_fields: Callable[[str], Collection[str]],
) -> MultiModalFeaturesJSON | None:
    """The ``features`` of a prompt with these engine features (None without any);
    ``metadata_fields(modality)``: the fields that size a placeholder range."""
    if not features:
        return None
    hashes: dict[str, list[str]] = {}
    ranges: dict[str, list[PlaceholderRangeJSON]] = {}
    items: dict[str, list[Any]] = {}
    for feature in features:
        modality = feature.modality
        hashes.setdefault(modality, []).append(feature.mm_hash or feature.identifier)
        position = feature.mm_position
        ranges.setdefault(modality, []).append(
            PlaceholderRangeJSON(position.offset, position.length)
        )
        items.setdefault(modality, []).append(feature.data)
    out = MultiModalFeaturesJSON(hashes, ranges)
    if mm_payload != "tensors":
        return out
    kwargs_data: dict[str, list[str | None]] = {}
    metadata: dict[str, list[str | None]] = {}
    for modality, datas in items.items():
        kwargs_data[modality] = [None if d is None else _encoded(d) for d in datas]
        declared = set(metadata_fields(modality))
        subsets: list[str | None] = []
        for data in datas:
            kept = {
                key: elem
                for key, elem in (data or {}).items()
                if _keeps_on_cpu(elem) or key in declared
            }
            subsets.append(_encoded(kept) if kept else None)
        if any(s is not None for s in subsets):
            metadata[modality] = subsets
    out.kwargs_data = kwargs_data
    out.mm_metadata = metadata or None
    return out

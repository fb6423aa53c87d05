"""Pieces several image families share: processor options, pixel dtypes, placeholder runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from vllm_frontend.engine.tensors import to_bfloat16_words

__all__ = ["Replacement", "image_kwargs", "pixels_in_dtype"]


def image_kwargs(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Processor keyword arguments with the image-scoped ones (``images_kwargs``) over the flat
    ones; other modalities' scopes dropped."""
    flat = {k: v for k, v in kwargs.items() if not k.endswith("_kwargs")}
    scoped = kwargs.get("images_kwargs")
    if isinstance(scoped, Mapping):
        flat.update(scoped)
    return flat


def pixels_in_dtype(values: np.ndarray, dtype: str) -> tuple[np.ndarray, str | None]:
    """Float32 ``values`` in the model dtype, as vLLM casts floating tensors, with the torch
    dtype name to send them under (None: numpy's own)."""
    if dtype == "bfloat16":
        return to_bfloat16_words(values), "bfloat16"
    if dtype == "float16":
        return values.astype(np.float16), None
    if dtype == "float32":
        return values, None
    raise ValueError(f"unsupported pixel dtype {dtype!r}")


class Replacement:
    """One image's placeholder token ids and which of them take embeddings (those equal to
    ``embed_id``), computed once per grid and shared read-only."""

    __slots__ = ("ids", "is_embed")

    def __init__(self, ids: list[int], embed_id: int) -> None:
        self.ids = ids
        mask = np.asarray(ids) == embed_id
        mask.flags.writeable = False
        self.is_embed = mask

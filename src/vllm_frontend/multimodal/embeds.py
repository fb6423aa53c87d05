"""Precomputed embeddings in content parts (``image_embeds``, ``video_embeds``, ``audio_embeds``,
served with ``--enable-mm-embeds``) as vLLM 0.32 takes them for a family that declares how:
each item's tensors (decoded by ``multimodal.media``) turned into the engine's fields, the
item's placeholder length and the value its ``mm_hash`` is computed from.

A family taking embeddings has an ``embeds`` mapping, modality -> :class:`EmbedsSpec`. The
dictionary form vLLM's ``DictEmbeddingItems`` reads (Qwen2-VL: ``{"image_embeds": <base64>,
"image_grid_thw": [t, h, w]}``) is what is implemented: the values tensor is a "flat" field
sliced by each item's size, the metadata a "batched" one kept on the CPU. Where vLLM would pass
the engine a tensor it cannot use (wrong rank or hidden size, fewer rows than the placeholders,
a malformed grid) the item is refused here with a 400 instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec
import numpy as np

from vllm_frontend.engine.protocol import MultiModalFieldElem
from vllm_frontend.engine.tensors import Tensor
from vllm_frontend.multimodal.family import ProcessedItem
from vllm_frontend.multimodal.hashing import Framed
from vllm_frontend.multimodal.media import Embeds, MediaError
from vllm_frontend.text.errors import InvalidInput

__all__ = ["EmbedsSpec", "check_not_mixed", "metadata_arrays", "process_embeds"]


class EmbedsSpec(msgspec.Struct, frozen=True):
    """How a family takes one modality's embeddings: the ``values`` key (``image_embeds``),
    the ``metadata`` key sizing the placeholder range (``image_grid_thw``), the model's
    ``hidden_size`` and ``tokens``, the embedding rows one item's metadata row stands for.

    A family whose placeholder holds other tokens too (Qwen3-VL's videos: each frame's
    timestamp text) names the further metadata keys it needs (``extras``, 1-D numeric arrays
    with one value per grid step, sent as batched fields) and ``replacement``, the
    placeholder's token ids from the grid and those arrays (the rows go to the positions of
    ``embed_token``); ``bare_refusal`` is the message a bare tensor (no dictionary) gets."""

    values: str
    metadata: str
    hidden_size: int
    tokens: Callable[[np.ndarray], int]
    extras: tuple[str, ...] = ()
    replacement: Callable[[np.ndarray, dict[str, np.ndarray]], list[int]] | None = None
    embed_token: int = -1
    bare_refusal: str | None = None


def check_not_mixed(kinds: Sequence[tuple[str, bool]]) -> None:
    """vLLM's refusal of raw items and embeddings of one modality in one request; ``kinds``:
    (modality, is embeddings) per part."""
    seen = set(kinds)
    for modality in ("image", "audio", "video"):
        if (modality, False) in seen and (modality, True) in seen:
            raise InvalidInput(
                f"Mixing raw {modality} and embedding inputs is not allowed",
                parameter=f"{modality}_embeds",
            )


def metadata_arrays(item: Mapping[str, Any], metadata: set[str]) -> dict[str, Any]:
    """The JSON arrays of a dictionary item as tensors, as vLLM's chat parser makes them (int64,
    or float64 when one is a float); only metadata keys may be arrays."""
    out: dict[str, Any] = {}
    for key, value in item.items():
        if isinstance(value, list):
            if key not in metadata:
                raise MediaError.bad_request(f"JSON arrays are only supported for metadata: {key}")
            if not all(type(v) is int or (type(v) is float and math.isfinite(v)) for v in value):
                raise MediaError.bad_request(f"Metadata {key} must be a finite numeric array.")
            floats = any(type(v) is float for v in value)
            try:
                array = np.array(value, dtype=np.float64 if floats else np.int64)
            except OverflowError:
                raise MediaError.bad_request(f"Invalid metadata array: {key}") from None
            out[key] = Embeds(array, array.dtype.name)
        else:
            out[key] = value
    return out


def _promote(dtypes: set[str]) -> str:
    # torch's type promotion for the dtypes concatenated into one field: floats win over
    # integers; bfloat16 with float16 gives float32.
    if len(dtypes) == 1:
        return next(iter(dtypes))
    floats = [d for d in dtypes if d in ("bfloat16", "float16", "float32", "float64")]
    if floats:
        if "bfloat16" in floats and len(floats) > 1:
            floats = [d for d in floats if d != "bfloat16"]
            return str(np.result_type(np.float32, *floats))
        return floats[0] if len(floats) == 1 else str(np.result_type(*floats))
    return str(np.result_type(*dtypes))


def _as_dtype(embeds: Embeds, dtype: str) -> np.ndarray:
    array = embeds.array
    if embeds.dtype == dtype:
        return array
    if embeds.dtype == "bfloat16":  # raw 16-bit words -> float32
        array = (array.astype(np.uint32) << 16).view(np.float32)
    return array.astype(dtype)


def _tensor(array: np.ndarray, dtype: str) -> Tensor:
    array = np.ascontiguousarray(array)
    return Tensor.from_numpy(array, dtype="bfloat16" if dtype == "bfloat16" else None)


def hash_value(array: np.ndarray, dtype: str) -> Framed:
    """A tensor as vLLM's hasher serializes it (bfloat16 as its bytes with dtype and shape)."""
    if dtype == "bfloat16":
        raw = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        return Framed(
            "tensor",
            {"original_dtype": "torch.bfloat16", "original_shape": tuple(array.shape), "data": raw},
        )
    return Framed("tensor", array)


def process_embeds(
    spec: EmbedsSpec, modality: str, items: list[Mapping[str, Any]]
) -> list[tuple[ProcessedItem, dict[str, Framed]]]:
    """The request's ``modality`` embeddings items (decoded: key -> :class:`Embeds`, a bare
    payload as ``{values: ...}``) as processed items with the value each is hashed by."""
    required = {spec.values, spec.metadata, *spec.extras}
    keys = set(items[0])
    if any(set(item) != keys for item in items[1:]):
        raise MediaError.bad_request(
            "All dictionaries in the list of embeddings must have the same keys."
        )
    if not required <= keys:
        raise MediaError.bad_request(
            f"The data should contain the fields: {_set(required)}, but only found the "
            f"following keys: {_set(keys)}"
        )
    grids: list[np.ndarray] = []
    values: list[Embeds] = []
    extras: list[dict[str, np.ndarray]] = []
    for index, item in enumerate(items):
        grid, embeds = item[spec.metadata], item[spec.values]
        if not isinstance(grid, Embeds) or not isinstance(embeds, Embeds):
            raise MediaError.bad_request(f"`{modality}_embeds` fields must be tensors")
        grids.append(_grid(grid, spec.metadata, len(items)))
        values.append(_values(embeds, modality, index, spec.hidden_size))
        extras.append({key: _extra(item[key], key, grids[-1]) for key in spec.extras})
    grid_dtype = _promote({g.dtype.name for g in grids})
    dtype = _promote({v.dtype for v in values})
    sizes = [spec.tokens(g) for g in grids]
    if not all(sizes):
        # vLLM's processor finds no placeholder run for an item of no tokens (its 500).
        raise MediaError.bad_request(
            f"Expected there to be {len(items)} prompt placeholders corresponding to "
            f"{len(items)} {modality} items, but instead found {sum(map(bool, sizes))} prompt "
            "placeholders! Make sure the implementation of `_apply_hf_processor_main` and "
            "`_get_mm_fields_config` are consistent with each other."
        )
    for index, (size, grid, embeds) in enumerate(zip(sizes, grids, values, strict=True)):
        rows = embeds.array.shape[0]
        if rows < size:
            raise InvalidInput(
                f"{modality.capitalize()} embedding [{index}] has {rows} rows, but its "
                f"{spec.metadata} {grid.tolist()} needs {size}.",
                parameter=f"{modality}_embeds",
            )
    slices: list[Any] = []
    start = 0
    for size in sizes:
        slices.append([[start, start + size, None]])
        start += size
    flat = ("flat", {"keep_on_cpu": False, "slices": slices, "dim": 0})
    batched = ("batched", {"keep_on_cpu": True})
    out = []
    for size, grid, embeds, more in zip(sizes, grids, values, extras, strict=True):
        # vLLM slices each item from the request's tensors joined: an item with more rows
        # than its placeholders gives the first ones (refused above when it has fewer).
        array = _as_dtype(embeds, dtype)[:size]
        placeholder = None if spec.replacement is None else spec.replacement(grid, more)
        grid = grid.astype(grid_dtype, copy=False)
        fields = {
            spec.values: MultiModalFieldElem(_tensor(array, dtype), flat),
            spec.metadata: MultiModalFieldElem(_tensor(grid, grid_dtype), batched),
        }
        hashed = {spec.values: hash_value(array, dtype), spec.metadata: hash_value(grid, "")}
        for key, extra in more.items():
            fields[key] = MultiModalFieldElem(_tensor(extra, extra.dtype.name), batched)
            hashed[key] = hash_value(extra, "")
        if placeholder is None:
            out.append((ProcessedItem(modality, size, fields), hashed))
            continue
        is_embed = np.asarray(placeholder) == spec.embed_token
        processed = ProcessedItem(modality, len(placeholder), fields, placeholder, is_embed)
        out.append((processed, hashed))
    return out


def _extra(value: Any, key: str, grid: np.ndarray) -> np.ndarray:
    # One value per grid step (vLLM asserts it while building the placeholder: a 500 there).
    if not isinstance(value, Embeds) or value.array.ndim != 1 or value.dtype == "bool":
        raise MediaError.bad_request(f"{key} must be a 1-D numeric array")
    if value.array.shape[0] != int(grid[0]):
        raise InvalidInput(
            f"The {key} length({value.array.shape[0]}) should be equal video length "
            f"({int(grid[0])}).",
            parameter=key,
        )
    return np.ascontiguousarray(value.array)


def _set(keys: set[str]) -> str:
    if not keys:
        return "set()"  # Python's repr of an empty set (vLLM formats the set itself)
    return "{" + ", ".join(repr(k) for k in sorted(keys, reverse=True)) + "}"


def _grid(grid: Embeds, key: str, count: int) -> np.ndarray:
    array = grid.array
    if array.ndim != 1:
        shape = ", ".join(str(n) for n in (count, *array.shape[:-1]))
        raise MediaError.bad_request(
            f"size_per_item should be a 1-D tensor, but found shape: torch.Size([{shape}])"
        )
    if grid.dtype not in ("int64", "int32", "int16", "int8", "uint8"):
        raise MediaError.bad_request(
            "only integer tensors of a single element can be converted to an index"
        )
    if array.shape != (3,) or (array < 0).any():
        # vLLM sends it on; the engine's vision tower cannot use it.
        raise InvalidInput(
            f"{key} must hold 3 non-negative integers (t, h, w), got {array.tolist()}",
            parameter=key,
        )
    return np.ascontiguousarray(array)


def _values(embeds: Embeds, modality: str, index: int, hidden_size: int) -> Embeds:
    shape = tuple(embeds.array.shape)
    if len(shape) != 2:
        raise InvalidInput(
            f"{modality.capitalize()} embedding [{index}] must be 2D (seq_len, hidden_size), "
            f"got {len(shape)}D tensor with shape {shape}",
            parameter=f"{modality}_embeds",
        )
    if shape[-1] != hidden_size:
        raise InvalidInput(
            f"{modality.capitalize()} embedding [{index}] hidden dimension mismatch: got "
            f"{shape[-1]}, but model expects {hidden_size}. Embedding shape: {shape}",
            parameter=f"{modality}_embeds",
        )
    if embeds.dtype == "bool":
        raise InvalidInput(
            f"{modality.capitalize()} embedding [{index}] must be a numeric tensor",
            parameter=f"{modality}_embeds",
        )
    return embeds

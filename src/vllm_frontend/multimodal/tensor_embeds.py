"""Bare embedding tensors in content parts (``image_embeds`` / ``audio_embeds`` whose payload is
one base64 tensor, served with ``--enable-mm-embeds``) as vLLM 0.32 takes them for a family
whose processor reads ``ImageEmbeddingItems`` / ``AudioEmbeddingItems`` (LLaVA, LLaVA-NeXT,
InternVL, Qwen2-Audio): one item per part, its rows the item's embeddings.

What vLLM's chat parser and data parser make of the request's tensors of one modality, and
what is reproduced here:

- one ``(1, n, hidden)`` tensor is one item of ``n`` rows;
- tensors of one shape are stacked (each cast to the first one's dtype), and must then be
  ``(n, hidden)`` each;
- tensors of different shapes stay apart (each its own dtype), each ``(n, hidden)``;
- the hidden size must be the model's (``get_inputs_embeds_size``), with vLLM's messages.

Each item goes to the engine as a "batched" ``<modality>_embeds`` field (its 2-D tensor), is
hashed by that tensor, and takes ``n`` placeholder positions (a family may wrap them, as
InternVL's ``<img>`` ... ``</img>``). What vLLM would hand to its HF processor as if it were
media (a 1-D tensor, a batch of several items in one tensor) or send the engine though it
cannot use it (a boolean tensor) or fails on (no rows, where the rows are the whole placeholder)
is refused here with a 400.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import msgspec
import numpy as np

from vllm_frontend.engine.protocol import MultiModalFieldElem
from vllm_frontend.engine.tensors import Tensor
from vllm_frontend.multimodal.embeds import _as_dtype, _set, _tensor, hash_value
from vllm_frontend.multimodal.family import ProcessedItem
from vllm_frontend.multimodal.hashing import Framed
from vllm_frontend.multimodal.media import Embeds, MediaError
from vllm_frontend.text.errors import InvalidInput

__all__ = [
    "TensorEmbedsSpec",
    "inputs_embeds_size",
    "process_counted_embeds",
    "process_tensor_embeds",
    "refuse_tensor_embeds",
]

_FLOATS = ("float64", "float32", "float16", "bfloat16")


def inputs_embeds_size(config: Mapping[str, Any]) -> int:
    """The width an embedding row must have (vLLM's ``get_inputs_embeds_size``: the text
    model's ``projection_dim`` / ``projection_size`` if set, else its ``hidden_size``)."""
    text = config.get("text_config")
    text = text if isinstance(text, Mapping) else config
    for key in ("projection_dim", "projection_size", "hidden_size"):
        value = text.get(key)
        if isinstance(value, int):
            return value
    value = config.get("hidden_size")
    return int(value) if isinstance(value, int) else 0


class TensorEmbedsSpec(msgspec.Struct, frozen=True):
    """How a family takes bare embedding tensors of one modality: the model's row width
    (``hidden_size``), the placeholder tokens of an item of ``n`` rows with which of them
    take embeddings (``replacement``; None: ``n`` of the modality's placeholder token), and
    the key of a dictionary payload's row count (``count_key``, Qwen2-Audio's
    ``audio_num_tokens``; None: dictionary payloads are refused)."""

    hidden_size: int
    replacement: Callable[[int], tuple[list[int], np.ndarray]] | None = None
    count_key: str | None = None


def _refuse(message: str) -> MediaError:
    return MediaError.bad_request(message)


def _stacked_dtype(items: list[Embeds]) -> str:
    # vLLM stacks into a tensor of the first item's dtype: a float cannot go into an integer.
    first = items[0].dtype
    if first not in _FLOATS and any(e.dtype in _FLOATS for e in items[1:]):
        raise _refuse(f"Cannot stack embeddings of dtypes {[e.dtype for e in items]}")
    return first


def _rows(modality: str, items: list[Embeds], hidden: int) -> list[tuple[np.ndarray, str]]:
    """Each item's 2-D rows with their dtype, after vLLM's merging and validation."""
    name = modality.capitalize()
    first = items[0]
    shape = tuple(first.array.shape)
    if len(items) == 1 and len(shape) == 3 and shape[0] == 1 and shape[-1] == hidden:
        return [(first.array[0], first.dtype)]
    if all(tuple(e.array.shape) == shape for e in items):
        if len(shape) != 2:
            # vLLM hands such a stack to the HF processor as media (its 400 names the tensor)
            raise _refuse(
                f"{name} embeddings must be 2D (seq_len, hidden_size) per item, got "
                f"{len(shape)}D tensor with shape {shape}"
            )
        if shape[-1] != hidden:
            raise _refuse(
                f"{name} embedding hidden dimension mismatch: got {shape[-1]}, but model "
                f"expects {hidden}. Embedding shape: {(len(items), *shape)}"
            )
        dtype = _stacked_dtype(items)
        return [(_as_dtype(e, dtype), dtype) for e in items]
    if len(shape) != 2:
        raise _refuse(
            f"{name} embeddings must be 2D (seq_len, hidden_size) per item, got "
            f"{len(shape)}D tensor with shape {shape}"
        )
    _stacked_dtype(items)  # vLLM first concatenates them into the first one's dtype
    for index, embeds in enumerate(items):
        own = tuple(embeds.array.shape)
        if len(own) != 2:
            raise _refuse(
                f"{name} embedding [{index}] must be 2D (seq_len, hidden_size), got "
                f"{len(own)}D tensor with shape {own}"
            )
    for index, embeds in enumerate(items):
        own = tuple(embeds.array.shape)
        if own[-1] != hidden:
            raise _refuse(
                f"{name} embedding [{index}] hidden dimension mismatch: got {own[-1]}, but "
                f"model expects {hidden}. Embedding shape: {own}"
            )
    return [(e.array, e.dtype) for e in items]


def process_tensor_embeds(
    spec: TensorEmbedsSpec, modality: str, items: list[Embeds]
) -> list[tuple[ProcessedItem, Framed]]:
    """The request's bare ``modality`` embedding tensors (in order) as processed items, each
    with the value its hash is computed from."""
    out = []
    batched = ("batched", {"keep_on_cpu": False})
    for index, (rows, dtype) in enumerate(_rows(modality, items, spec.hidden_size)):
        if dtype == "bool":
            raise InvalidInput(
                f"{modality.capitalize()} embedding [{index}] must be a numeric tensor",
                parameter=f"{modality}_embeds",
            )
        count = int(rows.shape[0])
        if count == 0 and spec.replacement is None and modality == "audio":
            # Qwen2-Audio's processor asks an item of no features for its clip's length
            refuse_tensor_embeds(modality, [], spec.hidden_size)
        if count == 0 and spec.replacement is None:
            # vLLM finds no placeholder for the item (its 500); a family whose placeholders
            # wrap the rows (InternVL) takes it, as vLLM does
            raise InvalidInput(
                f"{modality.capitalize()} embedding [{index}] has no rows",
                parameter=f"{modality}_embeds",
            )
        rows = np.ascontiguousarray(rows)
        fields = {f"{modality}_embeds": MultiModalFieldElem(_tensor(rows, dtype), batched)}
        if spec.replacement is None:
            item = ProcessedItem(modality, count, fields)
        else:
            ids, is_embed = spec.replacement(count)
            item = ProcessedItem(modality, len(ids), fields, ids, is_embed)
        out.append((item, hash_value(rows, dtype)))
    return out


def _merged(items: list[Embeds], hidden: int) -> list[tuple[np.ndarray, str]]:
    """One dictionary field's per-item tensors as vLLM merges and splits them again: a lone
    ``(1, ...)`` tensor of the model's width is its one item, tensors of one shape are
    stacked (in the first one's dtype), others kept apart."""
    first = items[0]
    shape = tuple(first.array.shape)
    if len(items) == 1 and len(shape) == 3 and shape[0] == 1 and shape[-1] == hidden:
        return [(first.array[0], first.dtype)]
    if all(tuple(e.array.shape) == shape for e in items):
        dtype = _stacked_dtype(items)
        return [(_as_dtype(e, dtype), dtype) for e in items]
    _stacked_dtype(items)
    return [(e.array, e.dtype) for e in items]


def _counts(key: str, values: list[Any]) -> list[tuple[np.ndarray, str]]:
    """Each item's row count (a 0-D array) as vLLM's Qwen2-Audio parser checks them: one
    positive int32 / int64 per item, the items' counts of one shape."""
    message = f"{key.removesuffix('_num_tokens')}_num_tokens must contain one positive integer "
    message += f"per {key.removesuffix('_num_tokens')}"
    if not all(isinstance(v, Embeds) for v in values):
        raise _refuse(message)
    shape = tuple(values[0].array.shape)
    if any(tuple(v.array.shape) != shape for v in values) or shape not in ((), (1,)):
        raise _refuse(message)
    dtype = values[0].dtype
    if dtype not in ("int32", "int64"):
        raise _refuse(message)
    counts = [(np.array(v.array, dtype=dtype).reshape(()), dtype) for v in values]
    if any(int(c) <= 0 for c, _ in counts):
        raise _refuse(message)
    return counts


def process_counted_embeds(
    spec: TensorEmbedsSpec, modality: str, items: list[Mapping[str, Any]]
) -> list[tuple[ProcessedItem, dict[str, Framed]]]:
    """The request's dictionary ``modality`` embeddings (decoded: key -> :class:`Embeds`, JSON
    arrays of the count key as int64 / float64 arrays) as vLLM's Qwen2-Audio parser takes them:
    ``{"<modality>_embeds": rows}`` or with ``spec.count_key`` giving each item's row count;
    each item with the value its hash is computed from."""
    values_key, count_key = f"{modality}_embeds", spec.count_key
    keys = set(items[0])
    if any(set(item) != keys for item in items[1:]):
        raise _refuse("All dictionaries in the list of embeddings must have the same keys.")
    counts = None
    if count_key is not None and count_key in keys:
        counts = _counts(count_key, [item[count_key] for item in items])
        required = {values_key, count_key}
    else:
        required = {values_key}
    if not required <= keys:
        raise _refuse(
            f"The data should contain the fields: {_set(required)}, but only found the "
            f"following keys: {_set(keys)}"
        )
    if keys - required:
        # vLLM would pass them to the engine as the model's processed fields.
        raise InvalidInput(
            f"Unexpected `{modality}_embeds` fields: {_set(keys - required)}",
            parameter=f"{modality}_embeds",
        )
    values = [item[values_key] for item in items]
    if not all(isinstance(v, Embeds) for v in values):
        raise _refuse(f"`{modality}_embeds` fields must be tensors")
    rows = _merged(values, spec.hidden_size)
    if counts is not None and any(
        a.ndim == 0 or a.shape[0] != int(c) for (a, _), (c, _) in zip(rows, counts, strict=True)
    ):
        raise _refuse(f"{count_key} does not match {values_key}")
    name = modality.capitalize()
    for index, (array, dtype) in enumerate(rows):
        if array.ndim != 2 or array.shape[-1] != spec.hidden_size or not array.shape[0]:
            # vLLM sends it on (or fails in its processor); the engine cannot use it.
            raise InvalidInput(
                f"{name} embedding [{index}] must be 2D (seq_len, {spec.hidden_size}) with "
                f"rows, got shape {tuple(array.shape)}",
                parameter=values_key,
            )
        if dtype == "bool":
            raise InvalidInput(
                f"{name} embedding [{index}] must be a numeric tensor", parameter=values_key
            )
    out = []
    for index, (array, dtype) in enumerate(rows):
        array = np.ascontiguousarray(array)
        fields = {
            values_key: MultiModalFieldElem(
                _tensor(array, dtype), ("batched", {"keep_on_cpu": False})
            )
        }
        hashed = {values_key: hash_value(array, dtype)}
        if counts is not None and count_key is not None:
            count, _ = counts[index]
            fields[count_key] = MultiModalFieldElem(  # a 0-D tensor, as vLLM's item has it
                Tensor.from_numpy(count), ("batched", {"keep_on_cpu": True})
            )
            hashed[count_key] = hash_value(count, "")
        out.append((ProcessedItem(modality, int(array.shape[0]), fields), hashed))
    return out


def refuse_tensor_embeds(modality: str, items: list[Embeds], hidden_size: int) -> None:
    """Refuse a family's bare ``modality`` embeddings as vLLM does when its processor reads only
    media (Idefics3, Gemma 3, Llama 4, Mistral 3, Pixtral-HF): after vLLM's parser has checked
    their ranks and hidden size (with its messages), the processor's type error."""
    if items:
        _rows(modality, items, hidden_size)
    kind = modality.capitalize()
    raise _refuse(
        f"Invalid type of data items for modality={modality!r}. Expected type: <class "
        f"'vllm.multimodal.parse.{kind}ProcessorItems'>, but found type: <class "
        f"'vllm.multimodal.parse.{kind}EmbeddingItems'>"
    )

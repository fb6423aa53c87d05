"""The Gemma 3 family as vLLM 0.32's ``Gemma3MultiModalProcessor`` serves it: each image (and,
with ``do_pan_and_scan``, its crops) resized and normalized by Gemma 3's image processor
(:mod:`.processors.gemma3`) as ``pixel_values`` (a "flat" field sliced by ``num_patches``, the
image and its crops) and ``num_patches`` (a "batched" field kept on the CPU); each
``<start_of_image>`` of the prompt replaced by ``"\\n\\n<start_of_image>"``, the image's soft
tokens, ``"<end_of_image>\\n\\n"`` (with pan-and-scan, vLLM's sentence around the image and its
crops), tokenized, whose ``<image_soft_token>`` positions take embeddings.

Then, as vLLM does, runs of newline tokens the replacement put side by side are merged into the
single tokens Gemma's tokenizer has for them (``"\\n"`` + ``"\\n\\n"`` -> ``"\\n\\n\\n"``, and so
on), and each item's placeholder starts at the merged token that holds its first newline, with
the length and ``is_embed`` of the unmerged replacement (vLLM's placeholder search on the
un-merged tokens)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from vllm_frontend.engine.protocol import MultiModalFeatureSpec, MultiModalFieldElem
from vllm_frontend.engine.tensors import Tensor, to_bfloat16_words
from vllm_frontend.multimodal.family import ProcessedItem
from vllm_frontend.multimodal.media import ImageItem, MediaError
from vllm_frontend.multimodal.processors.gemma3 import (
    BOI_TOKEN,
    IMAGE_TOKEN,
    Gemma3ImageProcessor,
    image_replacement,
)

__all__ = ["Gemma3Family"]

_NEWLINES = ("\n", "\n\n", "\n\n\n", "\n\n\n\n")


def _pixels(values: np.ndarray, dtype: str) -> Tensor:
    if dtype == "bfloat16":
        return Tensor.from_numpy(to_bfloat16_words(values), dtype="bfloat16")
    if dtype == "float16":
        return Tensor.from_numpy(values.astype(np.float16))
    return Tensor.from_numpy(np.ascontiguousarray(values, dtype=np.float32))


def _replace_pairs(ids: list[int], pair: tuple[int, int], merged: int) -> list[int]:
    """``ids`` with each non-overlapping occurrence of ``pair`` (left to right) replaced by
    ``merged`` (vLLM's ``replace_token_matches``)."""
    out: list[int] = []
    i = 0
    first, second = pair
    while i < len(ids):
        if ids[i] == first and i + 1 < len(ids) and ids[i + 1] == second:
            out.append(merged)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


class Gemma3Family:
    """Gemma 3 (``model_type`` ``gemma3``): images."""

    __slots__ = ("encode", "image_token", "model_type", "newlines", "processor", "seq_length",
                 "server_kwargs", "token_ids")  # fmt: skip

    placeholders: Mapping[str, str] = {"image": BOI_TOKEN}
    """vLLM's ``get_placeholder_str`` for an image."""
    supported_limits: Mapping[str, int | None] = {"image": None}
    """Items per prompt the family takes by modality (None: any number)."""
    refuses_embeds: tuple[str, ...] = ("image",)
    """The modalities whose embeddings vLLM's processor refuses (it reads only images)."""

    def __init__(
        self,
        config: Mapping[str, Any],
        preprocessor_config: Mapping[str, Any],
        processor_config: Mapping[str, Any],
        token_to_id: Callable[[str], int | None],
        encode: Callable[[str], list[int]],
        processor_kwargs: Mapping[str, Any],
    ) -> None:
        """``processor_config``: the model's ``processor_config.json`` (``image_seq_length``);
        ``encode``: the tokenizer without special tokens; ``processor_kwargs``: the server's
        ``--mm-processor-kwargs``."""
        self.model_type = str(config.get("model_type"))
        self.processor = Gemma3ImageProcessor(preprocessor_config)
        self.server_kwargs = self._known(processor_kwargs)
        self.seq_length = int(processor_config.get("image_seq_length") or 256)
        self.encode = encode
        ids = {}
        for token in (BOI_TOKEN, IMAGE_TOKEN, *_NEWLINES):
            token_id = token_to_id(token)
            if token_id is None:
                raise ValueError(f"the tokenizer has no {token!r} token")
            ids[token] = token_id
        self.token_ids: dict[str, int] = {"image": ids[BOI_TOKEN]}
        self.image_token = ids[IMAGE_TOKEN]
        self.newlines = tuple(ids[n] for n in _NEWLINES)

    def _known(self, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        names = self.processor.options.names
        return {k: v for k, v in kwargs.items() if k in names}

    def process(
        self, modality: str, items: list[Any], kwargs: Mapping[str, Any], dtype: str
    ) -> list[ProcessedItem]:
        """Process the request's images together, in order (one processor call: the flat
        field's slices span them all); the pixels are cast to the model ``dtype``."""
        if modality != "image":
            raise MediaError.bad_request(f"{modality} inputs are not supported for this model")
        if not items:
            return []
        images: list[ImageItem] = items
        merged = {**self.server_kwargs, **self._known(kwargs)}
        try:
            out = self.processor.preprocess([item.image for item in images], **merged)
        except ValueError as e:
            raise MediaError.bad_request(str(e)) from None
        pixels, crops = out["pixel_values"], [int(c) for c in out["num_crops"]]
        slices: list[Any] = []
        start = 0
        for count in crops:
            slices.append([[start, start + count + 1, None]])
            start += count + 1
        flat = ("flat", {"keep_on_cpu": False, "slices": slices, "dim": 0})
        batched = ("batched", {"keep_on_cpu": True})
        processed = []
        start = 0
        for count in crops:
            stop = start + count + 1
            tokens = self.encode(image_replacement(count, self.seq_length))
            fields = {
                "pixel_values": MultiModalFieldElem(_pixels(pixels[start:stop], dtype), flat),
                "num_patches": MultiModalFieldElem(
                    Tensor.from_numpy(np.array(count + 1, dtype=np.int64)), batched
                ),
            }
            is_embed = np.asarray(tokens) == self.image_token
            processed.append(ProcessedItem("image", len(tokens), fields, tokens, is_embed))
            start = stop
        return processed

    def finalize_prompt(
        self, ids: list[int], features: list[MultiModalFeatureSpec]
    ) -> tuple[list[int], list[MultiModalFeatureSpec]]:
        """The expanded prompt with newline runs merged as vLLM merges them, and each
        placeholder's offset moved to the merged token holding its start."""
        nl1, nl2, nl3, nl4 = self.newlines
        merged = _replace_pairs(ids, (nl1, nl2), nl3)
        merged = _replace_pairs(merged, (nl2, nl1), nl3)
        merged = _replace_pairs(merged, (nl2, nl2), nl4)
        if merged == ids:
            return ids, features
        # vLLM finds each item's replacement in the merged tokens split again into "\n" /
        # "\n\n" pieces, and maps its start back to the merged token.
        split: list[int] = []
        origin: list[int] = []
        for index, token in enumerate(merged):
            pieces = [nl1, nl2] if token == nl3 else [nl2, nl2] if token == nl4 else [token]
            split.extend(pieces)
            origin.extend([index] * len(pieces))
        position = 0
        for feature in features:
            start = feature.mm_position.offset
            replacement = ids[start : start + feature.mm_position.length]
            found = _find(split, replacement, position)
            if found < 0:  # vLLM's processor fails here too (its server answers 500)
                raise MediaError.bad_request(
                    "The image placeholders of this prompt cannot be placed: a newline right "
                    "after an image merges with the image's own closing newlines (vLLM's Gemma 3 "
                    "processor fails on it too). Put a space or text between the image and the "
                    "newline."
                )
            feature.mm_position.offset = origin[found]
            position = found + len(replacement)
        return merged, features


def _find(tokens: list[int], target: list[int], start: int) -> int:
    """The first index >= ``start`` where ``target`` occurs in ``tokens``, or -1."""
    n = len(target)
    first = target[0] if target else None
    for i in range(start, len(tokens) - n + 1):
        if tokens[i] == first and tokens[i : i + n] == target:
            return i
    return -1

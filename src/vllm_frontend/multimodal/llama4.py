"""The Llama 4 family as vLLM 0.32's ``Mllama4MultiModalProcessor`` serves it: the request's
images tiled by Llama 4's image processor (:mod:`.processors.llama4`) as ``pixel_values`` (a
"flat" field sliced by each image's tile count, its tiles and, past one tile, its global tile),
``patches_per_image`` and ``aspect_ratios`` ("batched" fields kept on the CPU); each ``<|image|>``
of the prompt replaced by the image's text (``<|image_start|>``, a row of tiles of ``<|patch|>``
per tile row with ``<|tile_x_separator|>`` / ``<|tile_y_separator|>``, ``<|image|>``, the global
tile's ``<|patch|>`` s, ``<|image_end|>``), tokenized, whose ``<|patch|>`` positions take
embeddings. As in vLLM, the tile grid of the prompt is chosen on the vision tower's tile size
with the server's processor options, and the pixels with the request's too."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from vllm_frontend.engine.protocol import MultiModalFieldElem
from vllm_frontend.engine.tensors import Tensor
from vllm_frontend.multimodal.family import ProcessedItem
from vllm_frontend.multimodal.family_parts import Replacement, image_kwargs, pixels_in_dtype
from vllm_frontend.multimodal.media import ImageItem, MediaError
from vllm_frontend.multimodal.processors.llama4 import (
    IMAGE,
    PATCH,
    Llama4ImageProcessor,
    best_canvas,
    image_replacement,
    patches_per_tile,
    supported_canvases,
)

__all__ = ["Llama4Family"]

_BATCHED_CPU = ("batched", {"keep_on_cpu": True})


class Llama4Family:
    """Llama 4 (``model_type`` ``llama4``): images."""

    __slots__ = ("_encode", "_replacements", "canvases", "model_type", "patch_id", "processor",
                 "server_kwargs", "tile", "to_max", "token_ids", "tokens_per_tile")  # fmt: skip

    placeholders: Mapping[str, str] = {"image": IMAGE}
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
        """``processor_config``: the model's ``processor_config.json`` (its image token's
        name); ``encode``: the tokenizer without special tokens; ``processor_kwargs``: the
        server's ``--mm-processor-kwargs``."""
        self.model_type = str(config.get("model_type"))
        self.processor = Llama4ImageProcessor(preprocessor_config)
        self.server_kwargs = self._known(processor_kwargs)
        options = self.processor.options.merged(self.server_kwargs)
        vision: Mapping[str, Any] = config.get("vision_config") or {}
        self.tile = int(vision.get("image_size") or 336)
        self.tokens_per_tile = patches_per_tile(
            self.tile, int(vision.get("patch_size") or 14),
            float(vision.get("pixel_shuffle_ratio") or 0.5),
        )  # fmt: skip
        self.canvases = supported_canvases(int(options["max_patches"]), self.tile)
        self.to_max = bool(options["resize_to_max_canvas"])
        self._encode = encode
        image_token = str(processor_config.get("image_token") or IMAGE)
        patch_token = str(processor_config.get("patch_token") or PATCH)
        ids = []
        for token in (image_token, patch_token):
            token_id = token_to_id(token)
            if token_id is None:
                raise ValueError(f"the tokenizer has no {token} token")
            ids.append(token_id)
        self.token_ids: dict[str, int] = {"image": ids[0]}
        self.patch_id = ids[1]
        self._replacements: dict[tuple[int, int], Replacement] = {}

    def _known(self, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        names = self.processor.options.names
        return {k: v for k, v in image_kwargs(kwargs).items() if k in names}

    def _aspect(self, item: ImageItem) -> tuple[int, int]:
        """(rows, columns) of tiles vLLM gives the image in the prompt."""
        canvas = best_canvas(item.image.height, item.image.width, self.canvases, self.to_max)
        return canvas[0] // self.tile, canvas[1] // self.tile

    def _placeholder(self, aspect: tuple[int, int]) -> ProcessedItem:
        found = self._replacements.get(aspect)
        if found is None:
            ids = self._encode(image_replacement(aspect, self.tokens_per_tile))
            found = self._replacements[aspect] = Replacement(ids, self.patch_id)
        return ProcessedItem("image", len(found.ids), {}, found.ids, found.is_embed)

    def held_item(self, modality: str, item: Any, kwargs: Mapping[str, Any]) -> ProcessedItem:
        """The placeholder of an image the engine's cache holds, from its size alone (not
        processed: it goes without data)."""
        if modality != "image":
            raise MediaError.bad_request(f"{modality} inputs are not supported for this model")
        return self._placeholder(self._aspect(item))

    def process(
        self, modality: str, items: list[Any], kwargs: Mapping[str, Any], dtype: str
    ) -> list[ProcessedItem]:
        """Process the request's images together, in order (one processor call, as vLLM makes
        one: the flat field's slices span them all)."""
        if modality != "image":
            raise MediaError.bad_request(f"{modality} inputs are not supported for this model")
        images: list[ImageItem] = items
        merged = {**self.server_kwargs, **self._known(kwargs)}
        try:
            out = self.processor.preprocess([image.image for image in images], **merged)
        except (ValueError, TypeError) as e:
            raise MediaError.bad_request(f"Failed to process the images: {e}") from None
        aspects = [self._aspect(image) for image in images]
        counts = [1 if rows * cols == 1 else 1 + rows * cols for rows, cols in aspects]
        pixels, pixel_dtype = pixels_in_dtype(out["pixel_values"], dtype)
        total = pixels.shape[0]
        slices: list[Any] = []
        start = 0
        for count in counts:
            slices.append([[start, start + count, None]])
            start += count
        flat = ("flat", {"keep_on_cpu": False, "slices": slices, "dim": 0})
        processed = []
        start = 0
        for aspect, count in zip(aspects, counts, strict=True):
            item = self._placeholder(aspect)
            cut = slice(min(start, total), min(start + count, total))
            start += count
            item.fields.update(
                pixel_values=MultiModalFieldElem(
                    Tensor.from_numpy(pixels[cut], dtype=pixel_dtype), flat
                ),
                patches_per_image=MultiModalFieldElem(
                    Tensor.from_numpy(np.array(count, dtype=np.int64)), _BATCHED_CPU
                ),
                aspect_ratios=MultiModalFieldElem(
                    Tensor.from_numpy(np.array(aspect, dtype=np.int64)), _BATCHED_CPU
                ),
            )
            processed.append(item)
        return processed

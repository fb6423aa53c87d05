"""The Idefics3 family as vLLM 0.32's ``Idefics3MultiModalProcessor`` serves it: each image's
tiles and global image as ``pixel_values`` and ``pixel_attention_mask`` ("flat" fields sliced by
the frames of every image of the request), its frame count ``num_patches`` (a "batched" field kept
on the CPU), and each ``<image>`` of the rendered prompt replaced by the image's tile grid text
(``<fake_token_around_image>``, ``<row_R_col_C>``, ``<global-img>`` and ``image_seq_len``
``<image>`` per frame), tokenized, of which the ``<image>`` positions take embeddings.

SmolVLM (``smolvlm``) is served by the same class, as vLLM 0.32's ``SmolVLMMultiModalProcessor``
is Idefics3's over transformers' ``SmolVLMProcessor`` (the same tokens, tile text and image
steps). vLLM serves it images only: transformers' SmolVLM video processing is never reached, and
a video part gets vLLM's "At most 0 video(s)" 400."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from vllm_frontend.engine.protocol import MultiModalFieldElem
from vllm_frontend.engine.tensors import Tensor
from vllm_frontend.multimodal.family import ProcessedItem
from vllm_frontend.multimodal.family_parts import Replacement, image_kwargs, pixels_in_dtype
from vllm_frontend.multimodal.media import ImageItem, MediaError
from vllm_frontend.multimodal.processors.idefics3 import (
    Idefics3ImageProcessor,
    image_replacement,
)

__all__ = ["Idefics3Family"]

IMAGE_TOKEN = "<image>"
DEFAULT_IMAGE_SEQ_LEN = 169
"""transformers' ``Idefics3Processor`` default when ``processor_config.json`` names none."""

# What decides an image's tile grid (transformers' get_number_of_image_patches reads these).
_GRID_KEYS = ("do_image_splitting", "max_image_size", "size")


class Idefics3Family:
    """Idefics3 and SmolVLM (``model_type`` ``idefics3``, ``smolvlm``): images."""

    __slots__ = (
        "_encode",
        "_options",
        "_replacements",
        "image_processor",
        "image_seq_len",
        "model_type",
        "token_ids",
    )

    placeholders: Mapping[str, str] = {"image": IMAGE_TOKEN}
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
        """``processor_config``: the model's ``processor_config.json`` (``image_seq_len``);
        ``encode``: the tokenizer without special tokens added (the grid text is tokenized as
        vLLM tokenizes it); ``processor_kwargs``: ``--mm-processor-kwargs`` (they override the
        preprocessor config, as vLLM's processor takes them)."""
        self.model_type = str(config.get("model_type"))
        flat = image_kwargs(processor_kwargs)
        self.image_processor = Idefics3ImageProcessor({**preprocessor_config, **flat})
        self._options = {k: self.image_processor.options[k] for k in _GRID_KEYS}
        seq_len = flat.get("image_seq_len", processor_config.get("image_seq_len"))
        self.image_seq_len = int(seq_len) if seq_len is not None else DEFAULT_IMAGE_SEQ_LEN
        token_id = token_to_id(IMAGE_TOKEN)
        if token_id is None:
            raise ValueError(f"the tokenizer has no {IMAGE_TOKEN} token")
        self.token_ids: dict[str, int] = {"image": token_id}
        self._encode = encode
        self._replacements: dict[tuple[int, int], Replacement] = {}

    def _grid(self, item: ImageItem, kwargs: Mapping[str, Any]) -> tuple[int, int, int]:
        """(frames, rows, cols) of an image as vLLM computes them for its prompt (frames at
        least 1: an image that is not split is its global image alone)."""
        overrides = {k: v for k, v in image_kwargs(kwargs).items() if k in _GRID_KEYS}
        frames, rows, cols = self.image_processor.number_of_image_patches(
            item.image.height, item.image.width, **overrides
        )
        return max(frames, 1), rows, cols

    def _replacement(self, rows: int, cols: int) -> Replacement:
        found = self._replacements.get((rows, cols))
        if found is None:
            text = image_replacement(rows, cols, self.image_seq_len)
            found = Replacement(self._encode(text), self.token_ids["image"])
            self._replacements[(rows, cols)] = found
        return found

    def _item(self, item: ImageItem, kwargs: Mapping[str, Any]) -> tuple[int, ProcessedItem]:
        frames, rows, cols = self._grid(item, kwargs)
        repl = self._replacement(rows, cols)
        return frames, ProcessedItem("image", len(repl.ids), {}, repl.ids, repl.is_embed)

    def held_item(self, modality: str, item: Any, kwargs: Mapping[str, Any]) -> ProcessedItem:
        """The placeholder of an image the engine's cache holds, from its size alone (not
        processed: it goes without data)."""
        if modality != "image":
            raise MediaError.bad_request(f"{modality} inputs are not supported for this model")
        return self._item(item, kwargs)[1]

    def process(
        self, modality: str, items: list[Any], kwargs: Mapping[str, Any], dtype: str
    ) -> list[ProcessedItem]:
        """Process the request's images together, in order (one processor call, as vLLM makes
        one: the flat fields' slices span them all)."""
        if modality != "image":
            raise MediaError.bad_request(f"{modality} inputs are not supported for this model")
        images: list[ImageItem] = items
        overrides = {
            k: v for k, v in image_kwargs(kwargs).items() if k in self.image_processor.options.names
        }
        try:
            placeholders = [self._item(image, kwargs) for image in images]
            out = self.image_processor.preprocess([image.image for image in images], **overrides)
            pixels, pixel_dtype = pixels_in_dtype(out["pixel_values"][0], dtype)
        except ValueError as e:
            raise MediaError.bad_request(str(e)) from None
        # One batch, as vLLM's one processor call makes it, cut into the items by the frame
        # counts the prompt was built from (vLLM's flat_from_sizes on num_patches). Where
        # transformers' patch count differs from the frames its processor makes (an aspect
        # ratio its two roundings disagree on), the items' frames shift as they do in vLLM.
        masks = out["pixel_attention_mask"][0]
        total = masks.shape[0]
        slices: list[Any] = []
        start = 0
        for frames, _ in placeholders:
            stop = start + frames
            slices.append([[start, stop, None]])
            start = stop
        flat = ("flat", {"keep_on_cpu": False, "slices": slices, "dim": 0})
        batched = ("batched", {"keep_on_cpu": True})
        processed = []
        start = 0
        for frames, placeholder in placeholders:
            cut = slice(min(start, total), min(start + frames, total))
            start += frames
            placeholder.fields.update(
                pixel_values=MultiModalFieldElem(
                    Tensor.from_numpy(pixels[cut], dtype=pixel_dtype), flat
                ),
                pixel_attention_mask=MultiModalFieldElem(Tensor.from_numpy(masks[cut]), flat),
                num_patches=MultiModalFieldElem(
                    Tensor.from_numpy(np.array(frames, dtype=np.int64)), batched
                ),
            )
            processed.append(placeholder)
        return processed

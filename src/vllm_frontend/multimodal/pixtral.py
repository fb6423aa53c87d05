"""Pixtral-style images in Hugging Face format as vLLM 0.32 serves them: Mistral 3
(``Mistral3MultiModalProcessor``, ``model_type`` ``mistral3``) and Pixtral-HF checkpoints
(``PixtralHFMultiModalProcessor``: ``llava`` with a ``pixtral`` vision tower).

Each image is resized by Pixtral's image processor (:mod:`.processors.pixtral`, with
``PixtralProcessor``'s patch size times its spatial merge size) and goes alone, unpadded, as
``pixel_values`` (a "batched" field; raw ``uint8`` when the engine normalizes on its side,
Mistral 3's default, else normalized in the model dtype). Each image token of the prompt
becomes the image's grid of merged patches: a row of ``[IMG]`` per patch row, closed by
``[IMG_BREAK]``, the last by ``[IMG_END]``; only the ``[IMG]`` positions take embeddings. The
grid is vLLM's: from the processor's longest edge for Mistral 3, from the vision tower's
``image_size`` for Pixtral-HF, in patches of the vision tower's patch size times the model's
spatial merge size."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from vllm_frontend.engine.protocol import MultiModalFieldElem
from vllm_frontend.engine.tensors import Tensor, to_bfloat16_words
from vllm_frontend.multimodal.family import ProcessedItem
from vllm_frontend.multimodal.family_parts import image_kwargs
from vllm_frontend.multimodal.media import ImageItem, MediaError
from vllm_frontend.multimodal.processors import image_ops
from vllm_frontend.multimodal.processors.pixtral import (
    PixtralImageProcessor,
    image_tokens,
    resized_size,
)

__all__ = ["PixtralFamily", "is_pixtral_hf"]

_BATCHED = ("batched", {"keep_on_cpu": False})
_RAW = {"do_rescale": False, "do_normalize": False}


def is_pixtral_hf(config: Mapping[str, Any]) -> bool:
    """Whether ``config`` is a Pixtral checkpoint in Hugging Face format (``llava`` with a
    ``pixtral`` vision tower, served by vLLM's ``PixtralHFMultiModalProcessor``)."""
    vision = config.get("vision_config")
    return (
        config.get("model_type") == "llava"
        and isinstance(vision, Mapping)
        and vision.get("model_type") == "pixtral"
    )


def _pixels(values: np.ndarray, dtype: str) -> Tensor:
    """Processed pixels in the model dtype (vLLM casts floating tensors; ``uint8`` stays)."""
    if values.dtype == np.uint8 or dtype == "float32":
        return Tensor.from_numpy(values)
    if dtype == "bfloat16":
        return Tensor.from_numpy(to_bfloat16_words(values), dtype="bfloat16")
    if dtype == "float16":
        return Tensor.from_numpy(values.astype(np.float16))
    raise ValueError(f"unsupported pixel dtype {dtype!r}")


class PixtralFamily:
    """Mistral 3 (``mistral3``) and Pixtral-HF (``llava`` + ``pixtral``): images."""

    __slots__ = ("_grid_edge", "_grid_patch", "_size", "break_id", "device_normalize", "end_id",
                 "model_type", "patch_size", "placeholders", "processor", "server_kwargs",
                 "token_ids")  # fmt: skip

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
        processor_kwargs: Mapping[str, Any],
        device_normalize: bool | None = None,
    ) -> None:
        """``processor_config``: the model's ``processor_config.json`` (``PixtralProcessor``'s
        patch and merge sizes, its token names); ``processor_kwargs``: the server's
        ``--mm-processor-kwargs``; ``device_normalize``: the engine's ``mm_device_do_normalize``
        (None: vLLM's default, on for Mistral 3 unless ``VLLM_USE_RUST_FRONTEND`` is set; never
        for Pixtral-HF, whose model does not support it)."""
        self.model_type = str(config.get("model_type"))
        mistral3 = self.model_type == "mistral3"
        if not mistral3 and not is_pixtral_hf(config):
            raise ValueError(f"not a Pixtral-style model: {self.model_type!r}")
        if device_normalize is None:
            device_normalize = not int(os.environ.get("VLLM_USE_RUST_FRONTEND", "0") or 0)
        self.device_normalize = bool(device_normalize) and mistral3
        self.processor = PixtralImageProcessor(preprocessor_config)
        self.server_kwargs = self._known(image_kwargs(processor_kwargs))
        # PixtralProcessor hands its image processor patch_size x spatial_merge_size.
        self.patch_size = int(processor_config.get("patch_size") or 16) * int(
            processor_config.get("spatial_merge_size") or 1
        )
        vision: Mapping[str, Any] = config.get("vision_config") or {}
        merge = config.get("spatial_merge_size", 2 if mistral3 else 1)
        self._grid_patch = int(vision.get("patch_size") or 16) * int(merge)
        # Mistral 3's grid bound is the processor's longest edge (with a size override);
        # Pixtral-HF's the vision tower's image size.
        self._size: dict[str, Any] = image_ops.size_dict(self.processor.options["size"])
        self._grid_edge: int | None = None if mistral3 else int(vision.get("image_size") or 1024)
        self.placeholders: Mapping[str, str] = {} if mistral3 else {"image": "<image>"}
        """vLLM's ``get_placeholder_str``: none for Mistral 3 (its chat template places the
        image tokens), ``<image>`` for LLaVA models."""
        default_image_token = 10 if mistral3 else 32000  # transformers' config defaults
        image_id = int(config.get("image_token_index", default_image_token))
        self.token_ids: dict[str, int] = {"image": image_id}
        ids = []
        for key, default in (
            ("image_break_token", "[IMG_BREAK]"),
            ("image_end_token", "[IMG_END]"),
        ):
            token = str(processor_config.get(key) or default)
            token_id = token_to_id(token)
            if token_id is None:
                raise ValueError(f"the tokenizer has no {token} token")
            ids.append(token_id)
        self.break_id, self.end_id = ids

    def _known(self, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        names = self.processor.options.names - {"patch_size"}  # PixtralProcessor sets it
        return {k: v for k, v in kwargs.items() if k in names}

    def _merged(self, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        merged = {**self.server_kwargs, **self._known(image_kwargs(kwargs))}
        if self.device_normalize:
            # vLLM's merge_mm_processor_kwargs: the engine normalizes; requests cannot undo it.
            merged.update(_RAW)
        return merged

    def _grid(self, image: ImageItem, merged: Mapping[str, Any]) -> tuple[int, int]:
        """(rows, cols) of merged patches vLLM's prompt update gives the image."""
        edge = self._grid_edge
        if edge is None:
            size = {**self._size, **image_ops.size_dict(merged.get("size") or {})}
            if not size.get("longest_edge"):
                raise MediaError.bad_request("size must contain 'longest_edge'")
            edge = int(size["longest_edge"])
        patch = self._grid_patch
        height, width = resized_size(
            image.image.height, image.image.width, edge, edge, patch, patch
        )
        return height // patch, width // patch

    def _placeholder(self, image: ImageItem, merged: Mapping[str, Any]) -> ProcessedItem:
        rows, cols = self._grid(image, merged)
        image_id = self.token_ids["image"]
        tokens = image_tokens(rows, cols, image_id, self.break_id, self.end_id)
        is_embed = np.asarray(tokens) == image_id
        return ProcessedItem("image", len(tokens), {}, tokens, is_embed)

    def held_item(self, modality: str, item: Any, kwargs: Mapping[str, Any]) -> ProcessedItem:
        """The placeholder of an image the engine's cache holds, from its size alone (not
        processed: it goes without data)."""
        if modality != "image":
            raise MediaError.bad_request(f"{modality} inputs are not supported for this model")
        return self._placeholder(item, self._merged(kwargs))

    def process(
        self, modality: str, items: list[Any], kwargs: Mapping[str, Any], dtype: str
    ) -> list[ProcessedItem]:
        """Each image processed alone (vLLM cuts the padded batch back to each image's size),
        its pixels in the model ``dtype`` (or raw ``uint8`` when the engine normalizes)."""
        if modality != "image":
            raise MediaError.bad_request(f"{modality} inputs are not supported for this model")
        merged = self._merged(kwargs)
        # Alone, an image needs no padding (vLLM cuts each back out of the padded batch).
        options = {**merged, "patch_size": self.patch_size, "do_pad": False}
        processed = []
        for image in items:
            try:
                out = self.processor.preprocess([image.image], **options)
            except (ValueError, ZeroDivisionError) as e:
                raise MediaError.bad_request(f"Failed to process the image: {e}") from None
            item = self._placeholder(image, merged)
            item.fields["pixel_values"] = MultiModalFieldElem(
                _pixels(out["pixel_values"][0], dtype), _BATCHED
            )
            processed.append(item)
        return processed

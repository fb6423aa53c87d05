"""The Qwen2-VL family as vLLM 0.32's ``Qwen2VLMultiModalProcessor`` serves it: each image's
``pixel_values`` (a "flat" field, sliced by the patches of every image of the request) and
``image_grid_thw`` (a "batched" field kept on the CPU), and one ``<|image_pad|>`` in the
rendered prompt expanded to ``t*h*w / merge_size**2`` of them."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from vllm_frontend.engine.protocol import MultiModalFieldElem
from vllm_frontend.engine.tensors import Tensor
from vllm_frontend.multimodal.family import ProcessedItem
from vllm_frontend.multimodal.media import ImageItem, MediaError
from vllm_frontend.multimodal.processors.qwen2_vl import Qwen2VLImageProcessor

__all__ = ["Qwen2VLFamily"]

_PLACEHOLDERS = {
    "image": "<|vision_start|><|image_pad|><|vision_end|>",
    "video": "<|vision_start|><|video_pad|><|vision_end|>",
}


def _float_tensor(values: np.ndarray, dtype: str) -> Tensor:
    """``values`` already in the model dtype (bfloat16 as raw words), as a tensor triple."""
    if dtype == "bfloat16":
        return Tensor.from_numpy(values, dtype="bfloat16")
    return Tensor.from_numpy(values)


class Qwen2VLFamily:
    """Qwen2-VL (``model_type`` ``qwen2_vl``): images (video not yet)."""

    __slots__ = ("device_normalize", "image_processor", "model_type", "token_ids")

    placeholders: Mapping[str, str] = _PLACEHOLDERS
    supported_limits: Mapping[str, int | None] = {"image": None}
    """Items per prompt the family takes by modality (None: any number)."""

    def __init__(
        self,
        config: Mapping[str, Any],
        preprocessor_config: Mapping[str, Any],
        token_to_id: Callable[[str], int | None],
        processor_kwargs: Mapping[str, Any],
        device_normalize: bool | None = None,
    ) -> None:
        """``device_normalize``: the engine's ``mm_device_do_normalize`` (None: its default,
        on for this family unless ``VLLM_USE_RUST_FRONTEND`` is set); then pixels go raw and
        the engine rescales and normalizes them."""
        if device_normalize is None:
            device_normalize = not int(os.environ.get("VLLM_USE_RUST_FRONTEND", "0") or 0)
        self.device_normalize = device_normalize
        self.model_type = str(config.get("model_type"))
        self.image_processor = Qwen2VLImageProcessor.from_config(preprocessor_config).with_kwargs(
            processor_kwargs
        )
        self.token_ids: dict[str, int] = {}
        for modality, token in (("image", "<|image_pad|>"), ("video", "<|video_pad|>")):
            token_id = token_to_id(token)
            if token_id is None:
                raise ValueError(f"the tokenizer has no {token} token")
            self.token_ids[modality] = token_id

    def item_tokens(self, modality: str, item: ImageItem, kwargs: Mapping[str, Any]) -> int | None:
        """Placeholder tokens of an image from its size alone, without processing it (for an
        item the engine's cache holds); None when unknown (then it is processed)."""
        if modality != "image":
            return None
        processor = self.image_processor.with_kwargs(kwargs) if kwargs else self.image_processor
        try:
            patches = processor.num_patches(item.image.height, item.image.width)
        except ValueError:
            return None
        return patches // processor.merge_size**2

    def process(
        self,
        modality: str,
        items: list[ImageItem],
        kwargs: Mapping[str, Any],
        dtype: str,
    ) -> list[ProcessedItem]:
        """Process the request's items of ``modality`` together, in order (one processor call,
        as vLLM makes one: the flat field's slices span them all)."""
        if modality != "image":
            raise MediaError.bad_request(f"{modality} inputs are not supported for this model yet")
        processor = self.image_processor.with_kwargs(kwargs) if kwargs else self.image_processor
        if self.device_normalize:
            # vLLM's merge_mm_processor_kwargs: the engine normalizes; requests cannot undo it.
            processor = processor.with_kwargs({"do_rescale": False, "do_normalize": False})
        merge = processor.merge_size**2
        outputs = []
        for item in items:
            try:
                outputs.append(processor.preprocess(item.image, dtype))
            except ValueError as e:
                raise MediaError.bad_request(str(e)) from None
        slices: list[Any] = []
        start = 0
        for out in outputs:
            stop = start + out.pixel_values.shape[0]
            slices.append([[start, stop, None]])
            start = stop
        flat = ("flat", {"keep_on_cpu": False, "slices": slices, "dim": 0})
        batched = ("batched", {"keep_on_cpu": True})
        processed = []
        for out in outputs:
            t, h, w = out.grid_thw
            fields = {
                "pixel_values": MultiModalFieldElem(_float_tensor(out.pixel_values, dtype), flat),
                "image_grid_thw": MultiModalFieldElem(
                    Tensor.from_numpy(np.array(out.grid_thw, dtype=np.int64)), batched
                ),
            }
            processed.append(ProcessedItem(modality, t * h * w // merge, fields))
        return processed

"""LLaVA-OneVision as vLLM 0.32's ``LlavaOnevisionMultiModalProcessor`` serves it: images as
LLaVA-NeXT's (``multimodal.llava``: the anyres patches of ``LlavaOnevisionImageProcessor``, each
``<image>`` expanded to vLLM's count, which scales a grid of more than about 9 patches' features
down, "anyres_max_9"), and videos: each ``<video>`` (the config's ``video_token_index``) expanded
to the pooled features of every frame (``ceil(grid / spatial_pool_stride)`` squared, ``grid``
the vision tower's patches per side, whatever the frame size) plus one newline, all taking
embeddings; ``pixel_values_videos`` ``[frames, 3, H, W]`` from the video processor
(``processors.torch_video``), a "batched" field, in the model dtype.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any

from vllm_frontend.engine.protocol import MultiModalFieldElem
from vllm_frontend.engine.tensors import Tensor
from vllm_frontend.multimodal.family import ProcessedItem
from vllm_frontend.multimodal.family_parts import pixels_in_dtype
from vllm_frontend.multimodal.llava import LlavaFamily, llava_family
from vllm_frontend.multimodal.media import MediaError, VideoItem
from vllm_frontend.multimodal.processors.basic import BasicImageProcessor
from vllm_frontend.multimodal.processors.llava_next import LlavaNextImageProcessor
from vllm_frontend.multimodal.processors.torch_video import (
    LLAVA_ONEVISION_DEFAULTS,
    TorchVideoProcessor,
)

__all__ = ["LlavaOnevisionFamily", "llava_onevision_family"]

VIDEO_TOKEN = "<video>"
"""vLLM's ``get_placeholder_str`` for a video."""
DEFAULT_IMAGE_TOKEN_INDEX = 151646
DEFAULT_VIDEO_TOKEN_INDEX = 151647
"""transformers' ``LlavaOnevisionConfig`` defaults."""


def llava_onevision_family(
    config: Mapping[str, Any],
    preprocessor_config: Mapping[str, Any],
    video_preprocessor_config: Mapping[str, Any] | None,
    processor_kwargs: Mapping[str, Any],
) -> LlavaOnevisionFamily | None:
    """The family of a ``llava_onevision`` model (None when its tower or image processor is not
    one this frontend serves); ``video_preprocessor_config``: the model's
    ``video_preprocessor_config.json`` (None: transformers' video defaults)."""
    make = functools.partial(LlavaOnevisionFamily, video_config=video_preprocessor_config or {})
    family = llava_family(config, preprocessor_config, processor_kwargs, make)
    assert family is None or isinstance(family, LlavaOnevisionFamily)
    return family


class LlavaOnevisionFamily(LlavaFamily):
    """LLaVA-OneVision (``model_type`` ``llava_onevision``): images and videos."""

    __slots__ = ("_frame_tokens", "video_processor", "video_server_kwargs")

    placeholders: Mapping[str, str] = {"image": "<image>", "video": VIDEO_TOKEN}
    """vLLM's ``get_placeholder_str`` by modality."""
    supported_limits: Mapping[str, int | None] = {"image": None, "video": None}
    """Items per prompt the family takes by modality (None: any number)."""
    video_processor_name = "LlavaOnevisionVideoProcessor"
    """transformers' video processor class (vLLM's default video loader serves it)."""

    def __init__(
        self,
        model_type: str,
        config: Mapping[str, Any],
        processor: BasicImageProcessor | LlavaNextImageProcessor,
        tower: tuple[int, int, bool, str],
        processor_kwargs: Mapping[str, Any],
        *,
        video_config: Mapping[str, Any],
    ) -> None:
        """:class:`LlavaFamily`'s arguments, and ``video_config``: the video processor's
        config."""
        super().__init__(model_type, config, processor, tower, processor_kwargs)
        image = config.get("image_token_index", config.get("image_token_id"))
        video = config.get("video_token_index", config.get("video_token_id"))
        self.token_ids = {
            "image": int(image) if image is not None else DEFAULT_IMAGE_TOKEN_INDEX,
            "video": int(video) if video is not None else DEFAULT_VIDEO_TOKEN_INDEX,
        }
        image_size, patch_size, _, _ = tower
        stride = int(config.get("spatial_pool_stride", 2))
        pooled = math.ceil((image_size // patch_size) / stride)
        self._frame_tokens = pooled * pooled
        self.video_processor = TorchVideoProcessor(video_config, LLAVA_ONEVISION_DEFAULTS)
        self.video_server_kwargs = self._video_known(processor_kwargs)

    def _video_known(self, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """Processor keyword arguments the video processor takes (flat ones, then the
        ``videos_kwargs`` mapping)."""
        names = self.video_processor.options.names
        flat = {k: v for k, v in kwargs.items() if not k.endswith("_kwargs")}
        scoped = kwargs.get("videos_kwargs")
        if isinstance(scoped, Mapping):
            flat.update(scoped)
        return {k: v for k, v in flat.items() if k in names}

    def item_tokens(self, modality: str, item: Any, kwargs: Mapping[str, Any]) -> int:
        """How many placeholder tokens an item takes, from its size alone (vLLM's count; a
        video's from its frame count)."""
        if modality == "video":
            video: VideoItem = item
            return self._frame_tokens * int(video.frames.shape[0]) + 1
        return super().item_tokens(modality, item, kwargs)

    def process(
        self, modality: str, items: list[Any], kwargs: Mapping[str, Any], dtype: str
    ) -> list[ProcessedItem]:
        """Images as :meth:`LlavaFamily.process`; each video processed on its own, as vLLM
        processes them; floats cast to the model ``dtype``."""
        if modality != "video":
            return super().process(modality, items, kwargs, dtype)
        merged = {**self.video_server_kwargs, **self._video_known(kwargs)}
        batched = ("batched", {"keep_on_cpu": False})
        processed = []
        for video in items:
            try:
                values = self.video_processor.preprocess_video(video.frames, **merged)
                pixels, pixel_dtype = pixels_in_dtype(values, dtype)
            except ValueError as e:
                raise MediaError.bad_request(str(e)) from None
            field = MultiModalFieldElem(Tensor.from_numpy(pixels, dtype=pixel_dtype), batched)
            tokens = self.item_tokens("video", video, kwargs)
            processed.append(ProcessedItem("video", tokens, {"pixel_values_videos": field}))
        return processed

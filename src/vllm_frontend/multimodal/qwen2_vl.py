"""The Qwen2-VL family as vLLM 0.32's ``Qwen2VLMultiModalProcessor`` serves it: each image's
``pixel_values`` (a "flat" field, sliced by the patches of every image of the request) and
``image_grid_thw`` (a "batched" field kept on the CPU), each video's ``pixel_values_videos`` and
``video_grid_thw`` likewise, and one ``<|image_pad|>`` / ``<|video_pad|>`` in the rendered
prompt expanded to ``t*h*w / merge_size**2`` of them.

Qwen2.5-VL (``Qwen2_5_VLMultiModalProcessor``) is the same with one more video field,
``second_per_grid_ts`` (a "batched" scalar kept on the CPU): the seconds one temporal patch of
the sampled frames spans, ``temporal_patch_size / sampled_fps``."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from vllm_frontend.engine.protocol import MultiModalFieldElem
from vllm_frontend.engine.tensors import Tensor, to_bfloat16_words
from vllm_frontend.multimodal.embeds import EmbedsSpec
from vllm_frontend.multimodal.family import ProcessedItem
from vllm_frontend.multimodal.media import ImageItem, MediaError, VideoItem
from vllm_frontend.multimodal.processors.qwen2_vl import Qwen2VLImageProcessor, Qwen2VLOutput
from vllm_frontend.multimodal.processors.qwen2_vl_video import Qwen2VLVideoProcessor

__all__ = ["Qwen2VLFamily"]

_PLACEHOLDERS = {
    "image": "<|vision_start|><|image_pad|><|vision_end|>",
    "video": "<|vision_start|><|video_pad|><|vision_end|>",
}


def _float_tensor(values: np.ndarray, dtype: str) -> Tensor:
    """``values`` already in the model dtype (bfloat16 as raw words; uint8 pixels as they
    are), as a tensor triple."""
    if dtype == "bfloat16" and values.dtype == np.uint16:
        return Tensor.from_numpy(values, dtype="bfloat16")
    return Tensor.from_numpy(values)


def _scalar(value: float, dtype: str) -> Tensor:
    """A 0-d float tensor of ``value`` (a float32 first, as torch makes it from a Python
    float) in the model ``dtype``."""
    single = np.array(value, dtype=np.float32)
    if dtype == "bfloat16":
        return Tensor.from_numpy(to_bfloat16_words(single).reshape(()), dtype="bfloat16")
    if dtype == "float16":
        return Tensor.from_numpy(single.astype(np.float16))
    return Tensor.from_numpy(single)


def sampled_fps(metadata: Mapping[str, Any]) -> float:
    """The frame rate of the sampled frames as transformers' ``VideoMetadata.sampled_fps``
    reads the loader's metadata (the container's rate, or 24, without frame indices)."""
    fps = metadata.get("fps")
    indices = metadata.get("frames_indices")
    total = metadata.get("total_num_frames")
    if indices is None or total is None or fps is None:
        return float(fps or 24)
    return len(indices) / total * fps


_MODEL_TYPES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe")
"""The model types of this family (Qwen3-VL's through the ``multimodal.qwen3_vl`` subclass)."""
_VIDEO_MODEL_TYPES = ("qwen2_vl", "qwen2_5_vl")
"""The model types whose videos this class processes (a subclass may add its own)."""
# The Hugging Face processor vLLM calls for each model type (named in its failure message;
# Qwen3-VL's: see ``Qwen3VLFamily._failure``).
_HF_PROCESSORS = {
    "qwen2_vl": "Qwen2VLProcessor",
    "qwen2_5_vl": "Qwen2_5_VLProcessor",
}

_FIELDS = {
    "image": ("pixel_values", "image_grid_thw"),
    "video": ("pixel_values_videos", "video_grid_thw"),
}


def shown_images(images: list[ImageItem]) -> str:
    """The images as vLLM's processor-failure messages print them (``repr`` of each PIL image,
    without its address)."""
    return ", ".join(
        f"<PIL.Image.Image image mode={i.image.mode} size={i.image.width}x{i.image.height}>"
        for i in images
    )


class Qwen2VLFamily:
    """Qwen2-VL and Qwen2.5-VL (``model_type`` ``qwen2_vl``, ``qwen2_5_vl``): images and
    videos (Qwen3-VL: :class:`multimodal.qwen3_vl.Qwen3VLFamily`)."""

    __slots__ = (
        "_server_raw",
        "device_normalize",
        "embeds",
        "image_processor",
        "model_type",
        "token_ids",
        "video_processor",
        "video_processor_name",
        "video_seconds",
    )

    placeholders: Mapping[str, str] = _PLACEHOLDERS
    video_model_types: tuple[str, ...] = _VIDEO_MODEL_TYPES
    """The model types whose videos this class processes."""
    supported_limits: Mapping[str, int | None] = {"image": None, "video": None}
    """Items per prompt the family takes by modality (None: any number)."""

    def __init__(
        self,
        config: Mapping[str, Any],
        preprocessor_config: Mapping[str, Any],
        token_to_id: Callable[[str], int | None],
        processor_kwargs: Mapping[str, Any],
        device_normalize: bool | None = None,
        video_preprocessor_config: Mapping[str, Any] | None = None,
    ) -> None:
        """``device_normalize``: the engine's ``mm_device_do_normalize`` (None: its default,
        on for this family unless ``VLLM_USE_RUST_FRONTEND`` is set); then pixels go raw and
        the engine rescales and normalizes them. ``video_preprocessor_config``: the model's
        ``video_preprocessor_config.json`` (None: transformers reads ``preprocessor_config``
        for the video processor too)."""
        if device_normalize is None:
            device_normalize = not int(os.environ.get("VLLM_USE_RUST_FRONTEND", "0") or 0)
        self.device_normalize = device_normalize
        self.model_type = str(config.get("model_type"))
        if self.model_type not in _MODEL_TYPES:
            raise ValueError(f"not a Qwen2-VL family model type: {self.model_type!r}")
        self.video_seconds = self.model_type == "qwen2_5_vl"
        """Videos carry ``second_per_grid_ts`` (Qwen2.5-VL)."""
        self.image_processor = Qwen2VLImageProcessor.from_config(preprocessor_config).with_kwargs(
            processor_kwargs
        )
        self._server_raw = dict(processor_kwargs)
        video_config = (
            preprocessor_config if video_preprocessor_config is None else video_preprocessor_config
        )
        self.video_processor = Qwen2VLVideoProcessor.from_config(video_config).with_kwargs(
            processor_kwargs
        )
        self.video_processor_name = str(
            video_config.get("video_processor_type") or "Qwen2VLVideoProcessor"
        )
        """The Hugging Face video processor class (it picks vLLM's video loader)."""
        text_config = config.get("text_config") or {}
        hidden_size = int(text_config.get("hidden_size") or config.get("hidden_size") or 0)
        vision = config.get("vision_config") or {}
        merge = int(vision.get("spatial_merge_size") or 2) ** 2

        def tokens(grid: np.ndarray) -> int:
            return int(np.prod(grid, dtype=np.int64)) // merge

        self.embeds: dict[str, EmbedsSpec] = {
            modality: EmbedsSpec(f"{modality}_embeds", f"{modality}_grid_thw", hidden_size, tokens)
            for modality in ("image", "video")
        }
        """How ``image_embeds`` / ``video_embeds`` parts are taken: vLLM's
        ``Qwen2VLMultiModalDataParser`` dictionaries (Qwen2-VL's and Qwen2.5-VL's), the
        embeddings with their grid."""
        self.token_ids: dict[str, int] = {}
        for modality, token in (("image", "<|image_pad|>"), ("video", "<|video_pad|>")):
            token_id = token_to_id(token)
            if token_id is None:
                raise ValueError(f"the tokenizer has no {token} token")
            self.token_ids[modality] = token_id

    def item_tokens(self, modality: str, item: Any, kwargs: Mapping[str, Any]) -> int | None:
        """Placeholder tokens of an image or video from its size alone, without processing it
        (for an item the engine's cache holds); None when unknown (then it is processed)."""
        try:
            if modality == "image":
                processor = self._image_processor(kwargs)
                patches = processor.num_patches(item.image.height, item.image.width)
            elif modality == "video":
                video = self._video_processor(kwargs)
                frames = item.frames
                if frames.ndim != 4 or not frames.shape[0]:
                    return None
                t, h, w = video.grid_thw(*frames.shape[:3])
                patches, processor = t * h * w, video
            else:
                return None
        except ValueError:
            return None
        return patches // processor.merge_size**2

    def _failure(self, images: list[ImageItem], kwargs: Mapping[str, Any]) -> str:
        """vLLM's message when the Hugging Face processor refuses the request's images (an
        aspect ratio over 200): the processor, the images and the keyword arguments it was
        called with (vllm/multimodal/processing/context.py, ``call_hf_processor``)."""
        shown = shown_images(images)
        called: dict[str, Any] = {**self._server_raw, **kwargs}
        if self.device_normalize:
            called["do_normalize"] = False
            called["do_rescale"] = False
        called.setdefault("return_tensors", "pt")
        name = _HF_PROCESSORS[self.model_type]
        return f"Failed to apply {name} on data={{'images': [{shown}]}} with kwargs={called}"

    def _image_processor(self, kwargs: Mapping[str, Any]) -> Qwen2VLImageProcessor:
        return self.image_processor.with_kwargs(kwargs) if kwargs else self.image_processor

    def _video_processor(self, kwargs: Mapping[str, Any]) -> Qwen2VLVideoProcessor:
        return self.video_processor.with_kwargs(kwargs) if kwargs else self.video_processor

    def process(
        self,
        modality: str,
        items: list[Any],
        kwargs: Mapping[str, Any],
        dtype: str,
    ) -> list[ProcessedItem]:
        """Process the request's items of ``modality`` together, in order (one processor call,
        as vLLM makes one: the flat field's slices span them all)."""
        raw = {"do_rescale": False, "do_normalize": False}
        outputs: list[Qwen2VLOutput] = []
        if modality == "image":
            processor: Qwen2VLImageProcessor = self._image_processor(kwargs)
            if self.device_normalize:
                # vLLM's merge_mm_processor_kwargs: the engine normalizes; requests cannot
                # undo it.
                processor = processor.with_kwargs(raw)
            images: list[ImageItem] = items
            try:
                outputs = [processor.preprocess(item.image, dtype) for item in images]
            except ValueError:
                raise MediaError.bad_request(self._failure(images, kwargs)) from None
        elif modality == "video":
            if self.model_type not in self.video_model_types:
                raise MediaError.bad_request(
                    "video inputs are not supported by this frontend for model type "
                    f"{self.model_type!r} yet"
                )
            video = self._video_processor(kwargs)
            if self.device_normalize:
                video = video.with_kwargs(raw)
            processor = video
            videos: list[VideoItem] = items
            try:
                outputs = [
                    video.preprocess_video(self.video_frames(video, item), dtype) for item in videos
                ]
            except ValueError as e:
                raise MediaError.bad_request(str(e)) from None
        else:
            raise MediaError.bad_request(f"{modality} inputs are not supported for this model")
        values_key, grid_key = _FIELDS[modality]
        merge = processor.merge_size**2
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
                values_key: MultiModalFieldElem(_float_tensor(out.pixel_values, dtype), flat),
                grid_key: MultiModalFieldElem(
                    Tensor.from_numpy(np.array(out.grid_thw, dtype=np.int64)), batched
                ),
            }
            processed.append(ProcessedItem(modality, t * h * w // merge, fields))
        if modality == "video":
            self.finish_videos(processed, videos, self._video_processor(kwargs), dtype)
        return processed

    def video_frames(self, processor: Qwen2VLVideoProcessor, item: VideoItem) -> np.ndarray:
        """The frames of a video the processor takes (the loader's, here)."""
        return item.frames

    def finish_videos(
        self,
        processed: list[ProcessedItem],
        videos: list[VideoItem],
        processor: Qwen2VLVideoProcessor,
        dtype: str,
    ) -> None:
        """Add what the model type puts in a video item beyond its pixels and grid (Qwen2.5-VL:
        ``second_per_grid_ts``)."""
        if not self.video_seconds:
            return
        batched = ("batched", {"keep_on_cpu": True})
        for item, video_item in zip(processed, videos, strict=True):
            seconds = processor.temporal_patch_size / sampled_fps(video_item.metadata)
            item.fields["second_per_grid_ts"] = MultiModalFieldElem(
                _scalar(seconds, dtype), batched
            )

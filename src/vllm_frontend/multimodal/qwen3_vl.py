"""Qwen3-VL (``qwen3_vl``, ``qwen3_vl_moe``) as vLLM 0.32's ``Qwen3VLMultiModalProcessor``
serves it: images as Qwen2-VL's (16-pixel patches), videos through Qwen3-VL's video processor
(:mod:`.processors.qwen3_vl_video`) with their frame timestamps. A video's ``<|video_pad|>``
becomes, per temporal patch, the timestamp text ``<{seconds:.1f} seconds>`` (tokenized on its
own), ``<|vision_start|>``, the patch's video tokens and ``<|vision_end|>``; only the video
tokens take embeddings (``is_embed``). Its fields are ``pixel_values_videos``,
``video_grid_thw`` and ``timestamps`` (a "batched" list of floats kept on the CPU).

``video_embeds`` (``--enable-mm-embeds``) are taken as vLLM's ``Qwen3VLMultiModalDataParser``
takes them: dictionaries of ``video_embeds``, ``video_grid_thw`` and ``timestamps`` (one per
temporal patch, which the placeholder's text is made of); a bare tensor is refused with
vLLM's message."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from vllm_frontend.engine.protocol import MultiModalFieldElem
from vllm_frontend.multimodal.embeds import EmbedsSpec
from vllm_frontend.multimodal.family import ProcessedItem
from vllm_frontend.multimodal.media import ImageItem, VideoItem
from vllm_frontend.multimodal.processors.qwen2_vl_video import Qwen2VLVideoProcessor
from vllm_frontend.multimodal.processors.qwen3_vl_video import (
    Qwen3VLVideoProcessor,
    frame_timestamps,
)
from vllm_frontend.multimodal.qwen2_vl import Qwen2VLFamily, shown_images

__all__ = ["Qwen3VLFamily"]


class Qwen3VLFamily(Qwen2VLFamily):
    """Qwen3-VL: images and videos with timestamped frames."""

    __slots__ = ("encode", "vision_end", "vision_start")

    video_model_types: tuple[str, ...] = ("qwen3_vl", "qwen3_vl_moe")
    """The model types whose videos this class processes."""

    def __init__(
        self,
        config: Mapping[str, Any],
        preprocessor_config: Mapping[str, Any],
        token_to_id: Callable[[str], int | None],
        encode: Callable[[str], list[int]],
        processor_kwargs: Mapping[str, Any],
        device_normalize: bool | None = None,
        video_preprocessor_config: Mapping[str, Any] | None = None,
    ) -> None:
        """As :class:`Qwen2VLFamily`; ``encode``: the tokenizer without special tokens (the
        frame timestamps are text)."""
        super().__init__(
            config,
            preprocessor_config,
            token_to_id,
            processor_kwargs,
            device_normalize,
            video_preprocessor_config,
        )
        video_config = (
            preprocessor_config if video_preprocessor_config is None else video_preprocessor_config
        )
        self.video_processor = Qwen3VLVideoProcessor.from_config(video_config).with_kwargs(
            processor_kwargs
        )
        self.video_processor_name = str(
            video_config.get("video_processor_type") or "Qwen3VLVideoProcessor"
        )
        self.encode = encode
        ids = {}
        for token in ("<|vision_start|>", "<|vision_end|>"):
            token_id = token_to_id(token)
            if token_id is None:
                raise ValueError(f"the tokenizer has no {token} token")
            ids[token] = token_id
        self.vision_start = ids["<|vision_start|>"]
        self.vision_end = ids["<|vision_end|>"]
        video = self.embeds["video"]
        self.embeds["video"] = EmbedsSpec(
            video.values,
            video.metadata,
            video.hidden_size,
            video.tokens,
            extras=("timestamps",),
            replacement=self._embeds_placeholder,
            embed_token=self.token_ids["video"],
            bare_refusal="Video metadata is required but not found in mm input. Please check "
            "your video input in `multi_modal_data`",
        )

    def _embeds_placeholder(self, grid: np.ndarray, extras: dict[str, np.ndarray]) -> list[int]:
        # A video_embeds item's placeholder: its grid's tokens per frame, after each frame's
        # timestamp text.
        per_frame = self.embeds["video"].tokens(np.array([1, grid[1], grid[2]]))
        return self._timestamped([float(t) for t in extras["timestamps"]], per_frame)

    def _timestamped(self, seconds: list[float], per_frame: int) -> list[int]:
        tokens: list[int] = []
        for second in seconds:
            tokens += self.encode(f"<{second:.1f} seconds>")
            tokens.append(self.vision_start)
            tokens += [self.token_ids["video"]] * per_frame
            tokens.append(self.vision_end)
        return tokens

    def _failure(self, images: list[ImageItem], kwargs: Mapping[str, Any]) -> str:
        """vLLM's message when the Hugging Face processor refuses the request's images: Qwen3-VL's
        processor is called with each image's placeholder text and its keyword arguments by
        scope (as vLLM 0.32 calls it without ``mm_processor_kwargs``; with them, vLLM routes them
        into the scopes, not shown here)."""
        shown = shown_images(images)
        text = self.placeholders["image"] * len(images)
        raw = {"do_normalize": False, "do_rescale": False} if self.device_normalize else {}
        called = {
            "text_kwargs": {"truncation": False},
            "images_kwargs": raw,
            "videos_kwargs": raw,
            "return_tensors": "pt",
        }
        return (
            f"Failed to apply Qwen3VLProcessor on data={{'text': {text!r}, 'images': [{shown}]}} "
            f"with kwargs={called}"
        )

    def item_tokens(self, modality: str, item: Any, kwargs: Mapping[str, Any]) -> int | None:
        """Placeholder tokens of an image from its size alone; None for a video (its
        placeholder has timestamps: it is processed even when the engine holds it)."""
        if modality == "video":
            return None
        return super().item_tokens(modality, item, kwargs)

    def video_frames(self, processor: Qwen2VLVideoProcessor, item: VideoItem) -> np.ndarray:
        """The loader's frames, sampled by ``fps`` first when the loader left it to the
        processor (``do_sample_frames``)."""
        if not item.metadata.get("do_sample_frames", False):
            return item.frames
        return item.frames[self._indices(processor, item)]

    def _indices(self, processor: Qwen2VLVideoProcessor, item: VideoItem) -> list[int]:
        metadata = item.metadata
        if not metadata.get("do_sample_frames", False):
            return list(metadata["frames_indices"])
        assert isinstance(processor, Qwen3VLVideoProcessor)
        return processor.sample_indices(int(metadata["total_num_frames"]), metadata.get("fps"))

    def finish_videos(
        self,
        processed: list[ProcessedItem],
        videos: list[VideoItem],
        processor: Qwen2VLVideoProcessor,
        dtype: str,
    ) -> None:
        """Each video's timestamps field and its timestamped placeholder tokens."""
        batched = ("batched", {"keep_on_cpu": True})
        merge = processor.merge_size**2
        patch = processor.temporal_patch_size
        for item, video in zip(processed, videos, strict=True):
            fps = float(video.metadata["fps"])
            seconds = frame_timestamps(self._indices(processor, video), fps, patch)
            grid = item.fields["video_grid_thw"].data.numpy()
            per_frame = int(grid[1]) * int(grid[2]) // merge
            if len(seconds) != int(grid[0]):
                raise ValueError(
                    f"The timestamps length({len(seconds)}) should be equal video length "
                    f"({int(grid[0])})."
                )
            tokens = self._timestamped(seconds, per_frame)
            item.fields["timestamps"] = MultiModalFieldElem(seconds, batched)
            item.replacement = tokens
            item.is_embed = np.asarray(tokens) == self.token_ids["video"]
            item.num_tokens = len(tokens)

"""Qwen3-VL's video processor in numpy: transformers 5's ``Qwen3VLVideoProcessor`` on the frames
vLLM's ``qwen3_vl`` loader gave, and the frame timestamps vLLM computes for its prompt.

The steps are Qwen2-VL's (:mod:`.qwen2_vl_video`: torch's ``uint8`` bicubic resize, padding to
the temporal patch, the fused rescale-and-normalize lookup, the patch order) with Qwen3-VL's
sizes: the pixel budget covers all the frames (``smart_resize`` of frames x height x width, its
error for fewer frames than a temporal patch), the optional per-frame cap is the reference
implementation's, and the defaults are 16-pixel patches with mean and std 0.5. When the loader
left the sampling to the processor (``do_sample_frames`` in the metadata), the frames are
sampled by ``fps`` as transformers samples them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .qwen2_vl_video import Qwen2VLVideoProcessor

__all__ = ["Qwen3VLVideoProcessor", "frame_timestamps", "smart_resize_video"]


def smart_resize_video(
    num_frames: int,
    height: int,
    width: int,
    temporal_factor: int,
    factor: int,
    min_pixels: int,
    max_pixels: int,
) -> tuple[int, int]:
    """Qwen3-VL's frame size: sides multiples of ``factor``, the frames' total pixels within
    ``[min_pixels, max_pixels]`` (transformers' ``smart_resize`` of the Qwen3-VL video
    processor, its errors included)."""
    if num_frames < temporal_factor:
        raise ValueError(f"t:{num_frames} must be larger than temporal_factor:{temporal_factor}")
    if height < factor or width < factor:
        scale = max(factor / height, factor / width)
        height = int(height * scale)
        width = int(width * scale)
    if max(height, width) / min(height, width) > 200:
        raise ValueError(
            "absolute aspect ratio must be smaller than 200, got "
            f"{max(height, width) / min(height, width)}"
        )
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    t_bar = round(num_frames / temporal_factor) * temporal_factor
    if t_bar * h_bar * w_bar > max_pixels:
        beta = math.sqrt((num_frames * height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif t_bar * h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (num_frames * height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def frame_timestamps(indices: Sequence[int], fps: float, temporal_patch_size: int) -> list[float]:
    """The seconds of each temporal patch (the mean time of its first and last frame, the last
    frame repeated to fill the patch), as vLLM's Qwen3-VL processor writes them in the prompt."""
    indices = list(indices)
    if len(indices) % temporal_patch_size:
        indices += [indices[-1]] * (temporal_patch_size - len(indices) % temporal_patch_size)
    seconds = [index / fps for index in indices]
    return [
        (seconds[i] + seconds[i + temporal_patch_size - 1]) / 2
        for i in range(0, len(seconds), temporal_patch_size)
    ]


@dataclass(frozen=True, slots=True)
class Qwen3VLVideoProcessor(Qwen2VLVideoProcessor):
    """The settings of a Qwen3-VL model's video processor config over transformers' defaults."""

    min_pixels: int = 128 * 32 * 32
    max_pixels: int = 32 * 32 * 768
    patch_size: int = 16
    image_mean: Any = (0.5, 0.5, 0.5)
    image_std: Any = (0.5, 0.5, 0.5)
    max_video_tokens: int = 768
    fps: float = 2.0
    min_frames: int = 4
    max_frames: int = 768

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Qwen3VLVideoProcessor:
        """From the video processor config's values (transformers' defaults where absent)."""
        out = cls().with_kwargs(config)
        assert isinstance(out, Qwen3VLVideoProcessor)
        return out

    def with_kwargs(self, kwargs: Mapping[str, Any]) -> Qwen3VLVideoProcessor:
        """These settings overridden by processor keyword arguments."""
        out = Qwen2VLVideoProcessor.with_kwargs(self, kwargs)
        changes: dict[str, Any] = {}
        for key, kind in (("fps", float), ("min_frames", int), ("max_frames", int)):
            value = kwargs.get(key)
            if value is not None and not isinstance(value, list):
                changes[key] = kind(value)
        if changes:
            out = _replace(out, changes)
        assert isinstance(out, Qwen3VLVideoProcessor)
        return out

    def frame_size(self, num_frames: int, height: int, width: int) -> tuple[int, int]:
        """``(height, width)`` each of ``num_frames`` frames is resized to."""
        if not self.do_resize:
            return height, width
        max_pixels = self.max_pixels
        if self.cap_pixels_per_frame:
            factor = self.factor
            frame_cap = self.max_video_tokens * factor * factor
            per_frame = max(
                min(frame_cap, self.max_pixels // num_frames), int(self.min_pixels * 1.05)
            )
            max_pixels = per_frame * num_frames
        return smart_resize_video(
            num_frames,
            height,
            width,
            self.temporal_patch_size,
            self.factor,
            self.min_pixels,
            max_pixels,
        )

    def sample_indices(self, total_frames: int, source_fps: float | None) -> list[int]:
        """The frames transformers' ``sample_frames`` keeps of ``total_frames`` (by ``fps``;
        an unknown source rate is taken for 24)."""
        rate = source_fps if source_fps else 24.0
        count = int(total_frames / rate * self.fps)
        count = min(max(count, self.min_frames), self.max_frames, total_frames)
        return np.linspace(0, total_frames - 1, count).round().astype(int).tolist()


def _replace(processor: Qwen2VLVideoProcessor, changes: dict[str, Any]) -> Qwen2VLVideoProcessor:
    from dataclasses import replace

    return replace(processor, **changes)

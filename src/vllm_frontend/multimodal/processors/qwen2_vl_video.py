"""Qwen2-VL's video processor in numpy: the same output as transformers 5's
``Qwen2VLVideoProcessor`` (torchvision-backed) on the frames vLLM's video loader sampled.

Each frame is resized to the same multiple of patch x merge within the per-frame pixel budget
as torch resizes ``uint8`` tensors (``processors.torch_resize``), the frames are padded to a
multiple of the temporal patch with copies of the last one, rescaled and normalized in float32
as transformers' fused torch path does (``(x - mean / r) / (std / r)``, ``r`` the rescale
factor), and cut into patches of ``temporal_patch_size`` frames in the image processor's order.
The float values go through a per-channel lookup table of those same float32 operations
(each depends only on its uint8 value), so they are bit-exact.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .qwen2_vl import Qwen2VLImageProcessor, Qwen2VLOutput, _per_channel, smart_resize
from .torch_resize import resize_bicubic_u8

__all__ = ["Qwen2VLVideoProcessor"]


@dataclass(frozen=True, slots=True)
class Qwen2VLVideoProcessor(Qwen2VLImageProcessor):
    """The settings of the model's video processor config (``video_preprocessor_config.json``,
    else ``preprocessor_config.json``, over transformers' video defaults)."""

    min_pixels: int = 128 * 28 * 28
    max_pixels: int = 28 * 28 * 768
    cap_pixels_per_frame: bool = False
    """Bound each frame by an even share of ``max_video_tokens`` (transformers' opt-in)."""
    max_video_tokens: int = 128000

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Qwen2VLVideoProcessor:
        """From the video processor config's values (transformers' defaults where absent)."""
        return cls().with_kwargs(config)

    def with_kwargs(self, kwargs: Mapping[str, Any]) -> Qwen2VLVideoProcessor:
        """These settings overridden by processor keyword arguments (flat ones, then the
        ``videos_kwargs`` mapping)."""
        out = Qwen2VLImageProcessor.with_kwargs(self, kwargs)
        changes: dict[str, Any] = {}
        if kwargs.get("cap_pixels_per_frame") is not None:
            changes["cap_pixels_per_frame"] = bool(kwargs["cap_pixels_per_frame"])
        if kwargs.get("max_video_tokens") is not None:
            changes["max_video_tokens"] = int(kwargs["max_video_tokens"])
        if changes:
            out = replace(out, **changes)
        nested = kwargs.get("videos_kwargs")
        if isinstance(nested, Mapping) and nested:
            out = out.with_kwargs(nested)
        assert isinstance(out, Qwen2VLVideoProcessor)
        return out

    def frame_size(self, num_frames: int, height: int, width: int) -> tuple[int, int]:
        """``(height, width)`` each of ``num_frames`` frames is resized to."""
        if not self.do_resize:
            return height, width
        max_pixels = self.max_pixels
        if self.cap_pixels_per_frame:
            factor = self.factor
            total = int(self.max_video_tokens * factor * factor * 0.9)
            share = total * self.temporal_patch_size // num_frames
            max_pixels = max(min(max_pixels, share), int(self.min_pixels * 1.05))
        return smart_resize(height, width, self.factor, self.min_pixels, max_pixels)

    def grid_thw(self, num_frames: int, height: int, width: int) -> tuple[int, int, int]:
        """The patch grid of a video of ``num_frames`` frames of this size."""
        h, w = self.frame_size(num_frames, height, width)
        t = self.temporal_patch_size
        return max(-(-num_frames // t), 1), h // self.patch_size, w // self.patch_size

    def preprocess_video(self, frames: np.ndarray, dtype: str = "float32") -> Qwen2VLOutput:
        """Process one video's frames (``uint8 [T, H, W, 3]``, RGB); ``pixel_values`` in
        ``dtype`` as :meth:`Qwen2VLImageProcessor.preprocess` gives them (``uint8`` when
        neither rescaled nor normalized)."""
        if frames.ndim != 4 or frames.dtype != np.uint8 or frames.shape[0] == 0:
            raise ValueError(f"expected uint8 frames [T, H, W, C], got {frames.shape}")
        num_frames, height, width, _ = frames.shape
        if self.do_resize:
            h, w = self.frame_size(num_frames, height, width)
            frames = resize_bicubic_u8(frames, h, w)
        t = self.temporal_patch_size
        if pad := -num_frames % t:
            frames = np.concatenate([frames, np.repeat(frames[-1:], pad, axis=0)])
        return self._patchify(frames, dtype)

    def _word_table(self, dtype: str) -> np.ndarray | None:
        """None: raw video pixels stay ``uint8`` (see :meth:`_values`)."""
        return None

    def _values(self, pixels: np.ndarray, dtype: str) -> np.ndarray:
        """Each uint8 of ``pixels`` as the value it becomes: itself, still ``uint8``, when
        neither rescaled nor normalized (transformers' torch path keeps the bytes; the engine
        normalizes them), else the float in ``dtype``."""
        if not self.do_rescale and not self.do_normalize:
            return pixels
        return Qwen2VLImageProcessor._values(self, pixels, dtype)

    def _lookup_table(self, channels: int) -> np.ndarray:
        """``table[c, v]``: the float32 transformers' torch path makes of uint8 ``v``."""
        x = np.broadcast_to(np.arange(256, dtype=np.float32), (channels, 256))
        if self.do_normalize:
            mean = _per_channel(self.image_mean, channels)
            std = _per_channel(self.image_std, channels)
            if self.do_rescale:
                inverse = np.float32(1.0 / self.rescale_factor)
                mean, std = mean * inverse, std * inverse
            table = (x - mean[:, None]) / std[:, None]
        elif self.do_rescale:
            table = x * np.float32(self.rescale_factor)
        else:
            table = x
        return np.ascontiguousarray(table, dtype=np.float32)

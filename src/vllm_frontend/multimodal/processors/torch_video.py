"""transformers 5's plain video processors in numpy (``BaseVideoProcessor``'s steps, which
``LlavaOnevisionVideoProcessor`` and ``InternVLVideoProcessor`` keep; torchvision-backed,
transformers has no PIL ones): the same output on the frames vLLM's video loader sampled.

Every frame is resized to ``size`` (384 x 384 by default) as torch resizes ``uint8`` tensors
(``processors.torch_resize``: the antialiased bicubic of torchvision's ``resize``, or its
bilinear), then rescaled and normalized in float32 as transformers' fused torch path does
(``(x - mean / r) / (std / r)``, ``r`` the rescale factor) through a per-channel lookup table
of those same float32 operations, so the values are bit-exact. No center crop and no frame
sampling (transformers' ``do_sample_frames`` is off for these models: every frame the loader
kept is processed; a config that turns either on is refused).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from vllm_frontend.multimodal.processors import image_ops
from vllm_frontend.multimodal.processors.options import Options
from vllm_frontend.multimodal.processors.torch_resize import resize_bicubic_u8, resize_bilinear_u8

__all__ = ["INTERNVL_DEFAULTS", "LLAVA_ONEVISION_DEFAULTS", "TorchVideoProcessor"]

LLAVA_ONEVISION_DEFAULTS: dict[str, Any] = {
    "do_convert_rgb": True,
    "do_resize": True,
    "size": {"height": 384, "width": 384},
    "default_to_square": False,
    "resample": int(image_ops.BICUBIC),
    "do_center_crop": None,
    "crop_size": None,
    "do_rescale": True,
    "rescale_factor": 1 / 255,
    "do_normalize": True,
    "image_mean": image_ops.OPENAI_CLIP_MEAN,
    "image_std": image_ops.OPENAI_CLIP_STD,
    "do_sample_frames": False,
}
"""transformers' ``LlavaOnevisionVideoProcessor`` class defaults."""
INTERNVL_DEFAULTS: dict[str, Any] = {**LLAVA_ONEVISION_DEFAULTS, "initial_shift": True}
"""transformers' ``InternVLVideoProcessor`` class defaults (``initial_shift`` is for its frame
sampling, which is off)."""

_RESIZES = {int(image_ops.BICUBIC): resize_bicubic_u8, int(image_ops.BILINEAR): resize_bilinear_u8}


def _per_channel(value: Any, channels: int) -> np.ndarray:
    if isinstance(value, int | float):
        value = [value] * channels
    if len(value) != channels:
        raise ValueError(f"expected {channels} per-channel values, got {len(value)}")
    return np.array(value, dtype=np.float32)


class TorchVideoProcessor:
    """A transformers video processor of ``BaseVideoProcessor``'s steps, of one model's config
    (its ``video_preprocessor_config.json``) over the class ``defaults``."""

    def __init__(self, config: Mapping[str, Any], defaults: Mapping[str, Any]) -> None:
        self.options = Options(defaults, config)
        o = self.options.merged({})
        if o["do_sample_frames"]:
            raise ValueError("frame sampling in the video processor is not implemented")
        if o["do_resize"] and int(o["resample"]) not in _RESIZES:
            raise ValueError(f"video resample filter {o['resample']!r} is not implemented")
        if o["do_center_crop"]:
            raise ValueError("center cropping video frames is not implemented")

    def frame_size(self, height: int, width: int, **kwargs: Any) -> tuple[int, int]:
        """The (height, width) a ``height`` x ``width`` frame is resized to."""
        o = self.options.merged(kwargs)
        if not o["do_resize"]:
            return height, width
        size = image_ops.size_dict(o["size"], o["default_to_square"])
        return image_ops.resize_output_size(height, width, size)

    def preprocess_video(self, frames: np.ndarray, **kwargs: Any) -> np.ndarray:
        """One video's ``pixel_values_videos`` ``float32 [T, C, H, W]`` from its frames
        (``uint8 [T, H, W, C]``, RGB); ``kwargs`` override the config (``ValueError`` for one
        it does not know, or for a step not implemented)."""
        if frames.ndim != 4 or frames.dtype != np.uint8 or frames.shape[0] == 0:
            raise ValueError(f"expected uint8 frames [T, H, W, C], got {frames.shape}")
        o = self.options.merged(kwargs)
        if o["do_sample_frames"] or o["do_center_crop"]:
            raise ValueError("frame sampling and center cropping of videos are not implemented")
        if o["do_resize"]:
            resize = _RESIZES.get(int(o["resample"]))
            if resize is None:
                raise ValueError(f"video resample filter {o['resample']!r} is not implemented")
            height, width = self.frame_size(frames.shape[1], frames.shape[2], **kwargs)
            frames = resize(frames, height, width)
        channels_first = np.ascontiguousarray(frames.transpose(0, 3, 1, 2))
        if not o["do_rescale"] and not o["do_normalize"]:
            return channels_first
        table = _lookup_table(o, frames.shape[3])
        out = np.empty(channels_first.shape, dtype=np.float32)
        for c in range(channels_first.shape[1]):
            np.take(table[c], channels_first[:, c], out=out[:, c])
        return out


def _lookup_table(o: Mapping[str, Any], channels: int) -> np.ndarray:
    """``table[c, v]``: the float32 transformers' torch path makes of uint8 ``v`` in channel
    ``c`` (rescale and normalize fused: mean and std scaled by ``1 / rescale_factor``)."""
    x = np.broadcast_to(np.arange(256, dtype=np.float32), (channels, 256))
    if o["do_normalize"]:
        mean = _per_channel(o["image_mean"], channels)
        std = _per_channel(o["image_std"], channels)
        if o["do_rescale"]:
            inverse = np.float32(1.0 / o["rescale_factor"])
            mean, std = mean * inverse, std * inverse
        table = (x - mean[:, None]) / std[:, None]
    else:
        table = x * np.float32(o["rescale_factor"])
    return np.ascontiguousarray(table, dtype=np.float32)

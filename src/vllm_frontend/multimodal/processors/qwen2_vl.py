"""Qwen2-VL's image processor in numpy + Pillow: the same output as transformers 5's PIL-backed
``Qwen2VLImageProcessorPil`` (resize to a multiple of patch x merge within the pixel budget,
bicubic; rescale, normalize; patches flattened with the temporal axis repeated).

Bit-exact by construction: transformers takes the RGB image as uint8, resizes it with Pillow,
then computes ``float32(float64(v) * rescale_factor)``, then ``(x - mean[c]) / std[c]`` in
float32. Each output element depends only on its uint8 value and channel, so a per-channel
lookup table of those same operations gives the same floats, and is applied after the patch
reordering, on a uint8 array a quarter of the size.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from vllm_frontend.engine.tensors import to_bfloat16_words
from vllm_frontend.multimodal.processors.band_resize import resize_in_bands

if TYPE_CHECKING:
    from PIL.Image import Image

__all__ = ["Qwen2VLImageProcessor", "Qwen2VLOutput", "smart_resize"]

_OPENAI_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
_OPENAI_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
_BICUBIC = 3


def smart_resize(
    height: int, width: int, factor: int, min_pixels: int, max_pixels: int
) -> tuple[int, int]:
    """The size an image is resized to: both sides multiples of ``factor``, the area within
    ``[min_pixels, max_pixels]``, the aspect ratio kept as well as that allows (transformers'
    ``smart_resize``, including its error for aspect ratios over 200)."""
    if max(height, width) / min(height, width) > 200:
        raise ValueError(
            "absolute aspect ratio must be smaller than 200, got "
            f"{max(height, width) / min(height, width)}"
        )
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


@dataclass(frozen=True, slots=True)
class Qwen2VLOutput:
    """One image's processed form: ``pixel_values`` ``(t*h*w, C*T*p*p)`` (float32, or the
    dtype asked for) and its ``grid_thw`` ``(t, h, w)`` in patches."""

    pixel_values: np.ndarray
    grid_thw: tuple[int, int, int]


@dataclass(frozen=True, slots=True)
class Qwen2VLImageProcessor:
    """The settings of ``preprocessor_config.json`` (transformers' defaults where absent)."""

    min_pixels: int = 56 * 56
    max_pixels: int = 28 * 28 * 1280
    patch_size: int = 14
    temporal_patch_size: int = 2
    merge_size: int = 2
    image_mean: tuple[float, ...] = _OPENAI_CLIP_MEAN
    image_std: tuple[float, ...] = _OPENAI_CLIP_STD
    rescale_factor: float = 1 / 255
    do_resize: bool = True
    do_rescale: bool = True
    do_normalize: bool = True
    do_convert_rgb: bool = True
    resample: int = _BICUBIC

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Qwen2VLImageProcessor:
        """From a ``preprocessor_config.json``'s values (``size`` and ``min_pixels`` /
        ``max_pixels`` as transformers reads them: the latter win)."""
        return cls().with_kwargs(config)

    def with_kwargs(self, kwargs: Mapping[str, Any]) -> Qwen2VLImageProcessor:
        """These settings overridden by processor keyword arguments (``mm_processor_kwargs``)."""
        changes: dict[str, Any] = {}
        size = kwargs.get("size")
        if isinstance(size, Mapping):
            if size.get("shortest_edge") is not None:
                changes["min_pixels"] = int(size["shortest_edge"])
            if size.get("longest_edge") is not None:
                changes["max_pixels"] = int(size["longest_edge"])
        for key in ("min_pixels", "max_pixels", "patch_size", "temporal_patch_size", "merge_size"):
            if kwargs.get(key) is not None:
                changes[key] = int(kwargs[key])
        for key in ("image_mean", "image_std"):
            value = kwargs.get(key)
            if value is not None:
                changes[key] = tuple(float(v) for v in value) if isinstance(value, list) else value
        for key in ("do_resize", "do_rescale", "do_normalize", "do_convert_rgb"):
            if kwargs.get(key) is not None:
                changes[key] = bool(kwargs[key])
        if kwargs.get("rescale_factor") is not None:
            changes["rescale_factor"] = float(kwargs["rescale_factor"])
        if kwargs.get("resample") is not None:
            changes["resample"] = int(kwargs["resample"])
        return replace(self, **changes) if changes else self

    @property
    def factor(self) -> int:
        """Resized sides are multiples of this (patch size x merge size)."""
        return self.patch_size * self.merge_size

    def resized_size(self, height: int, width: int) -> tuple[int, int]:
        """``(height, width)`` after resizing."""
        if not self.do_resize:
            return height, width
        return smart_resize(height, width, self.factor, self.min_pixels, self.max_pixels)

    def num_patches(self, height: int, width: int) -> int:
        """Patches (rows of ``pixel_values``) of an image of this size."""
        h, w = self.resized_size(height, width)
        return (h // self.patch_size) * (w // self.patch_size)

    def _lookup_table(self, channels: int) -> np.ndarray:
        """``table[c, v]``: the float32 that uint8 value ``v`` of channel ``c`` becomes."""
        values = np.arange(256, dtype=np.uint8)
        if self.do_rescale:
            scaled = (values.astype(np.float64) * self.rescale_factor).astype(np.float32)
        else:
            scaled = values.astype(np.float32)
        table = np.broadcast_to(scaled, (channels, 256))
        if self.do_normalize:
            mean = _per_channel(self.image_mean, channels)
            std = _per_channel(self.image_std, channels)
            table = (table - mean[:, None]) / std[:, None]
        return np.ascontiguousarray(table, dtype=np.float32)

    def preprocess(self, image: Image, dtype: str = "float32") -> Qwen2VLOutput:
        """Process one image (any mode; converted to RGB as transformers does).

        ``dtype`` is the dtype ``pixel_values`` is cast to afterwards: ``float32`` (the
        processor's own output), ``float16`` or ``bfloat16`` (raw 16-bit words, rounded as
        torch rounds); the cast is folded into the lookup table, so it costs nothing extra."""
        if self.do_convert_rgb and image.mode != "RGB":
            image = _to_rgb(image)
        width, height = image.size
        if self.do_resize:
            h, w = self.resized_size(height, width)
            image = resize_in_bands(image, (w, h), self.resample)
        pixels = np.asarray(image)
        if pixels.ndim == 2:
            pixels = pixels[:, :, None]
        return self._patchify(pixels[None], dtype)

    def _patchify(self, frames: np.ndarray, dtype: str = "float32") -> Qwen2VLOutput:
        """``frames`` ``(F, H, W, C)`` uint8 (F a multiple of the temporal patch, or 1 for an
        image: repeated) -> flattened patches."""
        num_frames, height, width, channels = frames.shape
        p, m, t = self.patch_size, self.merge_size, self.temporal_patch_size
        if height % (p * m) or width % (p * m):
            raise ValueError(f"image size {width}x{height} is not a multiple of {p * m}")
        grid_h, grid_w = height // p, width // p
        grid_t = max(1, num_frames // t)
        frames_per_patch = t if num_frames > 1 else 1
        frames = frames[: grid_t * frames_per_patch]
        shape = (grid_t, frames_per_patch, grid_h // m, m, p, grid_w // m, m, p, channels)
        order = (0, 2, 5, 3, 6, 8, 1, 4, 7)
        table = self._word_table(dtype)
        if table is not None:
            # Reorder the uint8 pixels (a quarter of the bytes float32 values would move), then
            # one 256-entry table gives each its 16-bit word.
            ordered = np.ascontiguousarray(frames.reshape(shape).transpose(order))
            words = table[ordered]
            if frames_per_patch != t:
                words = np.repeat(words, t, axis=6)
            return Qwen2VLOutput(
                words.reshape(grid_t * grid_h * grid_w, channels * t * p * p),
                (grid_t, grid_h, grid_w),
            )
        values = self._values(frames, dtype)
        # (gt, T, gh/m, m, p, gw/m, m, p, C) -> (gt, gh/m, gw/m, m, m, C, T, p, p): one copy
        patches = values.reshape(shape).transpose(order)
        if frames_per_patch != t:
            patches = np.broadcast_to(patches, (*patches.shape[:6], t, p, p))
        pixel_values = np.ascontiguousarray(patches).reshape(
            grid_t * grid_h * grid_w, channels * t * p * p
        )
        return Qwen2VLOutput(pixel_values, (grid_t, grid_h, grid_w))

    def _word_table(self, dtype: str) -> np.ndarray | None:
        """The 16-bit ``dtype`` word of each uint8 value when the pixels go as their raw values
        in 16 bits (neither rescaled nor normalized), else None."""
        if dtype in ("bfloat16", "float16") and not self.do_rescale and not self.do_normalize:
            return _raw_words(dtype)
        return None

    def _values(self, pixels: np.ndarray, dtype: str) -> np.ndarray:
        """Each uint8 of ``pixels`` (channels last) as the float it becomes, in ``dtype``."""
        if dtype not in ("float32", "float16", "bfloat16"):
            raise ValueError(f"unsupported pixel dtype {dtype!r}")
        if not self.do_rescale and not self.do_normalize:
            # The values themselves (the engine normalizes): exact in every float dtype, and a
            # bfloat16 integer below 256 is the upper half of its float32 bits.
            values = pixels.astype(np.float32)
            if dtype == "bfloat16":
                return (values.view(np.uint32) >> 16).astype(np.uint16)
            return values if dtype == "float32" else values.astype(np.float16)
        channels = pixels.shape[-1]
        table = self._lookup_table(channels)
        if dtype == "bfloat16":
            table = to_bfloat16_words(table)
        elif dtype == "float16":
            table = table.astype(np.float16)
        flat = pixels.reshape(-1, channels)
        out = np.empty(flat.shape, dtype=table.dtype)
        for c in range(channels):
            np.take(table[c], flat[:, c], out=out[:, c])
        return out.reshape(pixels.shape)


@functools.cache
def _raw_words(dtype: str) -> np.ndarray:
    """The 16-bit word of each uint8 value as a ``dtype`` float (exact: integers below 256)."""
    values = np.arange(256, dtype=np.float32)
    if dtype == "bfloat16":
        return (values.view(np.uint32) >> 16).astype(np.uint16)
    return values.astype(np.float16)


def _per_channel(value: Any, channels: int) -> np.ndarray:
    if isinstance(value, int | float):
        value = [value] * channels
    if len(value) != channels:
        raise ValueError(f"expected {channels} per-channel values, got {len(value)}")
    return np.array(value, dtype=np.float32)


def _to_rgb(image: Image) -> Image:
    # transformers' convert_to_rgb: Pillow's own conversion, whatever the mode.
    return image.convert("RGB")

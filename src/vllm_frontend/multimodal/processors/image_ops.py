"""The image operations the models' processors share, each equal to what transformers' PIL-backed
image processors do (``PilBackend`` and ``image_transforms``), down to the float32 bits.

Images stay Pillow images while they are resized (transformers turns its channels-first uint8
arrays back into Pillow images to resize them, with the same filters, so resizing the Pillow image
directly gives the same pixels) and become channels-first arrays for cropping, rescaling,
normalising and padding. Rescaling and normalising a uint8 image is a per-channel lookup table of
the 256 values transformers' float64 multiply, float32 cast, float32 subtract and float32 divide
give, so the result is bit-identical to transformers' and costs one gather per pixel.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from PIL import Image

from vllm_frontend.multimodal.processors.band_resize import resize_in_bands

# transformers' PILImageResampling values are Pillow's own filter numbers.
NEAREST = Image.Resampling.NEAREST
LANCZOS = Image.Resampling.LANCZOS
BILINEAR = Image.Resampling.BILINEAR
BICUBIC = Image.Resampling.BICUBIC

IMAGENET_STANDARD_MEAN = (0.5, 0.5, 0.5)
IMAGENET_STANDARD_STD = (0.5, 0.5, 0.5)
IMAGENET_DEFAULT_MEAN = (0.485, 0.456, 0.406)
IMAGENET_DEFAULT_STD = (0.229, 0.224, 0.225)
OPENAI_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)

# Modes whose numpy array converts back to a Pillow image of the same mode and pixels.
_ROUND_TRIP_MODES = frozenset({"L", "LA", "RGB", "RGBA"})


def resample_filter(value: Any) -> Image.Resampling:
    """The Pillow filter a config's ``resample`` names (an int, as transformers stores it)."""
    return Image.Resampling(int(value))


def prepare(image: Image.Image, convert_rgb: bool) -> Image.Image:
    """The image as transformers' ``process_image`` sees it: RGB when ``convert_rgb`` (Pillow's
    ``convert("RGB")``, as ``convert_to_rgb``), else the mode its numpy array turns back into."""
    if convert_rgb:
        return image if image.mode == "RGB" else image.convert("RGB")
    if image.mode in _ROUND_TRIP_MODES:
        return image
    array = np.asarray(image)
    if array.dtype != np.uint8:
        raise ValueError(f"image mode {image.mode!r} is not supported without RGB conversion")
    return Image.fromarray(array)


def resize(image: Image.Image, height: int, width: int, resample: Image.Resampling) -> Image.Image:
    """The image resized to ``height`` x ``width`` with Pillow's ``resample`` filter (its two
    passes spread over threads, the pixels Pillow's own)."""
    return resize_in_bands(image, (width, height), resample)


def to_channels_first(image: Image.Image) -> np.ndarray:
    """The image's pixels as a (channels, height, width) uint8 array (a view where it can)."""
    array = np.asarray(image)
    if array.ndim == 2:
        return array[np.newaxis]
    return array.transpose(2, 0, 1)


def from_channels_first(array: np.ndarray) -> Image.Image:
    """A Pillow image of a (channels, height, width) uint8 array (as ``to_pil_image`` makes it)."""
    if array.shape[0] == 1:
        return Image.fromarray(np.ascontiguousarray(array[0]))
    return Image.fromarray(np.ascontiguousarray(array.transpose(1, 2, 0)))


def value_table(
    channels: int,
    rescale_factor: float | None,
    mean: float | Sequence[float] | None,
    std: float | Sequence[float] | None,
) -> np.ndarray:
    """The float32 value each uint8 pixel value becomes per channel, shape (channels, 256):
    transformers' ``rescale`` (float64 multiply, float32 cast) when ``rescale_factor`` is given,
    then its ``normalize`` (float32 ``(x - mean) / std``) when ``mean`` and ``std`` are."""
    values = np.arange(256, dtype=np.uint8)
    if rescale_factor is not None:
        table = (values.astype(np.float64) * rescale_factor).astype(np.float32)
    else:
        table = values.astype(np.float32)
    table = np.broadcast_to(table, (channels, 256))
    if mean is not None and std is not None:
        means = _per_channel(mean, channels, "mean")
        stds = _per_channel(std, channels, "std")
        table = (table - means[:, None]) / stds[:, None]
    return np.ascontiguousarray(table, dtype=np.float32)


def _per_channel(value: float | Sequence[float], channels: int, name: str) -> np.ndarray:
    """``value`` as one float32 per channel (a scalar repeated, as transformers' ``normalize``)."""
    if isinstance(value, int | float):
        return np.full(channels, value, dtype=np.float32)
    if len(value) != channels:
        raise ValueError(f"{name} must have {channels} elements, got {len(value)}")
    return np.asarray(value, dtype=np.float32)


def apply_table(pixels: np.ndarray, table: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """The channels-first uint8 ``pixels`` mapped through ``table`` (from ``value_table``), into
    ``out`` (a float32 array of the same shape) when given."""
    if out is None:
        out = np.empty(pixels.shape, dtype=np.float32)
    for channel in range(pixels.shape[0]):
        out[channel] = table[channel][pixels[channel]]
    return out


def rescale_normalize(
    pixels: np.ndarray,
    rescale_factor: float | None,
    mean: float | Sequence[float] | None,
    std: float | Sequence[float] | None,
) -> np.ndarray:
    """Channels-first uint8 ``pixels`` rescaled and normalised as transformers' PIL backend does
    (``None`` leaves a step out; with both left out the uint8 pixels come back unchanged)."""
    if rescale_factor is None and (mean is None or std is None):
        return pixels
    return apply_table(pixels, value_table(pixels.shape[0], rescale_factor, mean, std))


def pad_bottom_right(array: np.ndarray, height: int, width: int, fill: float = 0) -> np.ndarray:
    """A channels-first array padded at the bottom and right to ``height`` x ``width``."""
    h, w = array.shape[-2:]
    if h > height or w > width:
        raise ValueError(
            "Padding dimensions are negative. Please make sure that the padded size is larger than "
            f"the original size. Got padded size: {(height, width)}, original size: {(h, w)}."
        )
    if (h, w) == (height, width):
        return array
    out = np.full((*array.shape[:-2], height, width), fill, dtype=array.dtype)
    out[..., :h, :w] = array
    return out


def center_crop(array: np.ndarray, height: int, width: int) -> np.ndarray:
    """transformers' ``center_crop`` of a channels-first array (zero-padded where it is smaller)."""
    orig_height, orig_width = array.shape[-2:]
    top = (orig_height - height) // 2
    left = (orig_width - width) // 2
    if top >= 0 and left >= 0:
        return array[..., top : top + height, left : left + width]
    new_height, new_width = max(height, orig_height), max(width, orig_width)
    canvas = np.zeros((*array.shape[:-2], new_height, new_width), dtype=array.dtype)
    top_pad = math.ceil((new_height - orig_height) / 2)
    left_pad = math.ceil((new_width - orig_width) / 2)
    canvas[..., top_pad : top_pad + orig_height, left_pad : left_pad + orig_width] = array
    top += top_pad
    left += left_pad
    return canvas[
        ...,
        max(0, top) : min(new_height, top + height),
        max(0, left) : min(new_width, left + width),
    ]


# -- sizes ----------------------------------------------------------------------------------------


def size_dict(value: Any, default_to_square: bool = True) -> dict[str, int]:
    """A config's ``size``-like value as transformers' ``get_size_dict`` reads it: a dict as is, an
    int as a square (or as ``shortest_edge`` when not ``default_to_square``), a pair as (h, w)."""
    if isinstance(value, Mapping):
        return {key: int(item) for key, item in value.items() if item is not None}
    if isinstance(value, int):
        return {"height": value, "width": value} if default_to_square else {"shortest_edge": value}
    if isinstance(value, list | tuple) and len(value) == 2:
        return {"height": int(value[0]), "width": int(value[1])}
    raise ValueError(f"Could not convert size input to size dict: {value}")


def size_with_aspect_ratio(
    height: int, width: int, size: int, max_size: int | None = None
) -> tuple[int, int]:
    """transformers' ``get_size_with_aspect_ratio``: shortest edge to ``size``, longest at most
    ``max_size``."""
    raw_size = None
    if max_size is not None:
        min_original = float(min(height, width))
        max_original = float(max(height, width))
        if max_original / min_original * size > max_size:
            raw_size = max_size * min_original / max_original
            size = round(raw_size)
    if (height <= width and height == size) or (width <= height and width == size):
        return height, width
    if width < height:
        if raw_size is not None:
            return int(raw_size * height / width), size
        return int(size * height / width), size
    if raw_size is not None:
        return size, int(raw_size * width / height)
    return size, int(size * width / height)


def shortest_edge_size(height: int, width: int, size: int) -> tuple[int, int]:
    """transformers' ``get_resize_output_image_size`` with ``default_to_square=False``: the
    shortest edge to ``size``, the longest scaled and truncated."""
    short, long = (width, height) if width <= height else (height, width)
    new_short, new_long = size, int(size * long / short)
    return (new_long, new_short) if width <= height else (new_short, new_long)


def size_for_max_height_width(
    height: int, width: int, max_height: int, max_width: int
) -> tuple[int, int]:
    """transformers' ``get_image_size_for_max_height_width``: scaled to fit, aspect kept."""
    scale = min(max_height / height, max_width / width)
    return int(height * scale), int(width * scale)


def resize_output_size(height: int, width: int, size: Mapping[str, int]) -> tuple[int, int]:
    """The (height, width) ``PilBackend.resize`` resizes to for a ``size`` dict."""
    shortest, longest = size.get("shortest_edge"), size.get("longest_edge")
    if shortest and longest:
        return size_with_aspect_ratio(height, width, shortest, longest)
    if shortest:
        return shortest_edge_size(height, width, shortest)
    if size.get("max_height") and size.get("max_width"):
        return size_for_max_height_width(height, width, size["max_height"], size["max_width"])
    if size.get("height") and size.get("width"):
        return size["height"], size["width"]
    raise ValueError(
        "Size must contain 'height' and 'width' keys, or 'max_height' and 'max_width', or "
        f"'shortest_edge' key. Got {dict(size)}."
    )

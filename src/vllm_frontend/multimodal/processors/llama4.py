"""Llama 4: transformers' ``Llama4ImageProcessor`` (it has only a torchvision backend) in numpy,
and the prompt text vLLM puts in place of each image.

An image is fitted without distortion into the best canvas of ``size`` tiles (336 x 336 for the
released models, at most ``max_patches`` tiles): the canvas that needs the least upscaling, or
else the least downscaling, smallest first on a tie; the image is never upscaled beyond one tile's
side unless ``resize_to_max_canvas``. It is resized (torch's antialiased bilinear on the bytes,
:mod:`torch_resize`), padded with zeros at the bottom and right, rescaled and normalised in
bfloat16 (the values are exact bfloat16 numbers, returned as float32), cut into tiles row by row,
and followed by a global tile (the whole image resized to one tile) when there is more than one.
``aspect_ratios`` gives each image's (rows, columns) of tiles.

transformers computes the canvas scales in float32 tensors and, where a target side is a tensor,
the resize size too; :func:`best_canvas` and :func:`resized_size` repeat those precisions.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from PIL import Image

from vllm_frontend.engine.tensors import to_bfloat16_words
from vllm_frontend.multimodal.processors import image_ops
from vllm_frontend.multimodal.processors.options import Options
from vllm_frontend.multimodal.processors.torch_resize import resize_bilinear_u8

DEFAULTS: dict[str, Any] = {
    "do_convert_rgb": True,
    "do_resize": True,
    "size": {"height": 336, "width": 336},
    "resample": int(image_ops.BILINEAR),
    "do_rescale": True,
    "rescale_factor": 1 / 255,
    "do_normalize": True,
    "image_mean": image_ops.IMAGENET_STANDARD_MEAN,
    "image_std": image_ops.IMAGENET_STANDARD_STD,
    "max_patches": 16,
    "resize_to_max_canvas": False,
}

IMAGE_START = "<|image_start|>"
IMAGE_END = "<|image_end|>"
IMAGE = "<|image|>"
PATCH = "<|patch|>"
TILE_X_SEPARATOR = "<|tile_x_separator|>"
TILE_Y_SEPARATOR = "<|tile_y_separator|>"

_F32 = np.float32


@functools.lru_cache(maxsize=16)
def supported_canvases(max_tiles: int, tile: int) -> tuple[tuple[int, int], ...]:
    """Every (height, width) canvas of at most ``max_tiles`` tiles of side ``tile``, in
    transformers' ``find_supported_resolutions`` order (grouped by aspect ratio, first seen from
    the most tiles down)."""
    by_ratio: dict[float, list[tuple[int, int]]] = {}
    for tiles in range(max_tiles, 0, -1):
        for rows in sorted(d for d in range(1, tiles + 1) if tiles % d == 0):
            by_ratio.setdefault(rows / (tiles // rows), []).append((rows, tiles // rows))
    return tuple((r * tile, c * tile) for grid in by_ratio.values() for r, c in grid)


def best_canvas(
    height: int, width: int, canvases: tuple[tuple[int, int], ...], to_max: bool = False
) -> tuple[int, int]:
    """transformers' ``get_best_fit``: the canvas whose limiting scale (float32) is the smallest
    upscale (the largest with ``to_max``), else the largest downscale; the smallest area on a tie
    (the first of those)."""
    sizes = np.asarray(canvases, dtype=np.int64)
    scale_h = sizes[:, 0].astype(_F32) / _F32(height)
    scale_w = sizes[:, 1].astype(_F32) / _F32(width)
    scales = np.where(scale_h > scale_w, scale_w, scale_h)
    up = scales[scales >= 1]
    selected = (up.max() if to_max else up.min()) if up.size else scales[scales < 1].max()
    chosen = sizes[scales == selected]
    best = chosen[int(np.argmin(chosen[:, 0] * chosen[:, 1]))]
    return int(best[0]), int(best[1])


def _ratio(target: int, exact: bool, side: int) -> float | np.float32:
    """``target / side`` as transformers computes it: a Python float when the target is a Python
    int (``exact``), a float32 when it is a tensor element."""
    return target / side if exact else _F32(target) / _F32(side)


def resized_size(
    height: int, width: int, canvas: tuple[int, int], tile: int, to_max: bool
) -> tuple[int, int]:
    """The (height, width) the image is resized to inside ``canvas`` (its aspect kept, upscaled
    at most to one tile's side unless ``to_max``), with transformers' mixed float precisions."""
    targets = []
    for side, canvas_side in ((height, canvas[0]), (width, canvas[1])):
        if to_max:
            targets.append((canvas_side, False))
        else:
            floor = max(side, tile)
            # Python's min(int, tensor) keeps the int unless the tensor is smaller.
            targets.append((canvas_side, False) if canvas_side < floor else (floor, True))
    (target_h, exact_h), (target_w, exact_w) = targets
    scale_w = _ratio(target_w, exact_w, width)
    scale_h = _ratio(target_h, exact_h, height)
    # With a tensor on either side, the comparison is in float32.
    exact = exact_w and exact_h
    narrower = scale_w < scale_h if exact else bool(_F32(scale_w) < _F32(scale_h))
    if narrower:
        product = height * scale_w if exact_w else _F32(height) * _F32(scale_w)
        new_h, new_w = min(math.floor(product), target_h), target_w
    else:
        product = width * scale_h if exact_h else _F32(width) * _F32(scale_h)
        new_h, new_w = target_h, min(math.floor(product), target_w)
    return max(int(new_h), 1), max(int(new_w), 1)


def _value_table(o: Mapping[str, Any], channels: int) -> np.ndarray | None:
    """What each uint8 value becomes per channel (float32), or None to keep the bytes: with both
    steps, ``to(bfloat16) * rescale_factor`` then ``(x - mean) / std``, each rounded to bfloat16."""
    values = np.arange(256, dtype=np.float32)
    if o["do_rescale"] and o["do_normalize"]:
        scaled = _bf16(values * _F32(o["rescale_factor"]))
        mean = _bf16(_per_channel(o["image_mean"], channels))
        std = _bf16(_per_channel(o["image_std"], channels))
        return _bf16(_bf16(scaled[None, :] - mean[:, None]) / std[:, None])
    if o["do_rescale"]:
        return np.broadcast_to(values * _F32(o["rescale_factor"]), (channels, 256))
    if o["do_normalize"]:
        raise TypeError("Input tensor should be a float tensor. Got torch.uint8.")
    return None


def _per_channel(value: Any, channels: int) -> np.ndarray:
    if isinstance(value, int | float):
        return np.full(channels, value, dtype=np.float32)
    return np.asarray(value, dtype=np.float32)


def _bf16(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to bfloat16 (to nearest, ties to even), as float32."""
    words = to_bfloat16_words(values).astype(np.uint32) << 16
    return words.view(np.float32)


class Llama4ImageProcessor:
    """transformers' ``Llama4ImageProcessor`` of one model's config."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.options = Options(DEFAULTS, config)

    def preprocess(self, images: list[Image.Image], **kwargs: Any) -> dict[str, np.ndarray]:
        """``pixel_values`` (tiles of every image, C, H, W) float32 holding bfloat16 values
        (``to_bfloat16_words`` gives the model's bfloat16 words exactly), each image's tiles then
        its global tile, and ``aspect_ratios`` (images, 2) int64 of (rows, columns)."""
        o = self.options.merged(kwargs)
        if not o["do_resize"]:
            raise ValueError("Llama 4 always resizes images: do_resize=False is not supported")
        size = image_ops.size_dict(o["size"])
        if size["height"] != size["width"]:
            raise ValueError("`size` must be square.")
        if int(o["resample"]) != int(image_ops.BILINEAR):
            raise ValueError("this processor resizes bilinearly only")
        tile = size["height"]
        canvases = supported_canvases(int(o["max_patches"]), tile)
        tiles: list[np.ndarray] = []
        ratios = []
        for image in images:
            pixels = np.asarray(image_ops.prepare(image, o["do_convert_rgb"]))
            if pixels.ndim == 2:
                pixels = pixels[:, :, None]
            height, width = pixels.shape[:2]
            canvas = best_canvas(height, width, canvases, o["resize_to_max_canvas"])
            new_h, new_w = resized_size(height, width, canvas, tile, o["resize_to_max_canvas"])
            resized = resize_bilinear_u8(pixels, new_h, new_w)
            padded = np.zeros((*canvas, pixels.shape[2]), dtype=np.uint8)
            padded[:new_h, :new_w] = resized
            rows, columns = canvas[0] // tile, canvas[1] // tile
            ratios.append((rows, columns))
            grid = padded.reshape(rows, tile, columns, tile, -1).transpose(0, 2, 4, 1, 3)
            tiles.extend(grid.reshape(rows * columns, -1, tile, tile))
            if rows * columns > 1:
                tiles.append(resize_bilinear_u8(pixels, tile, tile).transpose(2, 0, 1))
        stacked = np.stack(tiles)
        table = _value_table(o, stacked.shape[1])
        if table is not None:
            out = np.empty(stacked.shape, dtype=np.float32)
            for channel in range(stacked.shape[1]):
                out[:, channel] = table[channel][stacked[:, channel]]
            stacked = out
        return {"pixel_values": stacked, "aspect_ratios": np.asarray(ratios, dtype=np.int64)}

    def aspect_ratio(self, height: int, width: int, **kwargs: Any) -> tuple[int, int]:
        """The (rows, columns) of tiles an image of this size becomes (what vLLM's Llama 4
        processing computes from the image's size to build its prompt text)."""
        o = self.options.merged(kwargs)
        tile = image_ops.size_dict(o["size"])["height"]
        canvas = best_canvas(
            height,
            width,
            supported_canvases(int(o["max_patches"]), tile),
            o["resize_to_max_canvas"],
        )
        return canvas[0] // tile, canvas[1] // tile


def patches_per_tile(
    image_size: int = 336, patch_size: int = 14, shuffle_ratio: float = 0.5
) -> int:
    """The prompt tokens one tile takes: the vision config's patches per tile over the pixel
    shuffle's downsampling (144 for the released models), as vLLM's ``get_patch_per_chunk``."""
    if image_size % patch_size:
        raise ValueError(f"tile size {image_size} is not a multiple of patch size {patch_size}")
    return (image_size // patch_size) ** 2 // round(1.0 / shuffle_ratio**2)


def image_replacement(aspect_ratio: tuple[int, int], tokens_per_tile: int = 144) -> str:
    """The prompt text vLLM puts in place of one image of ``aspect_ratio`` (rows, columns) tiles
    (its ``<|patch|>`` positions are the embeddings), as ``Llama4Processor._prompt_split_image``."""
    rows, columns = aspect_ratio
    parts = [IMAGE_START]
    if rows * columns > 1:
        tile_text = PATCH * tokens_per_tile
        for _ in range(rows):
            parts.append(TILE_X_SEPARATOR.join([tile_text] * columns))
            parts.append(TILE_Y_SEPARATOR)
    parts.extend((IMAGE, PATCH * tokens_per_tile, IMAGE_END))
    return "".join(parts)


def num_image_tokens(aspect_ratio: tuple[int, int], tokens_per_tile: int = 144) -> int:
    """How many prompt tokens :func:`image_replacement` is (each special token is one token)."""
    rows, columns = aspect_ratio
    tiles = rows * columns
    local = tiles * tokens_per_tile + rows * (columns - 1) + rows if tiles > 1 else 0
    return 1 + local + 1 + tokens_per_tile + 1

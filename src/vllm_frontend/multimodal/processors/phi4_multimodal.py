"""Phi-4-multimodal: transformers' ``Phi4MultimodalImageProcessor`` (it has only a torchvision
backend) in numpy, and the number of prompt tokens vLLM gives each image.

Dynamic HD: an image is fitted into a grid of ``size`` crops (448 x 448): as many as its sides
need, or, when that is over ``dynamic_hd``, the grid of at most that many crops whose aspect
ratio is closest to its own. It is resized to the grid's width or height keeping its aspect
(torch's antialiased bilinear on the bytes, :mod:`torch_resize`), padded with white at the
bottom or right, rescaled and normalised in float32, and cut into crops row by row, after a
global crop (the normalised canvas resized to one crop, torch's bicubic without antialiasing,
float32: within 1e-6 of torch's, not bit-exact). ``image_attention_mask`` marks each crop's
``patch_size`` patches that are not padding; ``num_img_tokens`` counts the image's tokens.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from PIL import Image

from vllm_frontend.multimodal.processors import image_ops
from vllm_frontend.multimodal.processors.options import Options
from vllm_frontend.multimodal.processors.torch_resize import (
    resize_bicubic_float,
    resize_bilinear_u8,
)

DEFAULTS: dict[str, Any] = {
    "do_convert_rgb": True,
    "do_resize": True,
    "size": {"height": 448, "width": 448},
    "resample": int(image_ops.BICUBIC),
    "patch_size": 14,
    "dynamic_hd": 36,
    "do_rescale": True,
    "rescale_factor": 1 / 255,
    "do_normalize": True,
    "image_mean": image_ops.IMAGENET_STANDARD_MEAN,
    "image_std": image_ops.IMAGENET_STANDARD_STD,
}

# vLLM's Phi-4-multimodal prompt: the image's n-th placeholder is "<|image_n|>", replaced by
# this token id once per image token.
IMAGE_PLACEHOLDER_TOKEN_ID = 200010


def crop_grid(height: int, width: int, crop: int, max_crops: int) -> tuple[int, int]:
    """The (columns, rows) of crops an image is fitted into: as many as its sides need, or the
    grid of at most ``max_crops`` closest to its aspect ratio (transformers'
    ``find_closest_aspect_ratio`` over its candidate order)."""
    columns, rows = math.ceil(width / float(crop)), math.ceil(height / float(crop))
    if columns * rows <= max_crops:
        return columns, rows
    aspect_ratio = width / height
    candidates = {
        (i, j)
        for n in range(1, max_crops + 1)
        for i in range(1, n + 1)
        for j in range(1, n + 1)
        if 1 <= i * j <= max_crops
    }
    best_diff = float("inf")
    best = (1, 1)
    area = width * height
    for grid in sorted(candidates, key=lambda grid: grid[0] * grid[1]):
        diff = abs(aspect_ratio - grid[0] / grid[1])
        if diff < best_diff:
            best_diff = diff
            best = grid
        elif diff == best_diff and area > 0.5 * crop * crop * grid[0] * grid[1]:
            best = grid
    return best


def fitted_size(
    height: int, width: int, grid: tuple[int, int], crop: int
) -> tuple[int, int, int, int]:
    """(new height, new width, bottom padding, right padding) of an image in its grid's canvas."""
    target_w, target_h = crop * grid[0], crop * grid[1]
    ratio_w, ratio_h = target_w / width, target_h / height
    if ratio_w < ratio_h:
        new_h = int(height * ratio_w)
        return new_h, target_w, target_h - new_h, 0
    new_w = int(width * ratio_h)
    return target_h, new_w, 0, target_w - new_w


def attention_mask(
    grid: tuple[int, int], mask_size: int, pad_h: int, pad_w: int, patch: int
) -> np.ndarray:
    """The canvas's (rows x mask_size, columns x mask_size) float32 mask of non-padding
    patches (padding of at least a patch masks ``floor(padding / patch)`` patch rows or
    columns)."""
    mask = np.ones((mask_size * grid[1], mask_size * grid[0]), dtype=np.float32)
    if pad_w >= patch:
        mask[:, -math.floor(pad_w / patch) :] = 0
    if pad_h >= patch:
        mask[-math.floor(pad_h / patch) :, :] = 0
    return mask


def tokens_from_mask(mask: np.ndarray, grid: tuple[int, int], mask_size: int) -> int:
    """An image's prompt tokens from its canvas mask: the global crop's 16 x 16 + 16 newlines,
    a separator, and per 2 x 2-downsampled non-padding patch of the crops one token, plus one
    newline per row of them (the global crop's counts are transformers' constants, right for
    the released 448-pixel crops of 14-pixel patches whatever the config says)."""
    columns, rows = grid
    half = mask_size // 2 + mask_size % 2
    crops = mask.reshape(rows, mask_size, columns, mask_size)[:, ::2, :, ::2]
    down = crops.reshape(rows * half, columns * half)
    return 256 + 1 + int(down.sum()) + int(down[:, 0].sum()) + 16


class Phi4MultimodalImageProcessor:
    """transformers' ``Phi4MultimodalImageProcessor`` of one model's config."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.options = Options(DEFAULTS, config)

    def _geometry(self, o: Mapping[str, Any]) -> tuple[int, int, int]:
        size = image_ops.size_dict(o["size"])
        if size["height"] != size["width"]:
            raise ValueError("Phi4MultimodalImageProcessor only supports square sizes.")
        crop, patch = size["height"], int(o["patch_size"])
        return crop, patch, crop // patch

    def preprocess(self, images: list[Image.Image], **kwargs: Any) -> dict[str, np.ndarray]:
        """``image_pixel_values`` (images, crops, 3, crop, crop) float32 (the global crop first,
        zero crops after an image's own up to the batch's most), ``image_sizes`` (images, 2) int64
        canvas (height, width), ``image_attention_mask`` (images, crops, mask, mask) float32 (ones
        for the padding crops) and ``num_img_tokens`` (images,) int64."""
        o = self.options.merged(kwargs)
        crop, patch, mask_size = self._geometry(o)
        table = self._table(o)
        pixel_values, masks, sizes, tokens = [], [], [], []
        for image in images:
            pixels = np.asarray(image_ops.prepare(image, o["do_convert_rgb"]))
            if pixels.ndim == 2:
                pixels = pixels[:, :, None]
            height, width = pixels.shape[:2]
            grid = crop_grid(height, width, crop, int(o["dynamic_hd"]))
            new_h, new_w, pad_h, pad_w = fitted_size(height, width, grid, crop)
            mask = attention_mask(grid, mask_size, pad_h, pad_w, patch)
            if min(new_h, crop * grid[1]) < 10 or min(new_w, crop * grid[0]) < 10:
                raise ValueError(f"the aspect ratio is very extreme {(new_w, new_h)}")
            canvas = np.full((new_h + pad_h, new_w + pad_w, pixels.shape[2]), 255, np.uint8)
            canvas[:new_h, :new_w] = resize_bilinear_u8(pixels, new_h, new_w)
            channels_first = canvas.transpose(2, 0, 1)
            normalized = np.empty(channels_first.shape, dtype=np.float32)
            for channel in range(channels_first.shape[0]):
                normalized[channel] = table[channel][channels_first[channel]]
            columns, rows = grid
            global_crop = resize_bicubic_float(normalized, crop, crop)
            crops = normalized.reshape(-1, rows, crop, columns, crop).transpose(1, 3, 0, 2, 4)
            pixel_values.append([global_crop, *crops.reshape(rows * columns, -1, crop, crop)])
            mask_crops = mask.reshape(rows, mask_size, columns, mask_size).transpose(0, 2, 1, 3)
            masks.append(
                [
                    np.ones((mask_size, mask_size), np.float32),
                    *mask_crops.reshape(-1, mask_size, mask_size),
                ]
            )
            sizes.append((new_h + pad_h, new_w + pad_w))
            tokens.append(tokens_from_mask(mask, grid, mask_size))
        if not images:
            raise ValueError("no images to process")
        most = max(len(image_crops) for image_crops in pixel_values)
        out_pixels = np.zeros((len(images), most, *pixel_values[0][0].shape), dtype=np.float32)
        out_masks = np.ones((len(images), most, mask_size, mask_size), dtype=np.float32)
        for index, (image_crops, image_masks) in enumerate(zip(pixel_values, masks, strict=True)):
            out_pixels[index, : len(image_crops)] = image_crops
            out_masks[index, : len(image_masks)] = image_masks
        return {
            "image_pixel_values": out_pixels,
            "image_sizes": np.asarray(sizes, dtype=np.int64),
            "image_attention_mask": out_masks,
            "num_img_tokens": np.asarray(tokens, dtype=np.int64),
        }

    @staticmethod
    def _table(o: Mapping[str, Any]) -> np.ndarray:
        """What each uint8 value becomes per channel: transformers' fused rescale and normalise
        (``(x - mean / rescale_factor) / (std / rescale_factor)`` in float32), or the rescale."""
        values = np.arange(256, dtype=np.float32)
        factor = np.float32(o["rescale_factor"])
        if o["do_normalize"]:
            mean = np.asarray(o["image_mean"], dtype=np.float32)
            std = np.asarray(o["image_std"], dtype=np.float32)
            if o["do_rescale"]:
                inverse = np.float32(1.0 / o["rescale_factor"])
                mean, std = mean * inverse, std * inverse
            return (values[None, :] - mean[:, None]) / std[:, None]
        if o["do_rescale"]:
            return np.broadcast_to(values * factor, (3, 256))
        raise ValueError("this processor needs do_rescale or do_normalize")

    def num_image_tokens(self, height: int, width: int, **kwargs: Any) -> int:
        """The prompt tokens of an image of this size (what ``num_img_tokens`` says, and vLLM's
        ``get_num_image_tokens`` computes from the size alone)."""
        o = self.options.merged(kwargs)
        crop, patch, mask_size = self._geometry(o)
        grid = crop_grid(height, width, crop, int(o["dynamic_hd"]))
        _, _, pad_h, pad_w = fitted_size(height, width, grid, crop)
        return tokens_from_mask(
            attention_mask(grid, mask_size, pad_h, pad_w, patch), grid, mask_size
        )

"""Pixtral and Mistral 3 (Hugging Face format): transformers' ``PixtralImageProcessor`` (PIL
backend) in numpy and Pillow, and the image's token layout vLLM puts in the prompt.

An image larger than ``size["longest_edge"]`` on either side is scaled down (floored) to fit, then
resized (bicubic) up to whole patches; the batch is zero-padded to its largest image and
``image_sizes`` keeps each image's own. ``PixtralProcessor`` passes the image processor
``patch_size`` x ``spatial_merge_size`` as its patch size (Mistral 3: 14 x 2 = 28), and the prompt
holds one ``[IMG]`` per merged patch, each row closed by ``[IMG_BREAK]``, the last by ``[IMG_END]``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TypeVar

import numpy as np
from PIL import Image

from vllm_frontend.multimodal.processors import image_ops
from vllm_frontend.multimodal.processors.options import Options

DEFAULTS: dict[str, Any] = {
    "do_convert_rgb": True,
    "do_resize": True,
    "size": {"longest_edge": 1024},
    "patch_size": {"height": 16, "width": 16},
    "resample": int(image_ops.BICUBIC),
    "do_center_crop": None,
    "crop_size": None,
    "do_rescale": True,
    "rescale_factor": 1 / 255,
    "do_normalize": True,
    "image_mean": image_ops.OPENAI_CLIP_MEAN,
    "image_std": image_ops.OPENAI_CLIP_STD,
    "do_pad": True,
}

_Token = TypeVar("_Token")


def resized_size(
    height: int, width: int, max_height: int, max_width: int, patch_height: int, patch_width: int
) -> tuple[int, int]:
    """The (height, width) an image is resized to: scaled down (floored) to fit the maximum, then
    up to whole patches."""
    ratio = max(height / max_height, width / max_width)
    if ratio > 1:
        height = math.floor(height / ratio)
        width = math.floor(width / ratio)
    rows = (height - 1) // patch_height + 1
    cols = (width - 1) // patch_width + 1
    return rows * patch_height, cols * patch_width


def _pair(value: Any) -> tuple[int, int]:
    """A patch size (an int, or a dict of height and width) as (height, width)."""
    if isinstance(value, Mapping):
        return int(value["height"]), int(value["width"])
    return int(value), int(value)


class PixtralImageProcessor:
    """transformers' ``PixtralImageProcessor`` (PIL backend) of one model's config."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.options = Options(DEFAULTS, config)

    def _max_size(self, o: Mapping[str, Any]) -> tuple[int, int]:
        """The (height, width) bound of ``size``: its longest edge twice, or height and width."""
        size = image_ops.size_dict(o["size"])
        if size.get("longest_edge"):
            return size["longest_edge"], size["longest_edge"]
        if size.get("height") and size.get("width"):
            return size["height"], size["width"]
        raise ValueError("size must contain either 'longest_edge' or 'height' and 'width'.")

    def preprocess(self, images: list[Image.Image], **kwargs: Any) -> dict[str, np.ndarray]:
        """``pixel_values`` (images, C, H, W) float32, zero-padded to the largest image, and
        ``image_sizes`` (images, 2) int64, each image's (height, width) before padding."""
        o = self.options.merged(kwargs)
        resample = image_ops.resample_filter(o["resample"])
        patch = _pair(o["patch_size"])
        rescale = o["rescale_factor"] if o["do_rescale"] else None
        mean, std = (o["image_mean"], o["image_std"]) if o["do_normalize"] else (None, None)
        processed = []
        for image in images:
            image = image_ops.prepare(image, o["do_convert_rgb"])
            if o["do_resize"]:
                height, width = resized_size(image.height, image.width, *self._max_size(o), *patch)
                image = image_ops.resize(image, height, width, resample)
            pixels = image_ops.to_channels_first(image)
            if o["do_center_crop"]:
                crop = image_ops.size_dict(o["crop_size"])
                pixels = image_ops.center_crop(pixels, crop["height"], crop["width"])
            processed.append(image_ops.rescale_normalize(pixels, rescale, mean, std))
        sizes = np.asarray([p.shape[1:] for p in processed], dtype=np.int64).reshape(-1, 2)
        if o["do_pad"]:
            height, width = int(sizes[:, 0].max()), int(sizes[:, 1].max())
            batch = np.zeros(
                (len(processed), processed[0].shape[0], height, width), processed[0].dtype
            )
            for index, pixels in enumerate(processed):
                batch[index, :, : pixels.shape[1], : pixels.shape[2]] = pixels
        elif len({p.shape for p in processed}) > 1:
            raise ValueError("images of different sizes cannot form one batch without padding")
        else:
            batch = np.stack(processed)
        return {"pixel_values": batch, "image_sizes": sizes}

    def patch_grid(
        self, height: int, width: int, patch_size: int, **kwargs: Any
    ) -> tuple[int, int]:
        """(rows, cols) of ``patch_size`` patches (the processor's patch size times the spatial
        merge size) the prompt holds for an image of this size (vLLM's ``get_patch_grid_size``)."""
        o = self.options.merged(kwargs)
        resized_height, resized_width = resized_size(
            height, width, *self._max_size(o), patch_size, patch_size
        )
        return resized_height // patch_size, resized_width // patch_size


def image_tokens(
    rows: int, cols: int, image_token: _Token, break_token: _Token, end_token: _Token
) -> list[_Token]:
    """The tokens in place of one image of ``rows`` x ``cols`` merged patches: each row's
    ``image_token`` s then ``break_token``, the last row's break replaced by ``end_token``."""
    tokens = ([image_token] * cols + [break_token]) * rows
    tokens[-1] = end_token
    return tokens

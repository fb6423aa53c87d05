"""Idefics3 (and SmolVLM): transformers' ``Idefics3ImageProcessor`` (PIL backend) in numpy and
Pillow, and the prompt text vLLM puts in place of each image.

An image is resized so its longest edge is ``size["longest_edge"]`` (even sides, at most 4096),
then up to multiples of the tile size ``max_image_size["longest_edge"]``, cut into rows x cols
tiles, and followed by the whole image resized to one tile (the global image); every frame is
rescaled, normalised and padded to the largest frame of the batch, with a pixel mask.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from PIL import Image

from vllm_frontend.multimodal.processors import image_ops
from vllm_frontend.multimodal.processors.options import Options

MAX_IMAGE_SIZE = 4096  # transformers' absolute maximum side

DEFAULTS: dict[str, Any] = {
    "do_convert_rgb": True,
    "do_resize": True,
    "size": {"longest_edge": 4 * 364},
    "resample": int(image_ops.LANCZOS),
    "do_image_splitting": True,
    "max_image_size": {"longest_edge": 364},
    "do_rescale": True,
    "rescale_factor": 1 / 255,
    "do_normalize": True,
    "image_mean": image_ops.IMAGENET_STANDARD_MEAN,
    "image_std": image_ops.IMAGENET_STANDARD_STD,
    "do_pad": True,
    "return_row_col_info": False,
}


def _rescale_to_max_len(height: int, width: int, max_len: int) -> tuple[int, int]:
    """The longest edge set to ``max_len``, the other scaled, truncated, made even (at least 1)."""
    aspect_ratio = width / height
    if width >= height:
        width = max_len
        height = int(width / aspect_ratio)
        if height % 2 != 0:
            height += 1
    else:
        height = max_len
        width = int(height * aspect_ratio)
        if width % 2 != 0:
            width += 1
    return max(height, 1), max(width, 1)


def _scale_below_upper_bound(height: int, width: int, max_len: int) -> tuple[int, int]:
    """The size scaled down so that neither side exceeds ``max_len`` (at least 1)."""
    aspect_ratio = width / height
    if width >= height and width > max_len:
        width = max_len
        height = int(width / aspect_ratio)
    elif height > width and height > max_len:
        height = max_len
        width = int(height * aspect_ratio)
    return max(height, 1), max(width, 1)


def resized_size(height: int, width: int, longest_edge: int) -> tuple[int, int]:
    """The (height, width) an image is first resized to for ``size["longest_edge"]``."""
    height, width = _rescale_to_max_len(height, width, longest_edge)
    return _scale_below_upper_bound(height, width, MAX_IMAGE_SIZE)


def vision_encoder_size(height: int, width: int, tile: int) -> tuple[int, int]:
    """The (height, width), multiples of ``tile``, an image is resized to before it is split."""
    aspect_ratio = width / height
    if width >= height:
        width = math.ceil(width / tile) * tile
        height = int(width / aspect_ratio)
        height = math.ceil(height / tile) * tile
    else:
        height = math.ceil(height / tile) * tile
        width = int(height * aspect_ratio)
        width = math.ceil(width / tile) * tile
    return height, width


class Idefics3ImageProcessor:
    """transformers' ``Idefics3ImageProcessor`` (PIL backend) of one model's config."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.options = Options(DEFAULTS, config)

    def preprocess(self, images: list[Image.Image], **kwargs: Any) -> dict[str, np.ndarray]:
        """``pixel_values`` (1, frames, C, H, W) float32 and ``pixel_attention_mask`` (1, frames,
        H, W) int64 for the images of one prompt (``pixel_values`` alone without ``do_pad``), and
        ``rows`` / ``cols`` (1, images) int64 with ``return_row_col_info``."""
        o = self.options.merged(kwargs)
        resample = image_ops.resample_filter(o["resample"])
        size = image_ops.size_dict(o["size"])
        tile = int(o["max_image_size"]["longest_edge"])
        frames: list[np.ndarray] = []
        rows: list[int] = []
        cols: list[int] = []
        for image in images:
            image = image_ops.prepare(image, o["do_convert_rgb"])
            if o["do_resize"]:
                image = self._resize(image, size, resample)
            if o["do_image_splitting"]:
                height, width = vision_encoder_size(image.height, image.width, tile)
                image = image_ops.resize(image, height, width, resample)
                image_frames, n_rows, n_cols = self._split(image, tile, resample)
                frames.extend(image_frames)
                rows.append(n_rows)
                cols.append(n_cols)
            else:
                image = image_ops.resize(image, tile, tile, resample)
                frames.append(image_ops.to_channels_first(image))
                rows.append(0)
                cols.append(0)
        out: dict[str, np.ndarray] = {}
        rescale = o["rescale_factor"] if o["do_rescale"] else None
        mean, std = (o["image_mean"], o["image_std"]) if o["do_normalize"] else (None, None)
        if o["do_pad"]:
            out.update(_pad_frames(frames, rescale, mean, std))
        else:
            processed = [image_ops.rescale_normalize(f, rescale, mean, std) for f in frames]
            out["pixel_values"] = np.asarray([processed])
        if o["return_row_col_info"]:
            out["rows"] = np.asarray([rows], dtype=np.int64)
            out["cols"] = np.asarray([cols], dtype=np.int64)
        return out

    @staticmethod
    def _resize(
        image: Image.Image, size: Mapping[str, int], resample: Image.Resampling
    ) -> Image.Image:
        """The first resize: the longest edge to ``size["longest_edge"]``, or to height x width."""
        if size.get("longest_edge"):
            height, width = resized_size(image.height, image.width, size["longest_edge"])
        elif size.get("height") and size.get("width"):
            height, width = size["height"], size["width"]
        else:
            raise ValueError("size must have the key 'longest_edge' or 'height' and 'width'.")
        return image_ops.resize(image, height, width, resample)

    @staticmethod
    def _split(
        image: Image.Image, tile: int, resample: Image.Resampling
    ) -> tuple[list[np.ndarray], int, int]:
        """The image's tiles, row by row, then the global image (or the image alone when it fits
        in one tile), with the number of rows and columns (0, 0 when not split)."""
        pixels = image_ops.to_channels_first(image)
        height, width = pixels.shape[-2:]
        if height <= tile and width <= tile:
            return [pixels], 0, 0
        n_rows = (height - tile) // tile + 1
        n_cols = (width - tile) // tile + 1
        frames = [
            pixels[:, r * tile : (r + 1) * tile, c * tile : (c + 1) * tile]
            for r in range(n_rows)
            for c in range(n_cols)
        ]
        frames.append(image_ops.to_channels_first(image_ops.resize(image, tile, tile, resample)))
        return frames, n_rows, n_cols

    def number_of_image_patches(
        self, height: int, width: int, **kwargs: Any
    ) -> tuple[int, int, int]:
        """(frames, rows, cols) for an image of this size, as transformers'
        ``get_number_of_image_patches`` (what vLLM builds the prompt from): frames is rows x cols
        + 1 when the image is split, else 0 (one frame, the image itself)."""
        o = self.options.merged(kwargs)
        if not o["do_image_splitting"]:
            return 0, 0, 0
        tile = int(o["max_image_size"]["longest_edge"])
        height, width = resized_size(height, width, int(o["size"]["longest_edge"]))
        # transformers rounds each side up to whole tiles from the first resize's size (not from
        # the intermediate size the processor itself computes).
        resized_height = math.ceil(height / tile) * tile
        resized_width = math.ceil(width / tile) * tile
        if resized_height > tile or resized_width > tile:
            n_rows = math.ceil(resized_height / tile)
            n_cols = math.ceil(resized_width / tile)
            return n_rows * n_cols + 1, n_rows, n_cols
        return 0, 0, 0


def _pad_frames(
    frames: list[np.ndarray],
    rescale: float | None,
    mean: Any,
    std: Any,
) -> dict[str, np.ndarray]:
    """The frames rescaled, normalised and written into one zero-padded batch, with the mask."""
    max_height = max(f.shape[1] for f in frames)
    max_width = max(f.shape[2] for f in frames)
    channels = frames[0].shape[0]
    pixel_values = np.zeros((1, len(frames), channels, max_height, max_width), dtype=np.float32)
    mask = np.zeros((1, len(frames), max_height, max_width), dtype=np.int64)
    if rescale is None and (mean is None or std is None):
        for index, frame in enumerate(frames):
            pixel_values[0, index, :, : frame.shape[1], : frame.shape[2]] = frame
            mask[0, index, : frame.shape[1], : frame.shape[2]] = 1
        return {"pixel_values": pixel_values, "pixel_attention_mask": mask}
    table = image_ops.value_table(channels, rescale, mean, std)
    for index, frame in enumerate(frames):
        h, w = frame.shape[1:]
        image_ops.apply_table(frame, table, out=pixel_values[0, index, :, :h, :w])
        mask[0, index, :h, :w] = 1
    return {"pixel_values": pixel_values, "pixel_attention_mask": mask}


def image_replacement(
    rows: int,
    cols: int,
    image_seq_len: int,
    image_token: str = "<image>",
    fake_image_token: str = "<fake_token_around_image>",
    global_image_token: str = "<global-img>",
) -> str:
    """The prompt text vLLM puts in place of one image with ``rows`` x ``cols`` tiles (of which
    the ``image_token`` positions are the image's embeddings), as vLLM's ``get_image_repl``."""
    image_tokens = image_token * image_seq_len
    global_image = fake_image_token + global_image_token + image_tokens + fake_image_token
    if rows == 0 and cols == 0:
        return global_image
    parts = []
    for row in range(rows):
        for col in range(cols):
            parts.append(f"{fake_image_token}<row_{row + 1}_col_{col + 1}>{image_tokens}")
        parts.append("\n")
    parts.append("\n")
    parts.append(global_image)
    return "".join(parts)

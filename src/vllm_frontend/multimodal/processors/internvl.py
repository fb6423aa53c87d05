"""InternVL (Hugging Face format) and GOT-OCR 2: transformers' ``GotOcr2ImageProcessor`` (PIL
backend) in numpy and Pillow, and the prompt text vLLM puts in place of each image.

With ``crop_to_patches`` (``InternVLProcessor`` turns it on) an image is resized to the grid of
``size`` tiles, between ``min_patches`` and ``max_patches`` of them, whose aspect ratio is closest
to its own, cut into those tiles, and followed by a thumbnail (the whole image resized to one
tile) when there is more than one; ``num_patches`` counts an image's tiles.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np
from PIL import Image

from vllm_frontend.multimodal.processors import image_ops
from vllm_frontend.multimodal.processors.options import Options

DEFAULTS: dict[str, Any] = {
    "do_convert_rgb": True,
    "do_resize": True,
    "size": {"height": 384, "width": 384},
    "resample": int(image_ops.BICUBIC),
    "do_rescale": True,
    "rescale_factor": 1 / 255,
    "do_normalize": True,
    "image_mean": image_ops.OPENAI_CLIP_MEAN,
    "image_std": image_ops.OPENAI_CLIP_STD,
    "crop_to_patches": False,
    "min_patches": 1,
    "max_patches": 12,
}

# InternVLProcessor's own images_kwargs default: it overrides the image processor's config (which
# says False for the released models), and is what vLLM's processing calls the processor with.
INTERNVL_DEFAULTS: dict[str, Any] = {"crop_to_patches": True}


@functools.lru_cache(maxsize=16)
def _tile_grids(min_tiles: int, max_tiles: int) -> tuple[tuple[int, int], ...]:
    """Every (columns, rows) grid of ``min_tiles``..``max_tiles`` tiles, fewest tiles first."""
    grids = [
        (columns, rows)
        for columns in range(1, max_tiles + 1)
        for rows in range(1, max_tiles + 1)
        if min_tiles <= columns * rows <= max_tiles
    ]
    return tuple(sorted(grids, key=lambda grid: grid[0] * grid[1]))


def tile_grid(
    height: int, width: int, tile_height: int, tile_width: int, min_tiles: int, max_tiles: int
) -> tuple[int, int]:
    """The (columns, rows) grid whose aspect ratio is closest to the image's; on a tie the one
    with more tiles while the image's area is over half of theirs."""
    aspect_ratio = width / height
    area = width * height
    best_diff = float("inf")
    best = (1, 1)
    for grid in _tile_grids(min_tiles, max_tiles):
        diff = abs(aspect_ratio - grid[0] / grid[1])
        if diff < best_diff:
            best_diff = diff
            best = grid
        elif diff == best_diff and area > 0.5 * tile_height * tile_width * grid[0] * grid[1]:
            best = grid
    return best


class GotOcr2ImageProcessor:
    """transformers' ``GotOcr2ImageProcessor`` (PIL backend) of one model's config, with
    ``processor_defaults`` (:data:`INTERNVL_DEFAULTS` under ``InternVLProcessor``) over it, as
    transformers' processors merge their defaults over the image processor's attributes."""

    def __init__(
        self, config: Mapping[str, Any], processor_defaults: Mapping[str, Any] | None = None
    ) -> None:
        self.options = Options(DEFAULTS, {**config, **(processor_defaults or {})})

    def preprocess(self, images: list[Image.Image], **kwargs: Any) -> dict[str, np.ndarray]:
        """``pixel_values`` (tiles, C, H, W) float32, each image's tiles then its thumbnail, and
        ``num_patches`` (images,) int64."""
        o = self.options.merged(kwargs)
        resample = image_ops.resample_filter(o["resample"])
        size = image_ops.size_dict(o["size"])
        rescale = o["rescale_factor"] if o["do_rescale"] else None
        mean, std = (o["image_mean"], o["image_std"]) if o["do_normalize"] else (None, None)
        processed: list[np.ndarray] = []
        num_patches = []
        for image in images:
            image = image_ops.prepare(image, o["do_convert_rgb"])
            if o["crop_to_patches"] and o["max_patches"] > 1:
                tiles = self._tiles(image, size, o["min_patches"], o["max_patches"], resample)
            else:
                if o["do_resize"]:
                    height, width = image_ops.resize_output_size(image.height, image.width, size)
                    image = image_ops.resize(image, height, width, resample)
                tiles = [image_ops.to_channels_first(image)]
            num_patches.append(len(tiles))
            processed.extend(image_ops.rescale_normalize(t, rescale, mean, std) for t in tiles)
        if len({p.shape for p in processed}) > 1:
            raise ValueError("images of different sizes cannot form one batch")
        return {
            "pixel_values": np.stack(processed),
            "num_patches": np.asarray(num_patches, dtype=np.int64),
        }

    @staticmethod
    def _tiles(
        image: Image.Image,
        size: Mapping[str, int],
        min_patches: int,
        max_patches: int,
        resample: Image.Resampling,
    ) -> list[np.ndarray]:
        """The image's tiles, row by row, and its thumbnail when there is more than one tile."""
        tile_height, tile_width = size["height"], size["width"]
        columns, rows = tile_grid(
            image.height, image.width, tile_height, tile_width, min_patches, max_patches
        )
        resized = image_ops.resize(image, tile_height * rows, tile_width * columns, resample)
        pixels = image_ops.to_channels_first(resized)
        tiles = [
            pixels[
                :,
                row * tile_height : (row + 1) * tile_height,
                column * tile_width : (column + 1) * tile_width,
            ]
            for row in range(rows)
            for column in range(columns)
        ]
        if len(tiles) != 1:
            thumbnail = image_ops.resize(image, tile_height, tile_width, resample)
            tiles.append(image_ops.to_channels_first(thumbnail))
        return tiles

    def number_of_image_patches(self, height: int, width: int, **kwargs: Any) -> int:
        """How many tiles (with the thumbnail) an image of this size becomes, as transformers'
        ``get_number_of_image_patches`` (what vLLM counts the image's tokens from)."""
        o = self.options.merged(kwargs)
        if not (o["crop_to_patches"] and o["max_patches"] > 1):
            return 1
        size = image_ops.size_dict(o["size"])
        columns, rows = tile_grid(
            height, width, size["height"], size["width"], o["min_patches"], o["max_patches"]
        )
        return 1 + columns * rows if columns * rows > 1 else 1


def image_replacement(
    num_patches: int,
    image_seq_length: int = 256,
    start_token: str = "<img>",
    context_token: str = "<IMG_CONTEXT>",
    end_token: str = "</img>",
) -> str:
    """The prompt text vLLM puts in place of one image of ``num_patches`` tiles (its
    ``context_token`` positions are the embeddings), as vLLM's InternVL (HF format) replacement."""
    return start_token + context_token * (image_seq_length * num_patches) + end_token

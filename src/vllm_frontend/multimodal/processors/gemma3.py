"""Gemma 3: transformers' ``Gemma3ImageProcessor`` (PIL backend) in numpy and Pillow, with
pan-and-scan, and the prompt text vLLM puts in place of each image.

Each image is resized to ``size`` (896 x 896 for the released models, bilinear); with
pan-and-scan an image of a sufficiently extreme aspect ratio is also cut into 2..max crops along
its long side, each resized the same way and following the image (``num_crops`` counts them).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from PIL import Image

from vllm_frontend.multimodal.processors import image_ops
from vllm_frontend.multimodal.processors.options import Options

DEFAULTS: dict[str, Any] = {
    "do_convert_rgb": True,
    "do_resize": True,
    "size": {"height": 224, "width": 224},
    "resample": int(image_ops.BILINEAR),
    "do_rescale": True,
    "rescale_factor": 1 / 255,
    "do_normalize": True,
    "image_mean": image_ops.IMAGENET_STANDARD_MEAN,
    "image_std": image_ops.IMAGENET_STANDARD_STD,
    # transformers' Gemma3Processor defaults (the image processor's own are None): what vLLM uses.
    "do_pan_and_scan": False,
    "pan_and_scan_min_crop_size": 256,
    "pan_and_scan_max_num_crops": 4,
    "pan_and_scan_min_ratio_to_activate": 1.2,
}

BOI_TOKEN = "<start_of_image>"
EOI_TOKEN = "<end_of_image>"
IMAGE_TOKEN = "<image_soft_token>"


def pan_and_scan_grid(
    height: int, width: int, min_crop_size: int, max_num_crops: int, min_ratio_to_activate: float
) -> tuple[int, int, int, int]:
    """(rows, cols, crop height, crop width) of an image's pan-and-scan crops, (0, 0, 0, 0) when
    it gets none (its aspect ratio is too close to square or the crops would be too small)."""
    if width >= height:
        if width / height < min_ratio_to_activate:
            return 0, 0, 0, 0
        cols = math.floor(width / height + 0.5)
        cols = min(math.floor(width / min_crop_size), cols)
        cols = min(max_num_crops, max(2, cols))
        rows = 1
    else:
        if height / width < min_ratio_to_activate:
            return 0, 0, 0, 0
        rows = math.floor(height / width + 0.5)
        rows = min(math.floor(height / min_crop_size), rows)
        rows = min(max_num_crops, max(2, rows))
        cols = 1
    crop_width = math.ceil(width / cols)
    crop_height = math.ceil(height / rows)
    if min(crop_width, crop_height) < min_crop_size:
        return 0, 0, 0, 0
    return rows, cols, crop_height, crop_width


class Gemma3ImageProcessor:
    """transformers' ``Gemma3ImageProcessor`` (PIL backend) of one model's config."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.options = Options(DEFAULTS, config)

    def preprocess(self, images: list[Image.Image], **kwargs: Any) -> dict[str, np.ndarray]:
        """``pixel_values`` (images + crops, C, H, W) float32, each image followed by its crops,
        and ``num_crops`` (images,) int64."""
        o = self.options.merged(kwargs)
        resample = image_ops.resample_filter(o["resample"])
        size = image_ops.size_dict(o["size"])
        rescale = o["rescale_factor"] if o["do_rescale"] else None
        mean, std = (o["image_mean"], o["image_std"]) if o["do_normalize"] else (None, None)
        processed = []
        num_crops = []
        for image in images:
            image = image_ops.prepare(image, o["do_convert_rgb"])
            frames = [image]
            if o["do_pan_and_scan"]:
                crops = self._crops(image, o)
                frames.extend(crops)
                num_crops.append(len(crops))
            else:
                num_crops.append(0)
            for frame in frames:
                if o["do_resize"]:
                    height, width = image_ops.resize_output_size(frame.height, frame.width, size)
                    frame = image_ops.resize(frame, height, width, resample)
                pixels = image_ops.to_channels_first(frame)
                processed.append(image_ops.rescale_normalize(pixels, rescale, mean, std))
        if len({p.shape for p in processed}) > 1:
            raise ValueError("images of different sizes cannot form one batch")
        return {
            "pixel_values": np.stack(processed),
            "num_crops": np.asarray(num_crops, dtype=np.int64),
        }

    @staticmethod
    def _crops(image: Image.Image, o: Mapping[str, Any]) -> list[Image.Image]:
        """The image's pan-and-scan crops, row by row (the last ones cut at the image's edge)."""
        rows, cols, crop_height, crop_width = pan_and_scan_grid(
            image.height,
            image.width,
            o["pan_and_scan_min_crop_size"],
            o["pan_and_scan_max_num_crops"],
            o["pan_and_scan_min_ratio_to_activate"],
        )
        crops = []
        for row in range(rows):
            for col in range(cols):
                top, left = row * crop_height, col * crop_width
                bottom = min(top + crop_height, image.height)
                right = min(left + crop_width, image.width)
                crops.append(image.crop((left, top, right, bottom)))
        return crops

    def number_of_crops(self, height: int, width: int, **kwargs: Any) -> int:
        """How many pan-and-scan crops an image of this size gets (0 without pan-and-scan)."""
        o = self.options.merged(kwargs)
        if not o["do_pan_and_scan"]:
            return 0
        rows, cols, _, _ = pan_and_scan_grid(
            height,
            width,
            o["pan_and_scan_min_crop_size"],
            o["pan_and_scan_max_num_crops"],
            o["pan_and_scan_min_ratio_to_activate"],
        )
        return rows * cols


def image_replacement(num_crops: int, image_seq_length: int = 256) -> str:
    """The prompt text vLLM puts in place of one image with ``num_crops`` pan-and-scan crops (its
    ``<image_soft_token>`` positions are the embeddings), as vLLM's ``get_image_repl``."""
    full_image = f"\n\n{BOI_TOKEN}{IMAGE_TOKEN * image_seq_length}{EOI_TOKEN}\n\n"
    if num_crops == 0:
        return full_image
    crops = " ".join(full_image for _ in range(num_crops))
    return (
        f"Here is the original image {full_image} and here are some crops to help you see better "
        + crops
    )

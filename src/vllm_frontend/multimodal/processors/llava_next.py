"""LLaVA-NeXT: transformers' ``LlavaNextImageProcessor`` (PIL backend, "anyres") in numpy and
Pillow, and the number of image tokens vLLM gives an image.

Each image becomes the whole image resized to one patch followed by the patches of the image
resized (aspect kept) into the grid resolution that best fits it, centred on a zero canvas; each
patch is resized, center-cropped, rescaled and normalised like a CLIP image. Images with fewer
patches than the batch's most are padded with all-zero patches; ``image_sizes`` keeps each
image's original (height, width).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
from PIL import Image

from vllm_frontend.multimodal.processors import image_ops
from vllm_frontend.multimodal.processors.options import Options

DEFAULTS: dict[str, Any] = {
    "do_convert_rgb": True,
    "do_resize": True,
    "size": {"shortest_edge": 224},
    "default_to_square": False,
    "resample": int(image_ops.BICUBIC),
    "do_center_crop": True,
    "crop_size": {"height": 224, "width": 224},
    "do_rescale": True,
    "rescale_factor": 1 / 255,
    "do_normalize": True,
    "image_mean": image_ops.OPENAI_CLIP_MEAN,
    "image_std": image_ops.OPENAI_CLIP_STD,
    "do_pad": True,
    "image_grid_pinpoints": [[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]],
}


def select_best_resolution(
    height: int, width: int, resolutions: Sequence[Sequence[int]]
) -> tuple[int, int]:
    """The (height, width) of ``resolutions`` that keeps most of the image's pixels when it is
    scaled to fit, the least wasted area breaking ties (as transformers' select_best_resolution)."""
    best = (0, 0)
    max_effective = 0
    min_wasted = float("inf")
    for res_height, res_width in resolutions:
        scale = min(res_width / width, res_height / height)
        effective = min(int(width * scale) * int(height * scale), width * height)
        wasted = res_width * res_height - effective
        if effective > max_effective or (effective == max_effective and wasted < min_wasted):
            max_effective, min_wasted = effective, wasted
            best = (int(res_height), int(res_width))
    return best


def fitted_size(height: int, width: int, target_height: int, target_width: int) -> tuple[int, int]:
    """The size the image is resized to inside a target resolution (transformers'
    ``get_patch_output_size``): the tighter side fills it, the other rounds up."""
    scale_w = target_width / width
    scale_h = target_height / height
    if scale_w < scale_h:
        return min(math.ceil(height * scale_w), target_height), target_width
    return target_height, min(math.ceil(width * scale_h), target_width)


class LlavaNextImageProcessor:
    """transformers' ``LlavaNextImageProcessor`` (PIL backend) of one model's config."""

    DEFAULTS: ClassVar[dict[str, Any]] = DEFAULTS

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.options = Options(self.DEFAULTS, config)

    def preprocess(self, images: list[Image.Image], **kwargs: Any) -> dict[str, np.ndarray]:
        """``pixel_values`` (images, patches, C, H, W) float32 and ``image_sizes`` (images, 2)
        int64."""
        o = self.options.merged(kwargs)
        resample = image_ops.resample_filter(o["resample"])
        size = image_ops.size_dict(o["size"], o["default_to_square"])
        crop = image_ops.size_dict(o["crop_size"]) if o["crop_size"] else {}
        if size.get("height") and size.get("width"):
            base = (size["height"], size["width"])
        else:
            base = (size["shortest_edge"], size["shortest_edge"])
        patch = crop.get("height") or size.get("height") or size["shortest_edge"]
        rescale = o["rescale_factor"] if o["do_rescale"] else None
        mean, std = (o["image_mean"], o["image_std"]) if o["do_normalize"] else (None, None)
        tables: dict[int, np.ndarray] = {}
        per_image = []
        sizes = []
        for image in images:
            image = image_ops.prepare(image, o["do_convert_rgb"])
            sizes.append((image.height, image.width))
            processed = []
            for frame in self._patches(image, o["image_grid_pinpoints"], base, patch, resample):
                if o["do_resize"]:
                    height, width = image_ops.resize_output_size(
                        frame.shape[1], frame.shape[2], size
                    )
                    if (height, width) != frame.shape[1:]:
                        resized = image_ops.resize(
                            image_ops.from_channels_first(frame), height, width, resample
                        )
                        frame = image_ops.to_channels_first(resized)
                if o["do_center_crop"]:
                    frame = image_ops.center_crop(frame, crop["height"], crop["width"])
                if rescale is None and (mean is None or std is None):
                    processed.append(frame)
                    continue
                channels = frame.shape[0]
                if channels not in tables:
                    tables[channels] = image_ops.value_table(channels, rescale, mean, std)
                processed.append(image_ops.apply_table(frame, tables[channels]))
            per_image.append(np.stack(processed))
        if o["do_pad"]:
            most = max(len(patches) for patches in per_image)
            batch = np.zeros((len(per_image), most, *per_image[0].shape[1:]), per_image[0].dtype)
            for index, patches in enumerate(per_image):
                batch[index, : len(patches)] = patches
        elif len({p.shape for p in per_image}) > 1:
            raise ValueError("images with different patch counts cannot form one batch")
        else:
            batch = np.stack(per_image)
        return {"pixel_values": batch, "image_sizes": np.asarray(sizes, dtype=np.int64)}

    @staticmethod
    def _patches(
        image: Image.Image,
        pinpoints: Sequence[Sequence[int]],
        base: tuple[int, int],
        patch: int,
        resample: Image.Resampling,
    ) -> list[np.ndarray]:
        """The whole image resized to ``base``, then the patches of its best-fit resolution."""
        target_height, target_width = select_best_resolution(image.height, image.width, pinpoints)
        height, width = fitted_size(image.height, image.width, target_height, target_width)
        resized = image_ops.to_channels_first(image_ops.resize(image, height, width, resample))
        top = (target_height - height) // 2
        left = (target_width - width) // 2
        canvas = np.zeros((resized.shape[0], target_height, target_width), dtype=np.uint8)
        canvas[:, top : top + height, left : left + width] = resized
        patches = [
            canvas[:, y : y + patch, x : x + patch]
            for y in range(0, target_height, patch)
            for x in range(0, target_width, patch)
        ]
        whole = image_ops.to_channels_first(image_ops.resize(image, base[0], base[1], resample))
        return [whole, *patches]


class LlavaOnevisionImageProcessor(LlavaNextImageProcessor):
    """transformers' ``LlavaOnevisionImageProcessor`` (PIL backend) for the images of one prompt
    given as a flat list (each image its own sample, so each is cut into patches, as LLaVA-NeXT's):
    384 x 384 patches, no center crop, the 6 x 6 grid of resolutions, and ``batch_num_images``."""

    DEFAULTS: ClassVar[dict[str, Any]] = {
        **DEFAULTS,
        "size": {"height": 384, "width": 384},
        "crop_size": None,
        "do_center_crop": None,
        "image_grid_pinpoints": [
            [height * 384, width * 384] for height in range(1, 7) for width in range(1, 7)
        ],
    }

    def preprocess(self, images: list[Image.Image], **kwargs: Any) -> dict[str, np.ndarray]:
        """LLaVA-NeXT's outputs and ``batch_num_images`` (images,) int64, all ones."""
        out = super().preprocess(images, **kwargs)
        out["batch_num_images"] = np.ones(len(images), dtype=np.int64)
        return out


def num_image_tokens(
    height: int,
    width: int,
    grid_pinpoints: Sequence[Sequence[int]],
    vision_image_size: int,
    vision_patch_size: int,
    select_strategy: str = "default",
    class_token: bool = True,
    onevision: bool = False,
) -> int:
    """How many image tokens vLLM gives a ``height`` x ``width`` image on a LLaVA-NeXT model: the
    base image's features (one fewer with the "default" strategy: a CLIP-style tower's CLS token,
    and, as vLLM counts, one patch of a tower without one, ``class_token`` False, as SigLIP),
    then the best-fit grid's features with the padding cut off, one newline per row.
    ``onevision``: LLaVA-OneVision's count ("anyres_max_9": a grid of more than 1.1 x 9 patches'
    features is scaled down to about 9 patches', rows and columns divided by the same ratio)."""
    grid = vision_image_size // vision_patch_size
    base = grid * grid + (1 if class_token else 0)
    if select_strategy == "default":
        base -= 1
    elif select_strategy == "class":
        base = 1
    elif select_strategy != "full":
        raise ValueError(f"Unexpected feature select strategy: {select_strategy!r}")
    best_height, best_width = select_best_resolution(height, width, grid_pinpoints)
    current_height = grid * (best_height // vision_image_size)
    current_width = grid * (best_width // vision_image_size)
    if width / height > current_width / current_height:
        new_height = int(round(height * (current_width / width), 7))
        current_height -= 2 * ((current_height - new_height) // 2)
    else:
        new_width = int(round(width * (current_height / height), 7))
        current_width -= 2 * ((current_width - new_width) // 2)
    unpadded, newlines = current_height * current_width, current_height
    if onevision:
        ratio = math.sqrt(current_height * current_width / (9 * grid**2))
        if ratio > 1.1:
            newlines = int(current_height // ratio)
            unpadded = newlines * int(current_width // ratio)
    return unpadded + newlines + base

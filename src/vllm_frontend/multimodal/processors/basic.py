"""The plain image processor transformers' ``PilBackend`` is (resize, center crop, rescale,
normalise, pad), and the families that are that processor with their own defaults: CLIP (LLaVA
1.5 and other CLIP-tower models) and SigLIP. The model, not the processor, decides their number of
image tokens."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
from PIL import Image

from vllm_frontend.multimodal.processors import image_ops
from vllm_frontend.multimodal.processors.options import Options

BASE_DEFAULTS: dict[str, Any] = {
    "do_convert_rgb": None,
    "do_resize": None,
    "size": None,
    "default_to_square": True,
    "resample": None,
    "do_center_crop": None,
    "crop_size": None,
    "do_rescale": None,
    "rescale_factor": 1 / 255,
    "do_normalize": None,
    "image_mean": None,
    "image_std": None,
    "do_pad": None,
    "pad_size": None,
}


class BasicImageProcessor:
    """transformers' ``PilBackend`` preprocessing with a family's class defaults."""

    DEFAULTS: ClassVar[dict[str, Any]] = BASE_DEFAULTS

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.options = Options(self.DEFAULTS, config)

    def preprocess(self, images: list[Image.Image], **kwargs: Any) -> dict[str, np.ndarray]:
        """``pixel_values`` (images, C, H, W) float32 for the images of one prompt."""
        o = self.options.merged(kwargs)
        resample = image_ops.resample_filter(
            o["resample"] if o["resample"] is not None else image_ops.BILINEAR
        )
        size = image_ops.size_dict(o["size"], o["default_to_square"]) if o["size"] else None
        crop = image_ops.size_dict(o["crop_size"]) if o["crop_size"] else None
        rescale = o["rescale_factor"] if o["do_rescale"] else None
        mean, std = (o["image_mean"], o["image_std"]) if o["do_normalize"] else (None, None)
        tables: dict[int, np.ndarray] = {}
        processed = []
        for image in images:
            image = image_ops.prepare(image, bool(o["do_convert_rgb"]))
            if o["do_resize"]:
                if size is None:
                    raise ValueError("do_resize requires size")
                height, width = image_ops.resize_output_size(image.height, image.width, size)
                image = image_ops.resize(image, height, width, resample)
            pixels = image_ops.to_channels_first(image)
            if o["do_center_crop"]:
                if crop is None or not (crop.get("height") and crop.get("width")):
                    raise ValueError("The size dictionary must have keys 'height' and 'width'.")
                pixels = image_ops.center_crop(pixels, crop["height"], crop["width"])
            if rescale is None and (mean is None or std is None):
                processed.append(pixels)
                continue
            channels = pixels.shape[0]
            if channels not in tables:
                tables[channels] = image_ops.value_table(channels, rescale, mean, std)
            processed.append(image_ops.apply_table(pixels, tables[channels]))
        if o["do_pad"]:
            if o["pad_size"]:
                pad = image_ops.size_dict(o["pad_size"])
                target = pad["height"], pad["width"]
            else:
                target = max(p.shape[1] for p in processed), max(p.shape[2] for p in processed)
            processed = [image_ops.pad_bottom_right(p, *target) for p in processed]
        if len({p.shape for p in processed}) > 1:
            raise ValueError("images of different sizes cannot form one batch without padding")
        return {"pixel_values": np.stack(processed)}


class CLIPImageProcessor(BasicImageProcessor):
    """transformers' ``CLIPImageProcessor`` (PIL backend): shortest edge to 224 (bicubic), center
    crop 224 x 224, OpenAI CLIP mean and std."""

    DEFAULTS: ClassVar[dict[str, Any]] = {
        **BASE_DEFAULTS,
        "resample": int(image_ops.BICUBIC),
        "image_mean": image_ops.OPENAI_CLIP_MEAN,
        "image_std": image_ops.OPENAI_CLIP_STD,
        "size": {"shortest_edge": 224},
        "default_to_square": False,
        "crop_size": {"height": 224, "width": 224},
        "do_resize": True,
        "do_center_crop": True,
        "do_rescale": True,
        "do_normalize": True,
        "do_convert_rgb": True,
    }

    def __init__(self, config: Mapping[str, Any]) -> None:
        if config.get("use_square_size"):
            # Kosmos-2's configs: transformers squares its class default, whatever ``size`` says.
            config = {**config, "size": {"height": 224, "width": 224}}
        super().__init__(config)


class SiglipImageProcessor(BasicImageProcessor):
    """transformers' ``SiglipImageProcessor`` (PIL backend): resized to 224 x 224 (bicubic), mean
    and std 0.5."""

    DEFAULTS: ClassVar[dict[str, Any]] = {
        **BASE_DEFAULTS,
        "resample": int(image_ops.BICUBIC),
        "image_mean": image_ops.IMAGENET_STANDARD_MEAN,
        "image_std": image_ops.IMAGENET_STANDARD_STD,
        "size": {"height": 224, "width": 224},
        "default_to_square": False,
        "do_resize": True,
        "do_rescale": True,
        "do_normalize": True,
        "do_convert_rgb": True,
    }

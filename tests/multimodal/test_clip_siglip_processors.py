"""Our CLIP and SigLIP image processors (transformers' plain ``PilBackend`` preprocessing) equal
transformers' ``CLIPImageProcessorPil`` and ``SiglipImageProcessorPil`` bit for bit."""

from __future__ import annotations

from typing import Any

import pytest
from transformers import CLIPImageProcessorPil, SiglipImageProcessorPil

from tests.multimodal.processor_oracle import assert_same_or_both_fail, assert_same_outputs
from tests.multimodal.random_images import image_cases
from vllm_frontend.multimodal.processors.basic import CLIPImageProcessor, SiglipImageProcessor

pytestmark = pytest.mark.oracle

CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]

CASES: dict[str, tuple[Any, Any, dict[str, Any]]] = {
    # transformers' class defaults (openai/clip-vit-base-patch32's values).
    "clip-defaults": (CLIPImageProcessorPil, CLIPImageProcessor, {}),
    # llava-hf/llava-1.5-7b-hf's preprocessor_config.json values.
    "llava-1.5": (
        CLIPImageProcessorPil,
        CLIPImageProcessor,
        {
            "crop_size": {"height": 336, "width": 336},
            "do_center_crop": True,
            "do_convert_rgb": True,
            "do_normalize": True,
            "do_rescale": True,
            "do_resize": True,
            "image_mean": CLIP_MEAN,
            "image_std": CLIP_STD,
            "resample": 3,
            "rescale_factor": 0.00392156862745098,
            "size": {"shortest_edge": 336},
        },
    ),
    # openai/clip-vit-large-patch14-336's old-style ints (size: shortest edge, crop: square).
    "clip-int-sizes": (
        CLIPImageProcessorPil,
        CLIPImageProcessor,
        {"crop_size": 336, "size": 336, "resample": 3},
    ),
    # a crop larger than the resized image (zero padding) and a longest-edge bound.
    "clip-pad-crop": (
        CLIPImageProcessorPil,
        CLIPImageProcessor,
        {
            "size": {"shortest_edge": 64, "longest_edge": 96},
            "crop_size": {"height": 80, "width": 90},
        },
    ),
    "kosmos-2": (CLIPImageProcessorPil, CLIPImageProcessor, {"use_square_size": True, "size": 64}),
    # google/siglip-so400m-patch14-384's values.
    "siglip-so400m-384": (
        SiglipImageProcessorPil,
        SiglipImageProcessor,
        {
            "do_normalize": True,
            "do_rescale": True,
            "do_resize": True,
            "image_mean": [0.5, 0.5, 0.5],
            "image_std": [0.5, 0.5, 0.5],
            "resample": 3,
            "rescale_factor": 0.00392156862745098,
            "size": {"height": 384, "width": 384},
        },
    ),
    "siglip-defaults": (SiglipImageProcessorPil, SiglipImageProcessor, {}),
    # padding to the batch's largest image, as the plain backend does with do_pad.
    "siglip-max-size-pad": (
        SiglipImageProcessorPil,
        SiglipImageProcessor,
        {"size": {"max_height": 120, "max_width": 100}, "do_pad": True, "resample": 2},
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_pixel_values_equal_transformers(name: str) -> None:
    reference_class, our_class, config = CASES[name]
    reference = reference_class(**config)
    ours = our_class(config)
    images = image_cases(seed=len(name), count=22)
    batches = [[image] for image in images] + [images[i : i + 4] for i in range(0, 16, 4)]
    answered = 0
    for batch in batches:
        what = f"{name} {[(im.width, im.height, im.mode) for im in batch]}"
        answered += assert_same_or_both_fail(reference, ours.preprocess, batch, what)
    assert answered >= len(batches) - 8  # a few sizes round to 0 pixels: both refuse them


def test_per_call_arguments_override_the_config() -> None:
    images = image_cases(seed=5, count=3)
    kwargs = {"size": {"shortest_edge": 100}, "crop_size": {"height": 50, "width": 70}}
    expected = CLIPImageProcessorPil()(images, return_tensors="np", **kwargs)
    assert_same_outputs(dict(expected), CLIPImageProcessor({}).preprocess(images, **kwargs), "kw")

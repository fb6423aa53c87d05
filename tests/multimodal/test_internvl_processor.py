"""Our InternVL / GOT-OCR 2 image processor equals transformers' ``GotOcr2ImageProcessorPil`` bit
for bit, with and without tiling, and its tile counts and prompt text equal transformers' (the image
processor's ``get_number_of_image_patches`` and ``InternVLProcessor.replace_image_token``, which
vLLM's InternVL (HF format) module uses and spells the same way)."""

from __future__ import annotations

import types
from typing import Any

import pytest
from transformers import GotOcr2ImageProcessorPil, InternVLProcessor

from tests.multimodal.processor_oracle import assert_same_or_both_fail
from tests.multimodal.random_images import image_cases
from vllm_frontend.multimodal.processors.internvl import (
    INTERNVL_DEFAULTS,
    GotOcr2ImageProcessor,
    image_replacement,
)

pytestmark = pytest.mark.oracle

# OpenGVLab/InternVL3-1B-hf's preprocessor_config.json values (InternVLProcessor adds
# crop_to_patches=True).
INTERNVL3_1B: dict[str, Any] = {
    "crop_to_patches": False,
    "do_convert_rgb": True,
    "do_normalize": True,
    "do_rescale": True,
    "do_resize": True,
    "image_mean": [0.485, 0.456, 0.406],
    "image_std": [0.229, 0.224, 0.225],
    "max_patches": 12,
    "min_patches": 1,
    "resample": 3,
    "rescale_factor": 0.00392156862745098,
    "size": {"height": 448, "width": 448},
}
SMALL = {**INTERNVL3_1B, "size": {"height": 28, "width": 28}, "max_patches": 6}


@pytest.mark.parametrize(
    ("name", "config", "kwargs"),
    [
        ("internvl3-1b tiled", INTERNVL3_1B, INTERNVL_DEFAULTS),
        ("internvl3-1b untiled", INTERNVL3_1B, {}),
        ("got-ocr2 defaults tiled", {}, {"crop_to_patches": True}),
        ("small tiled", SMALL, {"crop_to_patches": True, "min_patches": 2}),
    ],
)
def test_pixel_values_and_num_patches_equal_transformers(
    name: str, config: dict[str, Any], kwargs: dict[str, Any]
) -> None:
    reference = GotOcr2ImageProcessorPil(**config)
    ours = GotOcr2ImageProcessor(config)
    images = image_cases(seed=len(name), count=24 if "small" in name else 16)
    batches = [[image] for image in images] + [images[i : i + 3] for i in range(0, 9, 3)]
    answered = sum(
        assert_same_or_both_fail(reference, ours.preprocess, batch, f"{name} {batch}", **kwargs)
        for batch in batches
    )
    assert answered == len(batches)


def test_tile_counts_and_prompt_text_equal_transformers() -> None:
    reference = GotOcr2ImageProcessorPil(**INTERNVL3_1B)
    ours = GotOcr2ImageProcessor(INTERNVL3_1B, INTERNVL_DEFAULTS)
    processor = types.SimpleNamespace(
        start_image_token="<img>",
        end_image_token="</img>",
        image_token="<IMG_CONTEXT>",
        image_seq_length=7,
    )
    for width in (1, 2, 100, 447, 448, 449, 896, 1000, 1344, 3000, 8000):
        for height in (1, 3, 100, 448, 700, 896, 2000, 5000):
            for options in (
                {"crop_to_patches": True},
                {"crop_to_patches": False},
                {"max_patches": 4},
            ):
                kwargs = {**INTERNVL_DEFAULTS, **options}
                want = reference.get_number_of_image_patches(height, width, kwargs)
                got = ours.number_of_image_patches(height, width, **options)
                assert got == want, (width, height, options)
                text = InternVLProcessor.replace_image_token(processor, {"num_patches": [want]}, 0)
                assert image_replacement(got, 7) == text

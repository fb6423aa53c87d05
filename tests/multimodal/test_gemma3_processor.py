"""Our Gemma 3 image processor equals transformers' ``Gemma3ImageProcessorPil`` bit for bit, with
and without pan-and-scan, and its crop counts and prompt text equal vLLM 0.32's."""

from __future__ import annotations

import types
from typing import Any

import numpy as np
import pytest
from transformers import Gemma3ImageProcessorPil, Gemma3Processor

from tests.multimodal.processor_oracle import assert_same_or_both_fail
from tests.multimodal.random_images import image_cases
from vllm_frontend.multimodal.processors.gemma3 import (
    BOI_TOKEN,
    EOI_TOKEN,
    IMAGE_TOKEN,
    Gemma3ImageProcessor,
    image_replacement,
)

pytestmark = pytest.mark.oracle

# google/gemma-3-4b-it's preprocessor_config.json values.
GEMMA3_4B: dict[str, Any] = {
    "do_convert_rgb": None,
    "do_normalize": True,
    "do_pan_and_scan": None,
    "do_rescale": True,
    "do_resize": True,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "pan_and_scan_max_num_crops": None,
    "pan_and_scan_min_crop_size": None,
    "pan_and_scan_min_ratio_to_activate": None,
    "resample": 2,
    "rescale_factor": 0.00392156862745098,
    "size": {"height": 896, "width": 896},
}
# Gemma3Processor's defaults for the pan-and-scan parameters (the image processor's are None).
PAN_AND_SCAN = {
    "do_pan_and_scan": True,
    "pan_and_scan_min_crop_size": 256,
    "pan_and_scan_max_num_crops": 4,
    "pan_and_scan_min_ratio_to_activate": 1.2,
}
SMALL = {**GEMMA3_4B, "size": {"height": 112, "width": 112}}


def _reference(config: dict[str, Any]) -> Gemma3ImageProcessorPil:
    return Gemma3ImageProcessorPil(**{k: v for k, v in config.items() if v is not None})


@pytest.mark.parametrize(
    ("name", "config", "kwargs"),
    [
        ("gemma-3-4b", GEMMA3_4B, {}),
        ("gemma-3-4b pan-and-scan", GEMMA3_4B, PAN_AND_SCAN),
        ("small pan-and-scan", SMALL, {**PAN_AND_SCAN, "pan_and_scan_min_crop_size": 8}),
        ("small bicubic", {**SMALL, "resample": 3}, {"pan_and_scan_max_num_crops": 7}),
    ],
)
def test_pixel_values_and_num_crops_equal_transformers(
    name: str, config: dict[str, Any], kwargs: dict[str, Any]
) -> None:
    reference = _reference(config)
    ours = Gemma3ImageProcessor(config)
    images = image_cases(seed=len(name), count=24 if "small" in name else 14)
    batches = [[image] for image in images] + [images[i : i + 3] for i in range(0, 9, 3)]
    answered = sum(
        assert_same_or_both_fail(reference, ours.preprocess, batch, f"{name} {batch}", **kwargs)
        for batch in batches
    )
    assert answered == len(batches)


def test_crop_counts_and_prompt_text_equal_transformers() -> None:
    """The crop count from the size alone (vLLM's ``get_num_crops`` repeats the image processor's
    arithmetic; vLLM's gemma3_mm module needs torchvision, so transformers' is the reference) and
    the text of ``Gemma3Processor.replace_image_token`` (which vLLM's ``get_image_repl`` spells
    the same way)."""
    reference = _reference(GEMMA3_4B)
    ours = Gemma3ImageProcessor(GEMMA3_4B)
    seq_len = 5
    processor = types.SimpleNamespace(
        full_image_sequence=f"\n\n{BOI_TOKEN}{IMAGE_TOKEN * seq_len}{EOI_TOKEN}\n\n"
    )
    for options in ({}, PAN_AND_SCAN, {**PAN_AND_SCAN, "pan_and_scan_min_crop_size": 50}):
        for width in (1, 50, 255, 256, 300, 511, 512, 900, 1500, 4000):
            for height in (1, 50, 256, 300, 512, 1024, 3000):
                want = 0
                if options:
                    blank = np.zeros((3, height, width), dtype=np.uint8)
                    want = len(
                        reference.pan_and_scan(
                            blank,
                            options["pan_and_scan_min_crop_size"],
                            options["pan_and_scan_max_num_crops"],
                            options["pan_and_scan_min_ratio_to_activate"],
                        )
                    )
                got = ours.number_of_crops(height, width, **options)
                assert got == want, (options, width, height)
                text = Gemma3Processor.replace_image_token(processor, {"num_crops": [want]}, 0)
                assert image_replacement(got, seq_len) == text

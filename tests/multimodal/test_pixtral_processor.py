"""Our Pixtral / Mistral 3 image processor equals transformers' ``PixtralImageProcessorPil`` bit for
bit, and its token layout per image equals ``PixtralProcessor``'s (which vLLM's ``mistral3`` module
builds the same way; vLLM's pixtral module needs torchvision, so transformers is the reference)."""

from __future__ import annotations

import math
import pathlib
import types
from typing import Any

import pytest
import transformers
import vllm
from transformers import PixtralImageProcessorPil

from tests.multimodal.processor_oracle import assert_same_or_both_fail, source_function
from tests.multimodal.random_images import image_cases
from vllm_frontend.multimodal.processors.pixtral import PixtralImageProcessor, image_tokens

pytestmark = pytest.mark.oracle

CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
# mistral-community/pixtral-12b's preprocessor_config.json values (PixtralProcessor: patch 16,
# spatial merge 1).
PIXTRAL_12B: dict[str, Any] = {
    "do_convert_rgb": True,
    "do_normalize": True,
    "do_rescale": True,
    "do_resize": True,
    "image_mean": CLIP_MEAN,
    "image_std": CLIP_STD,
    "patch_size": {"height": 16, "width": 16},
    "resample": 3,
    "rescale_factor": 0.00392156862745098,
    "size": {"longest_edge": 1024},
}
# mistralai/Mistral-Small-3.1-24B-Instruct-2503's (patch 14, spatial merge 2, longest edge 1540).
MISTRAL_SMALL_31 = {**PIXTRAL_12B, "patch_size": {"height": 14, "width": 14}}
MISTRAL_SMALL_31["size"] = {"longest_edge": 1540}


@pytest.mark.parametrize(
    ("name", "config", "kwargs"),
    [
        ("pixtral-12b", PIXTRAL_12B, {}),
        # what PixtralProcessor passes for Mistral 3: patch_size x spatial_merge_size.
        ("mistral-small-3.1", MISTRAL_SMALL_31, {"patch_size": 28}),
        ("small", {**PIXTRAL_12B, "size": {"longest_edge": 100}}, {"patch_size": 14}),
        ("unpadded", {**PIXTRAL_12B, "size": {"height": 64, "width": 32}}, {"do_pad": False}),
    ],
)
def test_pixel_values_and_image_sizes_equal_transformers(
    name: str, config: dict[str, Any], kwargs: dict[str, Any]
) -> None:
    reference = PixtralImageProcessorPil(**config)
    ours = PixtralImageProcessor(config)
    images = image_cases(seed=len(name), count=24)
    batches = [[image] for image in images]
    if kwargs.get("do_pad", True):
        batches += [images[i : i + 4] for i in range(0, 16, 4)]
    answered = sum(
        assert_same_or_both_fail(reference, ours.preprocess, batch, f"{name} {batch}", **kwargs)
        for batch in batches
    )
    # a thin image's short side rounds to 0 pixels under a small bound: both refuse it.
    assert answered >= len(batches) - (0 if name.startswith(("pixtral", "mistral")) else 8)


# transformers' PixtralProcessor and vLLM's pixtral module import torchvision: their functions
# are compiled from their source.
_TRANSFORMERS = pathlib.Path(transformers.__file__).parent
_VLLM = pathlib.Path(vllm.__file__).parent
replace_image_token = source_function(
    str(_TRANSFORMERS / "models/pixtral/processing_pixtral.py"),
    "PixtralProcessor.replace_image_token",
    {},
)
get_patch_grid_size = source_function(
    str(_VLLM / "model_executor/models/mistral3.py"),
    "Mistral3HFEncoderInfo.get_patch_grid_size",
    {"math": math, "Mistral3Config": types.SimpleNamespace},
)


@pytest.mark.parametrize(
    ("config", "patch", "merge"), [(PIXTRAL_12B, 16, 1), (MISTRAL_SMALL_31, 14, 2)]
)
def test_token_layout_equals_pixtral_processors_and_vllms_grid(
    config: dict[str, Any], patch: int, merge: int
) -> None:
    reference = PixtralImageProcessorPil(**config)
    ours = PixtralImageProcessor(config)
    processor = types.SimpleNamespace(
        patch_size=patch,
        spatial_merge_size=merge,
        image_token="[IMG]",
        image_break_token="[IMG_BREAK]",
        image_end_token="[IMG_END]",
    )
    encoder_info = types.SimpleNamespace(
        get_image_size=lambda: config["size"]["longest_edge"],
        hf_config=types.SimpleNamespace(spatial_merge_size=merge),
        vision_config=types.SimpleNamespace(patch_size=patch),
    )
    for image in image_cases(seed=7, count=30):
        # the image sizes PixtralProcessor's own call of the image processor gives.
        sizes = reference([image], return_tensors="np", patch_size=patch * merge)["image_sizes"]
        want = replace_image_token(processor, {"image_sizes": sizes}, 0)
        rows, cols = ours.patch_grid(image.height, image.width, patch * merge)
        assert (cols, rows) == get_patch_grid_size(
            encoder_info, image_width=image.width, image_height=image.height
        )
        got = image_tokens(rows, cols, "[IMG]", "[IMG_BREAK]", "[IMG_END]")
        assert "".join(got) == want, (image.size, rows, cols)

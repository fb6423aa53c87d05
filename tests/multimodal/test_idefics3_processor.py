"""Our Idefics3 image processor equals transformers' ``Idefics3ImageProcessorPil`` bit for bit,
and its patch grid and prompt text equal what vLLM 0.32 builds the prompt from."""

from __future__ import annotations

import types

import pytest
from transformers import Idefics3ImageProcessorPil, SmolVLMImageProcessorPil
from vllm.model_executor.models.idefics3 import Idefics3ProcessingInfo

from tests.multimodal.processor_oracle import assert_same_outputs
from tests.multimodal.random_images import image_cases
from vllm_frontend.multimodal.processors.idefics3 import Idefics3ImageProcessor, image_replacement

pytestmark = pytest.mark.oracle

CONFIGS = {
    # transformers' class defaults, which are HuggingFaceM4/Idefics3-8B-Llama3's
    # preprocessor_config.json values (longest edge 4 x 364, 364-pixel tiles, LANCZOS, mean 0.5).
    "idefics3-8b": {},
    # the tiny test model's (56-pixel tiles), as its builder writes them.
    "tiny": {
        "max_image_size": {"longest_edge": 56},
        "size": {"longest_edge": 112},
        "resample": 1,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "rescale_factor": 1 / 255,
    },
    # no splitting, another filter and CLIP's mean/std: every branch of the processor.
    "unsplit-bicubic": {
        "do_image_splitting": False,
        "resample": 3,
        "image_mean": [0.48145466, 0.4578275, 0.40821073],
        "image_std": [0.26862954, 0.26130258, 0.27577711],
    },
    "no-resize": {"do_resize": False, "max_image_size": {"longest_edge": 128}, "resample": 2},
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_pixel_values_masks_rows_and_cols_equal_transformers(name: str) -> None:
    config = CONFIGS[name]
    reference = Idefics3ImageProcessorPil(**config)
    ours = Idefics3ImageProcessor(config)
    images = image_cases(seed=16 + len(name), count=26)
    # one image per call, then prompts of several images of different sizes (a batch pads).
    batches = [[image] for image in images] + [images[i : i + 3] for i in range(0, 12, 3)]
    for batch in batches:
        what = f"{name} {[(im.width, im.height, im.mode) for im in batch]}"
        expected = reference(batch, return_tensors="np", return_row_col_info=True)
        got = ours.preprocess(batch, return_row_col_info=True)
        assert_same_outputs(dict(expected), got, what)


def test_per_call_arguments_override_the_config() -> None:
    reference = Idefics3ImageProcessorPil()
    ours = Idefics3ImageProcessor({})
    images = image_cases(seed=3, count=4)
    kwargs = {"do_image_splitting": False, "max_image_size": {"longest_edge": 98}}
    expected = reference(images, return_tensors="np", **kwargs)
    assert_same_outputs(dict(expected), ours.preprocess(images, **kwargs), "overrides")
    with pytest.raises(ValueError):
        ours.preprocess(images, not_an_option=1)


@pytest.mark.parametrize("name", ["idefics3-8b", "tiny"])
def test_prompt_text_per_image_equals_vllms(name: str) -> None:
    config = CONFIGS[name]
    reference = Idefics3ImageProcessorPil(**config)
    ours = Idefics3ImageProcessor(config)
    seq_len = 13
    info = types.SimpleNamespace(
        _get_image_token=lambda processor: ("<image>", "<fake_token_around_image>", "<global-img>"),
        _get_image_feature_grid_size=lambda image_width, image_height, processor, mm_kwargs: (
            reference.get_number_of_image_patches(image_height, image_width, {})
        ),
    )
    processor = types.SimpleNamespace(image_seq_len=seq_len)
    widths = (1, 2, 55, 56, 57, 111, 112, 364, 365, 800, 1456, 5000)
    sizes = [(w, h) for w in widths for h in (1, 3, 56, 57, 364, 729, 4097)]
    for width, height in sizes:
        patches = ours.number_of_image_patches(height, width)
        assert patches == reference.get_number_of_image_patches(height, width, {}), (width, height)
        want = Idefics3ProcessingInfo.get_image_repl(
            info, image_width=width, image_height=height, processor=processor, mm_kwargs={}
        )
        assert image_replacement(patches[1], patches[2], seq_len) == want, (width, height)


def test_smolvlm_pixel_values_equal_transformers() -> None:
    """SmolVLM's image processor (generated from Idefics3's) with SmolVLM's tile size."""
    config = {"max_image_size": {"longest_edge": 512}, "size": {"longest_edge": 2048}}
    reference = SmolVLMImageProcessorPil(**config)
    ours = Idefics3ImageProcessor(config)
    for image in image_cases(seed=99, count=8):
        expected = reference([image], return_tensors="np", return_row_col_info=True)
        got = ours.preprocess([image], return_row_col_info=True)
        assert_same_outputs(dict(expected), got, f"smolvlm {image}")

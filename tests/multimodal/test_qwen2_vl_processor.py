"""Our Qwen2-VL image processor against transformers' PIL-backed one (the reference where
torchvision is absent): grids exact, pixel values bit-exact, over random sizes, aspect ratios,
image modes and processor settings; the dtype cast folded into it equals casting afterwards."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from PIL import Image

from vllm_frontend.engine.tensors import to_bfloat16_words
from vllm_frontend.multimodal.processors.qwen2_vl import Qwen2VLImageProcessor, smart_resize

pytestmark = pytest.mark.oracle

SETTINGS = [
    {"min_pixels": 56 * 56, "max_pixels": 128 * 28 * 28},
    {"min_pixels": 56 * 56, "max_pixels": 28 * 28 * 1280},
    {"min_pixels": 256 * 28 * 28, "max_pixels": 512 * 28 * 28},
    {"min_pixels": 56 * 56, "max_pixels": 128 * 28 * 28, "do_normalize": False},
    {"min_pixels": 56 * 56, "max_pixels": 128 * 28 * 28, "do_rescale": False,
     "do_normalize": False},
    {"min_pixels": 56 * 56, "max_pixels": 64 * 28 * 28, "image_mean": [0.5, 0.5, 0.5],
     "image_std": [0.25, 0.5, 0.75]},
]  # fmt: skip


def _images(seed: int, count: int) -> list[Image.Image]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        if i % 4 == 0:  # long thin ones too (aspect ratio up to ~100)
            w, h = int(rng.integers(28, 1500)), int(rng.integers(10, 40))
        else:
            w, h = int(rng.integers(10, 1600)), int(rng.integers(10, 1600))
        image = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
        out.append(image.convert(("RGB", "L", "RGBA", "P", "CMYK")[i % 5]))
    return out


@pytest.mark.parametrize("settings", SETTINGS, ids=range(len(SETTINGS)))
def test_matches_transformers(settings: dict) -> None:
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    reference = Qwen2VLImageProcessorPil(**settings)
    ours = Qwen2VLImageProcessor.from_config(settings)
    for image in _images(len(str(settings)), 24):
        expected = reference(images=[image], return_tensors="np")
        got = ours.preprocess(image)
        assert expected["image_grid_thw"].tolist() == [list(got.grid_thw)], image.size
        want = expected["pixel_values"]
        assert want.dtype == got.pixel_values.dtype == np.float32
        assert want.shape == got.pixel_values.shape, image.size
        assert np.array_equal(want.view(np.uint32), got.pixel_values.view(np.uint32)), image.size
        assert ours.num_patches(image.height, image.width) == want.shape[0]


def test_dtype_cast_equals_casting_afterwards() -> None:
    import torch

    raw = Qwen2VLImageProcessor(max_pixels=128 * 28 * 28, do_rescale=False, do_normalize=False)
    for ours, image in itertools.product(
        (Qwen2VLImageProcessor(max_pixels=128 * 28 * 28), raw), _images(7, 8)
    ):
        full = ours.preprocess(image).pixel_values
        bf16 = ours.preprocess(image, "bfloat16").pixel_values
        expected = torch.from_numpy(full).to(torch.bfloat16).view(torch.int16).numpy()
        assert np.array_equal(bf16.view(np.int16), expected)
        assert np.array_equal(bf16, to_bfloat16_words(full))
        assert np.array_equal(ours.preprocess(image, "float16").pixel_values, full.astype("<f2"))


def test_smart_resize_matches_transformers() -> None:
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        smart_resize as reference,
    )

    rng = np.random.default_rng(3)
    for _ in range(2000):
        h, w = int(rng.integers(1, 5000)), int(rng.integers(1, 5000))
        lo = int(rng.integers(1, 4000))
        hi = lo + int(rng.integers(0, 2_000_000))
        try:
            want = reference(h, w, 28, lo, hi)
        except ValueError as e:
            with pytest.raises(ValueError, match="aspect ratio") as got:
                smart_resize(h, w, 28, lo, hi)
            assert str(got.value) == str(e)
            continue
        assert smart_resize(h, w, 28, lo, hi) == want

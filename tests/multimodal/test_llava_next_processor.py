"""Our LLaVA-NeXT image processor equals transformers' ``LlavaNextImageProcessorPil`` bit for bit,
and its image token count equals vLLM 0.32's (``LlavaNextProcessingInfo.get_num_image_tokens``,
compiled from its source: vLLM's llava modules import torchvision through transformers' pixtral)."""

from __future__ import annotations

import pathlib
import types
from typing import Any

import pytest
import vllm
from transformers import LlavaNextImageProcessorPil, LlavaOnevisionImageProcessorPil
from transformers.models.llava_next.modeling_llava_next import get_anyres_image_grid_shape
from vllm.model_executor.models.clip import CLIPEncoderInfo
from vllm.model_executor.models.siglip import SiglipEncoderInfo
from vllm.model_executor.models.vision import get_num_selected_vision_tokens

from tests.multimodal.processor_oracle import assert_same_or_both_fail, source_function
from tests.multimodal.random_images import image_cases
from vllm_frontend.multimodal.processors.llava_next import (
    LlavaNextImageProcessor,
    LlavaOnevisionImageProcessor,
    num_image_tokens,
)

pytestmark = pytest.mark.oracle

CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
PINPOINTS = [[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]]
# llava-hf/llava-v1.6-mistral-7b-hf's preprocessor_config.json values.
LLAVA_16: dict[str, Any] = {
    "crop_size": {"height": 336, "width": 336},
    "do_center_crop": True,
    "do_convert_rgb": True,
    "do_normalize": True,
    "do_pad": True,
    "do_rescale": True,
    "do_resize": True,
    "image_grid_pinpoints": PINPOINTS,
    "image_mean": CLIP_MEAN,
    "image_std": CLIP_STD,
    "resample": 3,
    "rescale_factor": 0.00392156862745098,
    "size": {"shortest_edge": 336},
}
# the same at a sixth of the size, with a grid that is not the default's, for many fast cases.
SMALL: dict[str, Any] = {
    **LLAVA_16,
    "crop_size": {"height": 56, "width": 56},
    "size": {"shortest_edge": 56},
    "image_grid_pinpoints": [[56, 112], [112, 56], [112, 112], [168, 56], [56, 168], [168, 168]],
}


@pytest.mark.parametrize(
    ("name", "config", "kwargs"),
    [
        ("llava-v1.6", LLAVA_16, {}),
        ("small", SMALL, {}),
        (
            "small bilinear square",
            {**SMALL, "resample": 2, "size": {"height": 56, "width": 56}},
            {},
        ),
        ("small no resize", SMALL, {"do_resize": False}),
    ],
)
def test_pixel_values_and_image_sizes_equal_transformers(
    name: str, config: dict[str, Any], kwargs: dict[str, Any]
) -> None:
    reference = LlavaNextImageProcessorPil(**config)
    ours = LlavaNextImageProcessor(config)
    images = image_cases(seed=len(name), count=12 if name == "llava-v1.6" else 26)
    batches = [[image] for image in images] + [images[i : i + 3] for i in range(0, 9, 3)]
    answered = sum(
        assert_same_or_both_fail(reference, ours.preprocess, batch, f"{name} {batch}", **kwargs)
        for batch in batches
    )
    assert answered == len(batches)


# llava-hf/llava-onevision-qwen2-0.5b-ov-hf's values are the class defaults (384-pixel patches, the
# 6 x 6 grid); the small variant keeps the grid's shape at 28-pixel patches.
ONEVISION_SMALL: dict[str, Any] = {
    "size": {"height": 28, "width": 28},
    "image_grid_pinpoints": [[h * 28, w * 28] for h in range(1, 7) for w in range(1, 7)],
}


@pytest.mark.parametrize(
    ("name", "config"), [("onevision", {}), ("onevision small", ONEVISION_SMALL)]
)
def test_onevision_pixel_values_equal_transformers(name: str, config: dict[str, Any]) -> None:
    reference = LlavaOnevisionImageProcessorPil(**config)
    ours = LlavaOnevisionImageProcessor(config)
    images = image_cases(seed=len(name), count=8 if name == "onevision" else 24)
    batches = [[image] for image in images] + [images[i : i + 3] for i in range(0, 6, 3)]
    for batch in batches:
        assert assert_same_or_both_fail(reference, ours.preprocess, batch, f"{name} {batch}")


_LLAVA_NEXT = str(pathlib.Path(vllm.__file__).parent / "model_executor/models/llava_next.py")
_NAMESPACE = {
    "get_num_selected_vision_tokens": get_num_selected_vision_tokens,
    "get_anyres_image_grid_shape": get_anyres_image_grid_shape,
}
vllm_num_image_tokens = source_function(
    _LLAVA_NEXT, "LlavaNextProcessingInfo.get_num_image_tokens", _NAMESPACE
)
vllm_num_unpadded_features = source_function(
    _LLAVA_NEXT, "LlavaNextProcessingInfo._get_num_unpadded_features", _NAMESPACE
)


@pytest.mark.parametrize(
    ("pinpoints", "image_size", "patch_size", "strategy", "tower"),
    [
        (PINPOINTS, 336, 14, "default", "clip"),
        ([[224, 448], [448, 224], [448, 448]], 224, 16, "full", "clip"),
        # A SigLIP tower has no CLS token; "default" still drops one feature in vLLM's count.
        (PINPOINTS, 336, 14, "default", "siglip"),
        ([[224, 448], [448, 224], [448, 448]], 224, 16, "full", "siglip"),
    ],
)
def test_image_token_counts_equal_vllms(
    pinpoints: list[list[int]], image_size: int, patch_size: int, strategy: str, tower: str
) -> None:
    hf_config = types.SimpleNamespace(
        vision_feature_select_strategy=strategy,
        image_grid_pinpoints=pinpoints,
        vision_config=types.SimpleNamespace(image_size=image_size, patch_size=patch_size),
    )
    info = types.SimpleNamespace(
        get_hf_config=lambda: hf_config,
        get_vision_encoder_info=lambda: (CLIPEncoderInfo if tower == "clip" else SiglipEncoderInfo)(
            hf_config
        ),
    )
    info._get_num_unpadded_features = lambda **kw: vllm_num_unpadded_features(info, **kw)
    for width in (1, 7, 100, 335, 336, 337, 500, 672, 999, 1008, 1500, 4000):
        for height in (1, 3, 100, 336, 480, 672, 1000, 2000, 3000):
            want = vllm_num_image_tokens(info, image_width=width, image_height=height)
            got = num_image_tokens(
                height, width, pinpoints, image_size, patch_size, strategy, tower == "clip"
            )
            assert got == want, (width, height)


_ONEVISION = str(pathlib.Path(vllm.__file__).parent / "model_executor/models/llava_onevision.py")
vllm_onevision_unpadded_features = source_function(
    _ONEVISION,
    "LlavaOnevisionProcessingInfo._get_num_unpadded_features",
    {"math": __import__("math")},
)


@pytest.mark.parametrize(
    ("image_size", "patch_size", "strategy"),
    [(384, 14, "full"), (56, 14, "full"), (384, 14, "default")],
)
def test_onevision_image_token_counts_equal_vllms(
    image_size: int, patch_size: int, strategy: str
) -> None:
    # LLaVA-OneVision's count: LLaVA-NeXT's with vLLM's "anyres_max_9" reduction of large grids
    # (SigLIP towers, the 6 x 6 grid of the tower's image size).
    pinpoints = [[h * image_size, w * image_size] for h in range(1, 7) for w in range(1, 7)]
    hf_config = types.SimpleNamespace(
        vision_feature_select_strategy=strategy,
        image_grid_pinpoints=pinpoints,
        vision_config=types.SimpleNamespace(image_size=image_size, patch_size=patch_size),
    )
    info = types.SimpleNamespace(
        get_hf_config=lambda: hf_config,
        get_vision_encoder_info=lambda: SiglipEncoderInfo(hf_config),
    )
    info._get_num_unpadded_features = lambda **kw: vllm_onevision_unpadded_features(info, **kw)
    reduced = 0
    for width in (1, 7, 100, 383, 384, 385, 700, 1153, 1500, 2304, 4000):
        for height in (1, 3, 100, 384, 480, 944, 1000, 2000, 2304, 3000):
            want = vllm_num_image_tokens(info, image_width=width, image_height=height)
            got = num_image_tokens(height, width, pinpoints, image_size, patch_size, strategy,
                                   False, onevision=True)  # fmt: skip
            assert got == want, (width, height)
            plain = num_image_tokens(height, width, pinpoints, image_size, patch_size, strategy,
                                     False)  # fmt: skip
            reduced += plain != got
    assert reduced > 10

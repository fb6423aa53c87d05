"""Our Phi-4-multimodal image processor against transformers' ``Phi4MultimodalImageProcessor``
(torchvision-only, run on tests/fixtures/torchvision_stub in a subprocess), over random images of
many sizes and aspect ratios: ``image_sizes``, ``image_attention_mask`` and ``num_img_tokens``
exact; the HD crops of ``image_pixel_values`` bit-exact where torch resizes ``uint8`` bilinearly
on the bytes (``ATEN_CPU_CAPABILITY=avx2``), within one level's step (1/255/std) where it resizes a
float32 copy (an AVX512 torch); the global crop (torch's float32 bicubic, summed in another
order) within 1e-6, plus 1.5 times the crops' tolerance (its bicubic weights' gain). The token
count from the size alone equals vLLM's Phi-4-multimodal ``_compute_num_image_tokens``.
(Phi-3-vision's processor is remote code, not in transformers, and vLLM 0.32 runs that remote
processor: there is no reference for it here.)"""

from __future__ import annotations

import ast
import math
import pathlib
import types
from typing import Any

import numpy as np
import pytest

from tests.multimodal.processor_oracle import source_function
from tests.multimodal.torchvision_oracle import (
    image_batches,
    native_bilinear_is_uint8,
    reference_outputs,
    vllm_model_source,
)
from vllm_frontend.multimodal.processors.phi4_multimodal import (
    IMAGE_PLACEHOLDER_TOKEN_ID,
    Phi4MultimodalImageProcessor,
)
from vllm_frontend.multimodal.processors.torch_resize import resize_bicubic_float

pytestmark = pytest.mark.oracle

SMALL: dict[str, Any] = {"size": {"height": 28, "width": 28}, "dynamic_hd": 6}
SETTINGS: list[dict[str, Any]] = [
    {"processor": "phi4_multimodal", "config": {}, "kwargs": {}},
    {"processor": "phi4_multimodal", "config": SMALL, "kwargs": {}},
    {"processor": "phi4_multimodal", "config": {**SMALL, "size": {"height": 56, "width": 56},
     "image_mean": [0.48, 0.45, 0.4], "image_std": [0.26, 0.26, 0.27]},
     "kwargs": {"dynamic_hd": 3}},
    {"processor": "phi4_multimodal", "config": {**SMALL, "do_normalize": False}, "kwargs": {}},
]  # fmt: skip
COUNTS = [6, 24, 12, 8]
BATCHES = [image_batches(seed=60 + n, count=count) for n, count in enumerate(COUNTS)]
GLOBAL_ATOL = 1e-6


def _compare(expected: dict[str, np.ndarray], levels: int, settings: list[int]) -> int:
    """Ours against ``expected`` (the reference's outputs for ``SETTINGS[i] for i in settings``,
    in that order); how many batches matched."""
    checked = 0
    for n, which in enumerate(settings):
        setting = SETTINGS[which]
        # ``levels`` resized pixel levels off, in normalised values (plus float32 rounding).
        std = min(setting["config"].get("image_std", [0.5]))
        hd_atol = levels / 255 / std + 1e-6 if levels else 0.0
        ours = Phi4MultimodalImageProcessor(setting["config"])
        for b, batch in enumerate(BATCHES[which]):
            index = f"{n}_{b:03d}"
            what = (n, [image.size for image in batch], [image.mode for image in batch])
            if f"error_{index}" in expected:
                with pytest.raises(ValueError):
                    ours.preprocess(batch, **setting["kwargs"])
                continue
            got = ours.preprocess(batch, **setting["kwargs"])
            names = ["image_attention_mask", "image_pixel_values", "image_sizes", "num_img_tokens"]
            assert sorted(got) == names
            for name in ("image_sizes", "image_attention_mask", "num_img_tokens"):
                want = expected[f"{name}_{index}"]
                assert got[name].dtype == want.dtype, (what, name, want.dtype)
                assert np.array_equal(got[name], want), (what, name)
            for image, tokens in zip(batch, got["num_img_tokens"].tolist(), strict=True):
                count = ours.num_image_tokens(image.height, image.width, **setting["kwargs"])
                assert count == tokens, what
            want = expected[f"image_pixel_values_{index}"]
            have = got["image_pixel_values"]
            assert have.dtype == want.dtype and have.shape == want.shape, (what, have.shape)
            global_diff = float(np.abs(have[:, 0] - want[:, 0]).max())
            # A canvas level off moves the bicubic global crop by at most 1.5 levels' step.
            assert global_diff <= GLOBAL_ATOL + 1.5 * hd_atol, (what, global_diff)
            if not levels:
                assert have[:, 1:].tobytes() == want[:, 1:].tobytes(), what
            else:
                assert float(np.abs(have[:, 1:] - want[:, 1:]).max()) <= hd_atol, what
            checked += 1
    return checked


def test_outputs_equal_transformers_uint8_resize(tmp_path: pathlib.Path) -> None:
    expected = reference_outputs(tmp_path, SETTINGS, BATCHES, capability="avx2")
    assert _compare(expected, levels=0, settings=list(range(len(SETTINGS)))) >= 30


def test_outputs_close_to_transformers_on_this_cpu(tmp_path: pathlib.Path) -> None:
    if native_bilinear_is_uint8():
        pytest.skip("this torch resizes uint8 on the bytes: the exact test covers it")
    expected = reference_outputs(tmp_path, SETTINGS[1:3], BATCHES[1:3])
    assert _compare(expected, levels=1, settings=[1, 2]) > 20


def test_token_counts_equal_vllm() -> None:
    """vLLM's ``Phi4MMProcessingInfo._compute_num_image_tokens`` and placeholder token id (taken
    from its source, with
    transformers' ``find_closest_aspect_ratio`` as the image processor's: vLLM's module needs the
    remote-code processor) against ours, over many sizes and crop limits."""
    path = vllm_model_source("phi4mm.py")
    tree = ast.parse(pathlib.Path(path).read_text(encoding="utf-8"))
    constants = {
        node.targets[0].id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, ast.Constant)
    }
    assert constants["_IMAGE_PLACEHOLDER_TOKEN_ID"] == IMAGE_PLACEHOLDER_TOKEN_ID
    namespace: dict[str, Any] = {"math": math}
    namespace["_get_padding_size"] = source_function(path, "_get_padding_size", namespace)
    compute = source_function(path, "Phi4MMProcessingInfo._compute_num_image_tokens", namespace)
    find = source_function(path, "Phi4MMProcessingInfo._find_target_aspect_ratio", namespace)
    transformers_path = str(
        pathlib.Path(__import__("transformers").__file__).parent
        / "models/phi4_multimodal/image_processing_phi4_multimodal.py"
    )
    closest = source_function(
        transformers_path, "Phi4MultimodalImageProcessor.find_closest_aspect_ratio", {}
    )
    image_processor = types.SimpleNamespace()
    image_processor.find_closest_aspect_ratio = types.MethodType(closest, image_processor)
    info = types.SimpleNamespace(
        get_hf_processor=lambda: types.SimpleNamespace(image_processor=image_processor)
    )
    info._find_target_aspect_ratio = types.MethodType(find, info)
    rng = np.random.default_rng(5)
    sizes = [(h, w) for h in (10, 14, 100, 447, 448, 449, 896, 1000, 4000) for w in (10, 448, 3000)]
    sizes += [(int(rng.integers(10, 6000)), int(rng.integers(10, 6000))) for _ in range(400)]
    for dynamic_hd in (36, 16, 4, 1):
        ours = Phi4MultimodalImageProcessor({"dynamic_hd": dynamic_hd})
        for height, width in sizes:
            want = compute(info, width, height, dynamic_hd, 448, 14, 2)
            assert ours.num_image_tokens(height, width) == want, (height, width, dynamic_hd)


def test_bicubic_float_resize_close_to_torch_interpolate() -> None:
    import torch

    rng = np.random.default_rng(13)
    for _ in range(20):
        h, w = int(rng.integers(1, 900)), int(rng.integers(1, 900))
        nh, nw = int(rng.integers(1, 500)), int(rng.integers(1, 500))
        values = rng.uniform(-1, 1, (3, h, w)).astype(np.float32)
        want = torch.nn.functional.interpolate(
            torch.from_numpy(values)[None],
            size=[nh, nw],
            mode="bicubic",
            align_corners=False,
            antialias=False,
        )[0].numpy()
        got = resize_bicubic_float(values, nh, nw)
        assert got.dtype == np.float32 and got.shape == want.shape
        assert float(np.abs(got - want).max()) <= GLOBAL_ATOL, ((h, w), (nh, nw))

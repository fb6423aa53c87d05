"""Our Llama 4 image processor against transformers' ``Llama4ImageProcessor`` (torchvision-only,
run on tests/fixtures/torchvision_stub in a subprocess), over random images of many sizes and
aspect ratios: ``aspect_ratios`` exact, ``pixel_values`` bit-exact where torch resizes ``uint8``
bilinearly on the bytes (CPU capability AVX2, forced with ``ATEN_CPU_CAPABILITY=avx2``); where it
resizes a float32 copy instead (an AVX512 torch, e.g.), resized pixels may differ by one level,
so the normalised values by one level's step (2/255, at most 2**-6 after bfloat16 rounding);
images that torch's float32 path resizes to a width of 1 are left out of that comparison: it
gives them wrong values (every output row the same), which its ``uint8`` path and ours do not.
The canvas, resize-size and prompt arithmetic equal transformers' and vLLM's own functions."""

from __future__ import annotations

import pathlib
import types
from typing import Any

import numpy as np
import pytest
from PIL import Image

from tests.multimodal.processor_oracle import source_function
from tests.multimodal.torchvision_oracle import (
    image_batches,
    native_bilinear_is_uint8,
    reference_outputs,
    vllm_model_source,
)
from vllm_frontend.multimodal.processors.llama4 import (
    Llama4ImageProcessor,
    best_canvas,
    image_replacement,
    num_image_tokens,
    patches_per_tile,
    resized_size,
    supported_canvases,
)
from vllm_frontend.multimodal.processors.torch_resize import resize_bilinear_u8

pytestmark = pytest.mark.oracle

# meta-llama/Llama-4-Scout-17B-16E-Instruct's preprocessor_config.json values.
SCOUT: dict[str, Any] = {
    "do_convert_rgb": True,
    "do_normalize": True,
    "do_rescale": True,
    "do_resize": True,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "max_patches": 16,
    "resample": 2,
    "rescale_factor": 0.00392156862745098,
    "resize_to_max_canvas": False,
    "size": {"height": 336, "width": 336},
}
SMALL = {**SCOUT, "size": {"height": 28, "width": 28}, "max_patches": 6}
SETTINGS: list[dict[str, Any]] = [
    {"processor": "llama4", "config": SCOUT, "kwargs": {}},
    {"processor": "llama4", "config": SMALL, "kwargs": {}},
    {"processor": "llama4", "config": SMALL, "kwargs": {"resize_to_max_canvas": True}},
    {"processor": "llama4", "config": {**SMALL, "image_mean": [0.48, 0.45, 0.4],
     "image_std": [0.26, 0.26, 0.27]}, "kwargs": {"max_patches": 3}},
    {"processor": "llama4", "config": {**SMALL, "do_normalize": False}, "kwargs": {}},
]  # fmt: skip
COUNTS = [6, 24, 10, 10, 8]


def _float_path_bug(image: Image.Image, config: dict[str, Any]) -> bool:
    """Whether torch's float32 bilinear resize gets this image wrong (a width of 1 out)."""
    tile, tiles = config["size"]["height"], config["max_patches"]
    canvas = best_canvas(image.height, image.width, supported_canvases(tiles, tile))
    new_h, new_w = resized_size(image.height, image.width, canvas, tile, False)
    return new_w == 1 and new_h != image.height


def _compare(expected: dict[str, np.ndarray], atol: float, settings: list[int]) -> int:
    """Ours against ``expected`` (the reference's outputs for ``SETTINGS[i] for i in settings``,
    in that order); how many batches matched."""
    checked = 0
    for n, which in enumerate(settings):
        setting = SETTINGS[which]
        ours = Llama4ImageProcessor(setting["config"])
        for b, batch in enumerate(BATCHES[which]):
            index = f"{n}_{b:03d}"
            what = (n, [image.size for image in batch], [image.mode for image in batch])
            if atol and any(_float_path_bug(image, setting["config"]) for image in batch):
                continue
            if f"error_{index}" in expected:
                with pytest.raises(Exception):  # noqa: B017
                    ours.preprocess(batch, **setting["kwargs"])
                continue
            got = ours.preprocess(batch, **setting["kwargs"])
            assert sorted(got) == ["aspect_ratios", "pixel_values"]
            ratios = expected[f"aspect_ratios_{index}"]
            assert np.array_equal(got["aspect_ratios"], ratios), what
            assert got["aspect_ratios"].dtype == ratios.dtype
            for image, ratio in zip(batch, ratios.tolist(), strict=True):
                assert list(ours.aspect_ratio(image.height, image.width, **setting["kwargs"])) == (
                    ratio
                )
            want = expected[f"pixel_values_{index}"]
            bf16 = f"pixel_values_{index}_bfloat16" in expected
            assert bf16 == setting["config"]["do_normalize"], what
            have = got["pixel_values"]
            assert have.dtype == want.dtype and have.shape == want.shape, (what, have.shape)
            if atol == 0:
                assert have.tobytes() == want.tobytes(), (what, float(np.abs(have - want).max()))
            else:
                assert float(np.abs(have - want).max()) <= atol, what
            checked += 1
    return checked


BATCHES = [image_batches(seed=40 + n, count=count) for n, count in enumerate(COUNTS)]


def test_pixel_values_equal_transformers_uint8_resize(tmp_path: pathlib.Path) -> None:
    expected = reference_outputs(tmp_path, SETTINGS, BATCHES, capability="avx2")
    assert _compare(expected, atol=0, settings=list(range(len(SETTINGS)))) > 55


def test_pixel_values_close_to_transformers_on_this_cpu(tmp_path: pathlib.Path) -> None:
    if native_bilinear_is_uint8():
        pytest.skip("this torch resizes uint8 on the bytes: the exact test covers it")
    expected = reference_outputs(tmp_path, SETTINGS[1:2], BATCHES[1:2])
    assert _compare(expected, atol=2**-6, settings=[1]) > 20


def _reference_functions() -> types.SimpleNamespace:
    import torch
    from transformers.image_utils import SizeDict

    path = str(
        pathlib.Path(__import__("transformers").__file__).parent
        / "models/llama4/image_processing_llama4.py"
    )
    namespace: dict[str, Any] = {"torch": torch, "math": __import__("math")}
    namespace["defaultdict"] = __import__("collections").defaultdict
    namespace["SizeDict"] = SizeDict
    names = ["get_factors", "find_supported_resolutions", "get_best_fit"]
    names.append("get_max_res_without_distortion")
    for name in names:
        namespace[name] = source_function(path, name, namespace)
    return types.SimpleNamespace(**{name: namespace[name] for name in names}, SizeDict=SizeDict)


def test_canvas_and_resize_size_equal_transformers() -> None:
    """The canvas and the resize size from the image size alone, against transformers' own
    functions (compiled from its module's source: the module imports torchvision), with the
    tensor/int mix of its ``_preprocess``."""
    import torch

    ref = _reference_functions()
    rng = np.random.default_rng(3)
    heights = (1, 2, 27, 28, 29, 100, 335, 336, 337, 672, 1000)
    sizes = [(h, w) for h in heights for w in (1, 28, 300)]
    sizes += [(int(rng.integers(1, 3000)), int(rng.integers(1, 3000))) for _ in range(300)]
    sizes += [(int(rng.integers(1, 80)), int(rng.integers(1, 400))) for _ in range(200)]
    for tile, max_tiles in ((336, 16), (28, 6), (14, 1), (336, 3), (20, 30)):
        tile_size = ref.SizeDict(height=tile, width=tile)
        resolutions = ref.find_supported_resolutions(max_num_chunks=max_tiles, patch_size=tile_size)
        canvases = supported_canvases(max_tiles, tile)
        assert [tuple(r) for r in resolutions] == list(canvases)
        tensor = torch.tensor(resolutions)
        for to_max in (False, True):
            for height, width in sizes:
                target = ref.get_best_fit((height, width), tensor, resize_to_max_canvas=to_max)
                canvas = best_canvas(height, width, canvases, to_max)
                assert canvas == tuple(target.tolist()), (height, width, tile, max_tiles)
                if to_max:
                    bounded = target
                else:
                    bounded = (
                        min(max(height, tile), target[0]),
                        min(max(width, tile), target[1]),
                    )
                new = ref.get_max_res_without_distortion((height, width), bounded)
                want = (max(int(new[0]), 1), max(int(new[1]), 1))
                assert resized_size(height, width, canvas, tile, to_max) == want, (
                    height,
                    width,
                    canvas,
                )


def test_prompt_text_and_token_counts_equal_vllm() -> None:
    """vLLM's Llama 4 processing builds an image's text with ``Llama4Processor._prompt_split_image``
    from the tile grid and ``get_patch_per_chunk`` tokens per tile (both taken from their
    sources: vLLM's module imports transformers' torchvision-only image processor)."""
    from transformers.models.llama4.processing_llama4 import Llama4Processor

    path = vllm_model_source("mllama4.py")
    per_chunk = source_function(path, "Mllama4ProcessingInfo.get_patch_per_chunk", {})
    for image_size, patch_size, ratio in ((336, 14, 0.5), (28, 14, 0.5), (56, 7, 0.5), (64, 8, 1)):
        config = types.SimpleNamespace(
            image_size=image_size, patch_size=patch_size, pixel_shuffle_ratio=ratio
        )
        assert patches_per_tile(image_size, patch_size, ratio) == per_chunk(config)
    for rows in range(1, 6):
        for columns in range(1, 6):
            for per_tile in (144, 4):
                want = Llama4Processor._prompt_split_image(None, (rows, columns), per_tile)
                got = image_replacement((rows, columns), per_tile)
                assert got == want
                # Every <|...|> is one token of Llama 4's tokenizer.
                assert num_image_tokens((rows, columns), per_tile) == want.count("<|")


def test_bilinear_resize_matches_torch_interpolate_on_uint8() -> None:
    import torch

    rng = np.random.default_rng(12)
    for _ in range(40):
        h, w = int(rng.integers(1, 300)), int(rng.integers(1, 300))
        nh, nw = int(rng.integers(1, 500)), int(rng.integers(1, 500))
        pixels = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        tensor = torch.from_numpy(pixels).permute(2, 0, 1)[None].contiguous()
        want = torch.nn.functional.interpolate(
            tensor, size=[nh, nw], mode="bilinear", align_corners=False, antialias=True
        )
        got = resize_bilinear_u8(pixels, nh, nw)
        assert np.array_equal(got, want[0].permute(1, 2, 0).numpy()), ((h, w), (nh, nw))

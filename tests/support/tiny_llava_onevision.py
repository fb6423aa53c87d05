"""A tiny LLaVA-OneVision model directory for the frontends' tests (configs, tokenizer and
processor files; no weights: vLLM's processor reads them in process, and ours serves them in
front of stand-in engines).

The tokenizer is the tiny Llama 3's (tests/support/tiny_model.py, its BOS post-processor kept)
with ``<image>`` and ``<video>`` appended as special tokens (ids :data:`IMAGE`, :data:`VIDEO`,
the config's ``image_token_index`` / ``video_token_index``). The vision tower is a two-layer
SigLIP whose image is :data:`IMAGE_SIZE` pixels of 14-pixel patches (a 4 x 4 grid: 16 features
per patch with the "full" selection, 4 per video frame once pooled 2 x 2); the image processor
is ``LlavaOnevisionImageProcessor`` on :data:`IMAGE_SIZE`-pixel patches and a 6 x 6 grid of
resolutions (the real models' shape at a smaller scale, so vLLM's "anyres_max_9" reduction is
reached), and the video processor ``LlavaOnevisionVideoProcessor`` resizing frames to
:data:`IMAGE_SIZE` x :data:`IMAGE_SIZE`.

    python -m tests.support.tiny_llava_onevision      # build (if needed) and print the directory
"""

from __future__ import annotations

import pathlib
from typing import Any

from tests.support import tiny_llava, tiny_vlm
from tests.support.tiny_model import cached_build, inputs_hash, tiny_model_dir

__all__ = ["IMAGE", "IMAGE_SIZE", "PATCH", "VIDEO", "tiny_llava_onevision_dir"]

BUILDER_VERSION = 1
"""Bump when the output changes in a way the hashed inputs do not capture."""
IMAGE = tiny_llava.LLAMA3_VOCAB
VIDEO = tiny_llava.LLAMA3_VOCAB + 1
IMAGE_SIZE = tiny_llava.IMAGE_SIZE
PATCH = tiny_llava.PATCH
PINPOINTS = [[h * IMAGE_SIZE, w * IMAGE_SIZE] for h in range(1, 7) for w in range(1, 7)]


def _input_hash(llama: pathlib.Path) -> str:
    return inputs_hash(
        pathlib.Path(__file__).read_bytes(),
        pathlib.Path(tiny_llava.__file__).read_bytes(),
        (llama / "tokenizer.json").read_bytes(),
        f"builder={BUILDER_VERSION}".encode(),
    )


def tiny_llava_onevision_dir() -> pathlib.Path:
    """The tiny LLaVA-OneVision directory, building it first if the cache lacks it."""
    llama = tiny_model_dir()
    name = f"tiny-llava-onevision-{_input_hash(llama)}"
    return cached_build(name, lambda out: _build(out, llama))


def _build(out: pathlib.Path, llama: pathlib.Path) -> None:
    tiny_llava.write_tokenizer(out, llama, ("<image>", "<video>"), max_length=8192)
    config: dict[str, Any] = {
        "architectures": ["LlavaOnevisionForConditionalGeneration"],
        "model_type": "llava_onevision",
        "text_config": tiny_llava.text_config(2, max_positions=8192),
        "vision_config": tiny_llava.vision_config("llava_next_siglip"),
        "image_token_index": IMAGE,
        "video_token_index": VIDEO,
        "vision_feature_select_strategy": "full",
        "vision_feature_layer": -1,
        "vision_aspect_ratio": "anyres_max_9",
        "image_grid_pinpoints": PINPOINTS,
        "projector_hidden_act": "gelu",
        "dtype": "bfloat16",
    }
    tiny_vlm.write_json(out / "config.json", config)
    common = {
        "do_convert_rgb": True,
        "do_normalize": True,
        "do_rescale": True,
        "do_resize": True,
        "image_mean": tiny_llava.CLIP_MEAN,
        "image_std": tiny_llava.CLIP_STD,
        "resample": 3,
        "rescale_factor": 1 / 255,
        "size": {"height": IMAGE_SIZE, "width": IMAGE_SIZE},
        "processor_class": "LlavaOnevisionProcessor",
    }
    tiny_vlm.write_json(
        out / "preprocessor_config.json",
        {
            **common,
            "image_processor_type": "LlavaOnevisionImageProcessor",
            "do_pad": True,
            "image_grid_pinpoints": PINPOINTS,
        },
    )
    tiny_vlm.write_json(
        out / "video_preprocessor_config.json",
        {**common, "video_processor_type": "LlavaOnevisionVideoProcessor"},
    )
    tiny_vlm.write_json(
        out / "processor_config.json",
        {
            "processor_class": "LlavaOnevisionProcessor",
            "image_token": "<image>",
            "video_token": "<video>",
            "num_image_tokens": (IMAGE_SIZE // PATCH) ** 2,
            "vision_feature_select_strategy": "full",
            "vision_aspect_ratio": "anyres_max_9",
        },
    )


if __name__ == "__main__":
    print(tiny_llava_onevision_dir())

"""A tiny SmolVLM model directory for the frontends' tests (configs, tokenizer and processor
files; no weights: vLLM's processor reads them in process, and ours serves them in front of
stand-in engines).

SmolVLM (``SmolVLMForConditionalGeneration``, ``model_type`` ``smolvlm``) is Idefics3's
architecture with its own processor classes: ``SmolVLMImageProcessor`` (Idefics3's steps and
defaults), ``SmolVLMVideoProcessor`` and ``SmolVLMProcessor``. The tokenizer and chat template
are the tiny Idefics3's (:mod:`tests.support.tiny_idefics3`: the tiny Llama 3's with Idefics3's
special tokens appended), the tower the same shape (64-pixel tiles of 16-pixel patches, 2 x 2
pixel shuffle: :data:`IMAGE_SEQ_LEN` ``<image>`` per tile), images resized to a longest edge
of :data:`LONGEST_EDGE` pixels before they are split.

    python -m tests.support.tiny_smolvlm      # build (if needed) and print the directory
"""

from __future__ import annotations

import pathlib

from tests.support import tiny_idefics3, tiny_vlm
from tests.support.tiny_idefics3 import (
    END_OF_TEXT,
    IMAGE,
    IMAGE_SEQ_LEN,
    SCALE_FACTOR,
    TILE,
)
from tests.support.tiny_model import cached_build, inputs_hash, tiny_model_dir

__all__ = ["IMAGE", "IMAGE_SEQ_LEN", "LONGEST_EDGE", "TILE", "tiny_smolvlm_dir"]

BUILDER_VERSION = 1
"""Bump when the output changes in a way the hashed inputs do not capture."""
LONGEST_EDGE = 4 * TILE


def _input_hash(llama: pathlib.Path) -> str:
    return inputs_hash(
        pathlib.Path(__file__).read_bytes(),
        pathlib.Path(tiny_idefics3.__file__).read_bytes(),
        (llama / "tokenizer.json").read_bytes(),
        tiny_idefics3.CHAT_TEMPLATE_PATH.read_bytes(),
        f"builder={BUILDER_VERSION}".encode(),
    )


def tiny_smolvlm_dir() -> pathlib.Path:
    """The tiny SmolVLM directory, building it first if the cache lacks it."""
    llama = tiny_model_dir()
    return cached_build(f"tiny-smolvlm-{_input_hash(llama)}", lambda out: _build(out, llama))


def _build(out: pathlib.Path, llama: pathlib.Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    template = tiny_idefics3.CHAT_TEMPLATE_PATH.read_text(encoding="utf-8")
    tiny_idefics3.build_tokenizer(llama, out, template)
    tiny_vlm.write_json(
        out / "config.json",
        {
            "architectures": ["SmolVLMForConditionalGeneration"],
            "model_type": "smolvlm",
            "text_config": tiny_idefics3.text_config(max_positions=8192),
            "vision_config": tiny_idefics3.vision_config("smolvlm_vision"),
            "scale_factor": SCALE_FACTOR,
            "image_token_id": IMAGE,
            "pad_token_id": END_OF_TEXT,
            "tie_word_embeddings": False,
            "dtype": "bfloat16",
        },
    )
    tiny_idefics3.write_processor_configs(out, "SmolVLM", LONGEST_EDGE)


if __name__ == "__main__":
    print(tiny_smolvlm_dir())

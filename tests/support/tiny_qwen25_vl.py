"""A tiny, reproducible Qwen2.5-VL checkpoint, the sibling of the tiny Qwen2-VL
(tests/support/tiny_vlm.py): the same tokenizer, chat template, text model and image processor
settings, a Qwen2.5-VL vision tower (width 64, two blocks, window 56, the second one with full
attention, SiLU MLP) and random weights from the same seeding. Its processor files name
``Qwen2_5_VLProcessor``; videos take their ``second_per_grid_ts`` from the sampled frame rate.

vLLM's Qwen2.5-VL code imports torchvision as Qwen2-VL's does: run vLLM on
:data:`tests.support.tiny_vlm.VLM_PYTHONPATH`.

    python -m tests.support.tiny_qwen25_vl      # build (if needed) and print the directory
"""

from __future__ import annotations

import os
import pathlib
import sys

from tests.support import tiny_vlm
from tests.support.tiny_model import cached_build, inputs_hash, run_builder, tiny_model_dir

BUILDER_VERSION = 1
"""Bump when the output changes in a way the hashed inputs do not capture."""


def _input_hash(llama: pathlib.Path) -> str:
    return inputs_hash(
        pathlib.Path(__file__).read_bytes(),
        pathlib.Path(tiny_vlm.__file__).read_bytes(),
        (llama / "tokenizer.json").read_bytes(),
        tiny_vlm.CHAT_TEMPLATE_PATH.read_bytes(),
        f"builder={BUILDER_VERSION}".encode(),
    )


def tiny_qwen25_vl_dir() -> pathlib.Path:
    """The tiny Qwen2.5-VL checkpoint's directory, building it first if the cache lacks it."""
    llama = tiny_model_dir()

    def build(staging: pathlib.Path) -> None:
        run_builder("tests.support.tiny_qwen25_vl", staging, str(llama))

    return cached_build(f"tiny-qwen2.5-vl-{_input_hash(llama)}", build)


def _checkpoint_name(name: str) -> str:
    # transformers 5 parameter names -> the names save_pretrained writes.
    for new, old in (("model.language_model.", "model."), ("model.visual.", "visual.")):
        if name.startswith(new):
            return old + name[len(new) :]
    return name


def _build(out: pathlib.Path, llama: pathlib.Path) -> None:
    """Write the checkpoint (runs in a subprocess: imports torch and transformers)."""
    import torch
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    out.mkdir(parents=True, exist_ok=True)
    template = tiny_vlm.CHAT_TEMPLATE_PATH.read_text(encoding="utf-8")
    tiny_vlm._build_tokenizer(llama, out, template)
    vocab = tiny_vlm.LLAMA3_VOCAB + len(tiny_vlm.QWEN2_VL_SPECIALS)
    text = {
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 4096,
        "bos_token_id": tiny_vlm.BOS,
        "pad_token_id": tiny_vlm.END_OF_TEXT,
        "tie_word_embeddings": False,
        "vocab_size": vocab,
        "rms_norm_eps": 1e-6,
        "rope_parameters": {
            "rope_type": "default",
            "mrope_section": [4, 6, 6],
            "rope_theta": 1000000.0,
        },
        "eos_token_id": tiny_vlm.IM_END,
        "dtype": "bfloat16",
    }
    vision = {
        "depth": 2,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_heads": 2,
        "out_hidden_size": 128,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "tokens_per_second": 2,
        "window_size": 56,
        "fullatt_block_indexes": [1],
        "in_channels": 3,
        "hidden_act": "silu",
    }
    config = Qwen2_5_VLConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=tiny_vlm.IMAGE_PAD,
        video_token_id=tiny_vlm.VIDEO_PAD,
        vision_start_token_id=tiny_vlm.VISION_START,
        vision_end_token_id=tiny_vlm.VISION_END,
        tie_word_embeddings=False,
        dtype="bfloat16",
    )
    torch.manual_seed(tiny_vlm.SEED)
    model = Qwen2_5_VLForConditionalGeneration(config)
    tiny_vlm.randomize(model, _checkpoint_name)
    model.to(torch.bfloat16).save_pretrained(str(out))
    os.chmod(out / "model.safetensors", 0o644)
    tiny_vlm.write_json(
        out / "generation_config.json",
        {
            "bos_token_id": tiny_vlm.BOS,
            "do_sample": False,
            "eos_token_id": [tiny_vlm.IM_END, tiny_vlm.END_OF_TEXT],
            "pad_token_id": tiny_vlm.END_OF_TEXT,
        },
    )
    tiny_vlm.write_json(
        out / "preprocessor_config.json",
        {
            "min_pixels": tiny_vlm.MIN_PIXELS,
            "max_pixels": tiny_vlm.MAX_PIXELS,
            "patch_size": 14,
            "temporal_patch_size": 2,
            "merge_size": 2,
            "image_mean": tiny_vlm.CLIP_MEAN,
            "image_std": tiny_vlm.CLIP_STD,
            "image_processor_type": "Qwen2VLImageProcessor",
            "processor_class": "Qwen2_5_VLProcessor",
        },
    )


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--build":
        _build(pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3]))
    else:
        print(tiny_qwen25_vl_dir())

"""A tiny Llama 4 model directory for the frontends' tests (configs, tokenizer and processor
files; no weights: vLLM's processor reads it in process). The tokenizer is the tiny Llama 3's
(tests/support/tiny_model.py), whose ``<|image|>`` (128011) Llama 4 shares, with Llama 4's other
image tokens appended under their real names (``<|image_start|>``, ``<|image_end|>``,
``<|patch|>``, ``<|tile_x_separator|>``, ``<|tile_y_separator|>``: ids 128256..128260); tiles
are :data:`TILE` pixels (a vision tower of 14-pixel patches, pixel shuffle 0.5: 4 ``<|patch|>``
per tile), at most :data:`MAX_PATCHES` tiles per image, the image processor Llama 4's.

    python -m tests.support.tiny_llama4      # build (if needed) and print the directory
"""

from __future__ import annotations

import json
import pathlib

from tests.support import tiny_vlm
from tests.support.tiny_model import cached_build, inputs_hash, tiny_model_dir

BUILDER_VERSION = 1
"""Bump when the output changes in a way the hashed inputs do not capture."""
SPECIALS = ("<|image_start|>", "<|image_end|>", "<|patch|>", "<|tile_x_separator|>",
            "<|tile_y_separator|>")  # fmt: skip
LLAMA3_VOCAB = 128256
IMAGE = 128011
"""``<|image|>``, already a Llama 3 special token."""
PATCH = LLAMA3_VOCAB + 2
TILE = 56
MAX_PATCHES = 6


def _input_hash(llama: pathlib.Path) -> str:
    return inputs_hash(
        pathlib.Path(__file__).read_bytes(),
        (llama / "tokenizer.json").read_bytes(),
        f"builder={BUILDER_VERSION}".encode(),
    )


def tiny_llama4_dir() -> pathlib.Path:
    """The tiny Llama 4 directory, building it first if the cache lacks it."""
    llama = tiny_model_dir()
    return cached_build(f"tiny-llama4-{_input_hash(llama)}", lambda out: _build(out, llama))


def _build(out: pathlib.Path, llama: pathlib.Path) -> None:
    from tokenizers import AddedToken, Tokenizer

    tokenizer = Tokenizer.from_file(str(llama / "tokenizer.json"))
    assert tokenizer.get_vocab_size(with_added_tokens=True) == LLAMA3_VOCAB
    assert tokenizer.token_to_id("<|image|>") == IMAGE
    tokenizer.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in SPECIALS])
    assert [tokenizer.token_to_id(t) for t in SPECIALS] == list(
        range(LLAMA3_VOCAB, LLAMA3_VOCAB + len(SPECIALS))
    )
    tokenizer.save(str(out / "tokenizer.json"))
    added = {
        str(t["id"]): {
            k: t[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word", "special")
        }
        for t in json.loads((out / "tokenizer.json").read_text())["added_tokens"]
    }
    tiny_vlm.write_json(
        out / "tokenizer_config.json",
        {
            "added_tokens_decoder": added,
            "bos_token": "<|begin_of_text|>",
            "eos_token": "<|eot_id|>",
            "pad_token": "<|end_of_text|>",
            "clean_up_tokenization_spaces": False,
            "model_max_length": 8192,
            "tokenizer_class": "PreTrainedTokenizerFast",
        },
    )
    text = {
        "model_type": "llama4_text",
        "hidden_size": 128,
        "intermediate_size": 256,
        "intermediate_size_mlp": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "num_local_experts": 2,
        "num_experts_per_tok": 1,
        "interleave_moe_layer_step": 1,
        "max_position_embeddings": 8192,
        "vocab_size": LLAMA3_VOCAB + len(SPECIALS),
        "rope_theta": 500000.0,
        "attention_chunk_size": 8192,
    }
    vision = {
        "model_type": "llama4_vision_model",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "image_size": TILE,
        "patch_size": 14,
        "pixel_shuffle_ratio": 0.5,
        "projector_input_dim": 64,
        "projector_output_dim": 128,
        "vision_output_dim": 64,
        "rope_theta": 10000,
    }
    tiny_vlm.write_json(
        out / "config.json",
        {
            "architectures": ["Llama4ForConditionalGeneration"],
            "model_type": "llama4",
            "text_config": text,
            "vision_config": vision,
            "image_token_index": IMAGE,
            "boi_token_index": LLAMA3_VOCAB,
            "eoi_token_index": LLAMA3_VOCAB + 1,
            "dtype": "bfloat16",
        },
    )
    tiny_vlm.write_json(
        out / "preprocessor_config.json",
        {
            "image_processor_type": "Llama4ImageProcessor",
            "processor_class": "Llama4Processor",
            "do_convert_rgb": True,
            "do_normalize": True,
            "do_rescale": True,
            "do_resize": True,
            "image_mean": [0.5, 0.5, 0.5],
            "image_std": [0.5, 0.5, 0.5],
            "max_patches": MAX_PATCHES,
            "resample": 2,
            "rescale_factor": 0.00392156862745098,
            "resize_to_max_canvas": False,
            "size": {"height": TILE, "width": TILE},
        },
    )
    tiny_vlm.write_json(
        out / "processor_config.json",
        {"processor_class": "Llama4Processor", "patch_size": 14, "pixel_shuffle_ratio": 0.5},
    )


if __name__ == "__main__":
    print(tiny_llama4_dir())

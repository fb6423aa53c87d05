"""A tiny, reproducible Idefics3 checkpoint that the real vLLM CPU engine loads.

Text side: the tiny Llama 3's tokenizer (tests/support/tiny_model.py, its BOS post-processor
kept) with Idefics3's special tokens appended under their real names (ids 128256..: ``<image>``
at :data:`IMAGE`, ``<end_of_utterance>`` the end of a turn, ``<row_R_col_C>`` for 6 x 6 tiles),
Idefics3-8B-Llama3's chat template (tests/fixtures/chat-templates/idefics3.jinja). Network: a
two-layer Llama 3 text model (hidden 128, 4 heads / 2 KV heads, head_dim 32) and a two-layer
SigLIP-style vision tower (width 64, 64-pixel tiles of 16-pixel patches) with the 2x2
pixel-shuffle connector, so each tile is :data:`IMAGE_SEQ_LEN` ``<image>`` tokens; random weights
from a fixed seed as the tiny Qwen2-VL's (:func:`tests.support.tiny_vlm.randomize`). Images are
resized to a longest edge of :data:`LONGEST_EDGE` pixels and split into at most 3 x 3 tiles plus
the global image.

vLLM's Idefics3 code needs no torchvision shim. The builder runs in a subprocess (it needs torch
and transformers), once; the checkpoint is cached under ``$VLLM_FRONTEND_TEST_CACHE``.

    python -m tests.support.tiny_idefics3      # build (if needed) and print the directory
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
from typing import Any

from tests.support.fixtures import CHAT_TEMPLATES
from tests.support.tiny_model import cached_build, inputs_hash, run_builder, tiny_model_dir
from tests.support.tiny_vlm import randomize, write_json

CHAT_TEMPLATE_PATH = CHAT_TEMPLATES / "idefics3.jinja"

# Idefics3's special tokens, appended to Llama 3's 128256 in this order.
IDEFICS3_SPECIALS = (
    "<fake_token_around_image>",
    "<image>",
    "<end_of_utterance>",
    "<global-img>",
    *(f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)),
)
LLAMA3_VOCAB = 128256
IMAGE = LLAMA3_VOCAB + IDEFICS3_SPECIALS.index("<image>")
END_OF_UTTERANCE = LLAMA3_VOCAB + IDEFICS3_SPECIALS.index("<end_of_utterance>")
BOS = 128000
END_OF_TEXT = 128001
TILE = 64
"""The vision tower's image size: images are cut into tiles of this many pixels."""
PATCH = 16
SCALE_FACTOR = 2
IMAGE_SEQ_LEN = (TILE // PATCH) ** 2 // SCALE_FACTOR**2
LONGEST_EDGE = 3 * TILE

# Bump when the output changes in a way the hashed inputs do not capture.
BUILDER_VERSION = 1


def _input_hash(llama: pathlib.Path) -> str:
    return inputs_hash(
        pathlib.Path(__file__).read_bytes(),
        (pathlib.Path(__file__).parent / "tiny_vlm.py").read_bytes(),
        (llama / "tokenizer.json").read_bytes(),
        CHAT_TEMPLATE_PATH.read_bytes(),
        f"builder={BUILDER_VERSION}".encode(),
    )


def tiny_idefics3_dir() -> pathlib.Path:
    """The tiny Idefics3 checkpoint's directory, building it first if the cache lacks it."""
    llama = tiny_model_dir()

    def build(staging: pathlib.Path) -> None:
        run_builder("tests.support.tiny_idefics3", staging, str(llama))

    return cached_build(f"tiny-idefics3-{_input_hash(llama)}", build)


def build_tokenizer(llama: pathlib.Path, out: pathlib.Path, template: str) -> None:
    from tokenizers import AddedToken, Tokenizer

    tokenizer = Tokenizer.from_file(str(llama / "tokenizer.json"))
    assert tokenizer.get_vocab_size(with_added_tokens=True) == LLAMA3_VOCAB
    tokenizer.add_special_tokens(
        [AddedToken(t, normalized=False, special=True) for t in IDEFICS3_SPECIALS]
    )
    ids = [tokenizer.token_to_id(t) for t in IDEFICS3_SPECIALS]
    assert ids == list(range(LLAMA3_VOCAB, LLAMA3_VOCAB + len(IDEFICS3_SPECIALS))), ids
    tokenizer.save(str(out / "tokenizer.json"))
    added = {
        str(t["id"]): {
            k: t[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word", "special")
        }
        for t in json.loads((out / "tokenizer.json").read_text())["added_tokens"]
    }
    # Idefics3-8B-Llama3's: the processor's three tokens are the additional special tokens.
    additional = ["<fake_token_around_image>", "<image>", "<end_of_utterance>"]
    config = {
        "added_tokens_decoder": added,
        "additional_special_tokens": additional,
        "bos_token": "<|begin_of_text|>",
        "chat_template": template,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<end_of_utterance>",
        "model_max_length": 4096,
        "pad_token": "<|end_of_text|>",
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    write_json(out / "tokenizer_config.json", config)
    write_json(
        out / "special_tokens_map.json",
        {
            "additional_special_tokens": additional,
            "bos_token": "<|begin_of_text|>",
            "eos_token": "<end_of_utterance>",
            "pad_token": "<|end_of_text|>",
        },
    )
    (out / "chat_template.jinja").write_text(template, encoding="utf-8")


def text_config(max_positions: int = 4096) -> dict[str, Any]:
    """The two-layer Llama 3 text model's config, its vocabulary grown by Idefics3's tokens."""
    return {
        "model_type": "llama",
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "max_position_embeddings": max_positions,
        "bos_token_id": BOS,
        "pad_token_id": END_OF_TEXT,
        "eos_token_id": [END_OF_UTTERANCE, END_OF_TEXT],
        "tie_word_embeddings": False,
        "vocab_size": LLAMA3_VOCAB + len(IDEFICS3_SPECIALS),
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "dtype": "bfloat16",
    }


def vision_config(model_type: str | None = None) -> dict[str, Any]:
    """The two-layer vision tower on :data:`TILE`-pixel tiles (``model_type`` when given)."""
    typed = {} if model_type is None else {"model_type": model_type}
    return {
        **typed,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "image_size": TILE,
        "patch_size": PATCH,
    }


def write_processor_configs(out: pathlib.Path, family: str, longest_edge: int) -> None:
    """Write the preprocessor and processor configs of ``family`` (``Idefics3`` or
    ``SmolVLM``: its processor classes' prefix), resizing to ``longest_edge`` pixels."""
    write_json(
        out / "preprocessor_config.json",
        {
            "do_convert_rgb": True,
            "do_image_splitting": True,
            "do_normalize": True,
            "do_pad": True,
            "do_rescale": True,
            "do_resize": True,
            "image_mean": [0.5, 0.5, 0.5],
            "image_std": [0.5, 0.5, 0.5],
            "image_processor_type": f"{family}ImageProcessor",
            "max_image_size": {"longest_edge": TILE},
            "processor_class": f"{family}Processor",
            "resample": 1,
            "rescale_factor": 1 / 255,
            "size": {"longest_edge": longest_edge},
        },
    )
    write_json(
        out / "processor_config.json",
        {"image_seq_len": IMAGE_SEQ_LEN, "processor_class": f"{family}Processor"},
    )


def _build(out: pathlib.Path, llama: pathlib.Path) -> None:
    """Write the checkpoint (runs in a subprocess: imports torch and transformers)."""
    import torch
    from transformers import Idefics3Config, Idefics3ForConditionalGeneration

    out.mkdir(parents=True, exist_ok=True)
    build_tokenizer(llama, out, CHAT_TEMPLATE_PATH.read_text(encoding="utf-8"))
    config = Idefics3Config(
        text_config=text_config(),
        vision_config=vision_config(),
        scale_factor=SCALE_FACTOR,
        image_token_id=IMAGE,
        pad_token_id=END_OF_TEXT,
        tie_word_embeddings=False,
        dtype="bfloat16",
    )
    torch.manual_seed(0)
    model = Idefics3ForConditionalGeneration(config)
    randomize(model)
    model.to(torch.bfloat16).save_pretrained(str(out))
    os.chmod(out / "model.safetensors", 0o644)
    write_json(
        out / "generation_config.json",
        {
            "bos_token_id": BOS,
            "do_sample": False,
            "eos_token_id": [END_OF_UTTERANCE, END_OF_TEXT],
            "pad_token_id": END_OF_TEXT,
        },
    )
    write_processor_configs(out, "Idefics3", LONGEST_EDGE)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--build":
        _build(pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3]))
    else:
        print(tiny_idefics3_dir())

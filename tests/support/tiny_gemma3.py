"""A tiny Gemma 3 model directory for the frontends' tests (configs, tokenizer and processor
files; no weights: vLLM's processor reads it in process, and it is served in front of mock
engines). The tokenizer is the tiny Llama 3's (tests/support/tiny_model.py) with Gemma 3's
image and turn tokens appended under their real names (``<start_of_image>``,
``<end_of_image>``, ``<image_soft_token>``, ``<start_of_turn>``, ``<end_of_turn>``: ids
128256..128260) and named as Gemma 3's tokenizer names them (``boi_token``, ``eoi_token``,
``image_token``), and Gemma's newline runs ``"\n"`` to ``"\n\n\n\n"`` as tokens of their own
(128261..128264; Gemma's SentencePiece vocabulary has them, and vLLM's Gemma 3 processor merges
them around an image); each image stands for :data:`IMAGE_SEQ_LENGTH` soft tokens of a 64-pixel
SigLIP-style tower, and the image processor is Gemma 3's (bilinear to 64 x 64, mean and std
0.5).

    python -m tests.support.tiny_gemma3      # build (if needed) and print the directory
"""

from __future__ import annotations

import json
import pathlib

from tests.support import tiny_vlm
from tests.support.tiny_model import cached_build, inputs_hash, tiny_model_dir

BUILDER_VERSION = 1
"""Bump when the output changes in a way the hashed inputs do not capture."""
SPECIALS = ("<start_of_image>", "<end_of_image>", "<image_soft_token>", "<start_of_turn>",
            "<end_of_turn>")  # fmt: skip
LLAMA3_VOCAB = 128256
BOI = LLAMA3_VOCAB
EOI = LLAMA3_VOCAB + 1
IMAGE_SOFT = LLAMA3_VOCAB + 2
NEWLINES = ("\n", "\n\n", "\n\n\n", "\n\n\n\n")
IMAGE_SEQ_LENGTH = 16
IMAGE_SIZE = 64


def _input_hash(llama: pathlib.Path) -> str:
    return inputs_hash(
        pathlib.Path(__file__).read_bytes(),
        (llama / "tokenizer.json").read_bytes(),
        f"builder={BUILDER_VERSION}".encode(),
    )


def tiny_gemma3_dir() -> pathlib.Path:
    """The tiny Gemma 3 directory, building it first if the cache lacks it."""
    llama = tiny_model_dir()
    return cached_build(f"tiny-gemma3-{_input_hash(llama)}", lambda out: _build(out, llama))


def _build(out: pathlib.Path, llama: pathlib.Path) -> None:
    from tokenizers import AddedToken, Tokenizer

    tokenizer = Tokenizer.from_file(str(llama / "tokenizer.json"))
    assert tokenizer.get_vocab_size(with_added_tokens=True) == LLAMA3_VOCAB
    tokenizer.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in SPECIALS])
    assert [tokenizer.token_to_id(t) for t in SPECIALS] == list(
        range(LLAMA3_VOCAB, LLAMA3_VOCAB + len(SPECIALS))
    )
    tokenizer.add_tokens([AddedToken(t, normalized=False, special=False) for t in NEWLINES])
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
            "eos_token": "<end_of_turn>",
            "pad_token": "<|end_of_text|>",
            "boi_token": "<start_of_image>",
            "eoi_token": "<end_of_image>",
            "image_token": "<image_soft_token>",
            "extra_special_tokens": {
                "boi_token": "<start_of_image>",
                "eoi_token": "<end_of_image>",
                "image_token": "<image_soft_token>",
            },
            "clean_up_tokenization_spaces": False,
            "model_max_length": 8192,
            "tokenizer_class": "PreTrainedTokenizerFast",
        },
    )
    text = {
        "model_type": "gemma3_text",
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "max_position_embeddings": 8192,
        "vocab_size": LLAMA3_VOCAB + len(SPECIALS) + len(NEWLINES),
        "sliding_window": 512,
        "dtype": "bfloat16",
    }
    vision = {
        "model_type": "siglip_vision_model",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "image_size": IMAGE_SIZE,
        "patch_size": 8,
    }
    tiny_vlm.write_json(
        out / "config.json",
        {
            "architectures": ["Gemma3ForConditionalGeneration"],
            "model_type": "gemma3",
            "text_config": text,
            "vision_config": vision,
            "mm_tokens_per_image": IMAGE_SEQ_LENGTH,
            "boi_token_index": BOI,
            "eoi_token_index": EOI,
            "image_token_index": IMAGE_SOFT,
            "dtype": "bfloat16",
        },
    )
    tiny_vlm.write_json(
        out / "preprocessor_config.json",
        {
            "image_processor_type": "Gemma3ImageProcessor",
            "processor_class": "Gemma3Processor",
            "size": {"height": IMAGE_SIZE, "width": IMAGE_SIZE},
            "resample": 2,
            "image_mean": [0.5, 0.5, 0.5],
            "image_std": [0.5, 0.5, 0.5],
            "do_pan_and_scan": None,
            "pan_and_scan_min_crop_size": None,
            "pan_and_scan_max_num_crops": None,
            "pan_and_scan_min_ratio_to_activate": None,
        },
    )
    tiny_vlm.write_json(
        out / "processor_config.json",
        {"processor_class": "Gemma3Processor", "image_seq_length": IMAGE_SEQ_LENGTH},
    )


if __name__ == "__main__":
    print(tiny_gemma3_dir())

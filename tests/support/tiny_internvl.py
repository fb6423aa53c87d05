"""A tiny InternVL (Hugging Face format, ``model_type`` ``internvl``) model directory for the
frontends' tests (configs, tokenizer and processor files; no weights: vLLM's processor reads it
in process). The tokenizer is the tiny Llama 3's (tests/support/tiny_model.py) with InternVL's
image tokens and Qwen2's turn tokens appended under their real names (``<img>``, ``</img>``,
``<IMG_CONTEXT>``, ``<video>``, ``<|im_start|>``, ``<|im_end|>``: ids 128256..128261), named as
InternVL3-hf's tokenizer names them (``start_image_token``, ``end_image_token``,
``context_image_token``, ``video_token``); a ChatML chat template written for this test model
after InternVL3-hf's (an image content item renders as ``<IMG_CONTEXT>\\n``). Each tile stands
for :data:`IMAGE_SEQ_LENGTH` ``<IMG_CONTEXT>`` tokens of a :data:`TILE`-pixel InternViT-style
tower; the image processor is GOT-OCR 2's (``GotOcr2ImageProcessor``: bicubic, ImageNet mean and
std, up to :data:`MAX_PATCHES` tiles plus a thumbnail, as InternVL3-1B-hf's config with smaller
tiles).

    python -m tests.support.tiny_internvl      # build (if needed) and print the directory
"""

from __future__ import annotations

import json
import pathlib

from tests.support import tiny_vlm
from tests.support.tiny_model import cached_build, inputs_hash, tiny_model_dir

BUILDER_VERSION = 1
"""Bump when the output changes in a way the hashed inputs do not capture."""
SPECIALS = ("<img>", "</img>", "<IMG_CONTEXT>", "<video>", "<|im_start|>", "<|im_end|>")
LLAMA3_VOCAB = 128256
START_IMAGE = LLAMA3_VOCAB
END_IMAGE = LLAMA3_VOCAB + 1
IMG_CONTEXT = LLAMA3_VOCAB + 2
IM_END = LLAMA3_VOCAB + 5
TILE = 28
PATCH = 7
IMAGE_SEQ_LENGTH = (TILE // PATCH) ** 2 // 4
"""``<IMG_CONTEXT>`` per tile: the patches after the 0.5 pixel shuffle (4)."""
MAX_PATCHES = 6

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' %}{{ '<IMG_CONTEXT>\\n' }}"
    "{% elif content['type'] == 'video' %}{{ '<video>\\n' }}"
    "{% elif content['type'] == 'text' %}{{ content['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def _input_hash(llama: pathlib.Path) -> str:
    return inputs_hash(
        pathlib.Path(__file__).read_bytes(),
        (llama / "tokenizer.json").read_bytes(),
        f"builder={BUILDER_VERSION}".encode(),
    )


def tiny_internvl_dir() -> pathlib.Path:
    """The tiny InternVL directory, building it first if the cache lacks it."""
    llama = tiny_model_dir()
    return cached_build(f"tiny-internvl-{_input_hash(llama)}", lambda out: _build(out, llama))


def _build(out: pathlib.Path, llama: pathlib.Path) -> None:
    from tokenizers import AddedToken, Tokenizer

    tokenizer = Tokenizer.from_file(str(llama / "tokenizer.json"))
    assert tokenizer.get_vocab_size(with_added_tokens=True) == LLAMA3_VOCAB
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
    names = {
        "start_image_token": "<img>",
        "end_image_token": "</img>",
        "context_image_token": "<IMG_CONTEXT>",
        "video_token": "<video>",
    }
    tiny_vlm.write_json(
        out / "tokenizer_config.json",
        {
            "added_tokens_decoder": added,
            "bos_token": "<|begin_of_text|>",
            "eos_token": "<|im_end|>",
            "pad_token": "<|end_of_text|>",
            **names,
            "extra_special_tokens": names,
            "chat_template": CHAT_TEMPLATE,
            "clean_up_tokenization_spaces": False,
            "model_max_length": 8192,
            "tokenizer_class": "PreTrainedTokenizerFast",
        },
    )
    text = {
        "model_type": "qwen2",
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 8192,
        "vocab_size": LLAMA3_VOCAB + len(SPECIALS),
        "dtype": "bfloat16",
    }
    vision = {
        "model_type": "internvl_vision",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "image_size": [TILE, TILE],
        "patch_size": [PATCH, PATCH],
    }
    tiny_vlm.write_json(
        out / "config.json",
        {
            "architectures": ["InternVLForConditionalGeneration"],
            "model_type": "internvl",
            "text_config": text,
            "vision_config": vision,
            "downsample_ratio": 0.5,
            "image_seq_length": IMAGE_SEQ_LENGTH,
            "image_token_id": IMG_CONTEXT,
            "projector_hidden_act": "gelu",
            "vision_feature_layer": -1,
            "vision_feature_select_strategy": "default",
            "dtype": "bfloat16",
        },
    )
    tiny_vlm.write_json(
        out / "preprocessor_config.json",
        {
            "image_processor_type": "GotOcr2ImageProcessor",
            "processor_class": "InternVLProcessor",
            "crop_to_patches": False,
            "do_convert_rgb": True,
            "do_normalize": True,
            "do_rescale": True,
            "do_resize": True,
            "image_mean": [0.485, 0.456, 0.406],
            "image_std": [0.229, 0.224, 0.225],
            "max_patches": MAX_PATCHES,
            "min_patches": 1,
            "resample": 3,
            "rescale_factor": 1 / 255,
            "size": {"height": TILE, "width": TILE},
        },
    )
    tiny_vlm.write_json(
        out / "processor_config.json",
        {"processor_class": "InternVLProcessor", "image_seq_length": IMAGE_SEQ_LENGTH},
    )


if __name__ == "__main__":
    print(tiny_internvl_dir())

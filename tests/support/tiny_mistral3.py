"""Tiny Hugging Face-format Pixtral-style model directories for the frontends' tests (configs,
tokenizer and processor files; no weights: vLLM's processor reads them in process, and they are
served in front of mock engines):

- :func:`tiny_mistral3_dir`: a Mistral 3 (``Mistral3ForConditionalGeneration``, a Pixtral vision
  tower with 8-pixel patches merged 2 x 2, so 16-pixel merged patches; images fitted into
  :data:`MISTRAL3_EDGE` pixels);
- :func:`tiny_pixtral_hf_dir`: a Pixtral in Hugging Face format as mistral-community/pixtral-12b
  ships it (``LlavaForConditionalGeneration`` with a ``pixtral`` vision tower, 16-pixel patches,
  no merge; images fitted into :data:`PIXTRAL_EDGE` pixels).

The tokenizer of both is the tiny Llama 3's (tests/support/tiny_model.py) with Pixtral's image
tokens appended under their real names (``[IMG]``, ``[IMG_BREAK]``, ``[IMG_END]``: ids
128256..128258); the image processor is ``PixtralImageProcessor`` with CLIP's mean and std, and
``processor_config.json`` names ``PixtralProcessor`` with the model's patch and merge sizes.

    python -m tests.support.tiny_mistral3      # build (if needed) and print the directories
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

from tests.support import tiny_vlm
from tests.support.tiny_model import cached_build, inputs_hash, tiny_model_dir

BUILDER_VERSION = 1
"""Bump when the output changes in a way the hashed inputs do not capture."""
SPECIALS = ("[IMG]", "[IMG_BREAK]", "[IMG_END]")
LLAMA3_VOCAB = 128256
IMG = LLAMA3_VOCAB
IMG_BREAK = LLAMA3_VOCAB + 1
IMG_END = LLAMA3_VOCAB + 2
MISTRAL3_PATCH = 8
MISTRAL3_MERGE = 2
MISTRAL3_EDGE = 128
PIXTRAL_PATCH = 16
PIXTRAL_EDGE = 96
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]


def _input_hash(llama: pathlib.Path, kind: str) -> str:
    return inputs_hash(
        pathlib.Path(__file__).read_bytes(),
        (llama / "tokenizer.json").read_bytes(),
        f"builder={BUILDER_VERSION} kind={kind}".encode(),
    )


def tiny_mistral3_dir() -> pathlib.Path:
    """The tiny Mistral 3 directory, building it first if the cache lacks it."""
    llama = tiny_model_dir()
    name = f"tiny-mistral3-{_input_hash(llama, 'mistral3')}"
    return cached_build(name, lambda out: _build(out, llama, "mistral3"))


def tiny_pixtral_hf_dir() -> pathlib.Path:
    """The tiny Hugging Face-format Pixtral (``llava`` + ``pixtral``) directory, building it
    first if the cache lacks it."""
    llama = tiny_model_dir()
    name = f"tiny-pixtral-hf-{_input_hash(llama, 'llava')}"
    return cached_build(name, lambda out: _build(out, llama, "llava"))


def _text_config() -> dict[str, Any]:
    return {
        "model_type": "mistral",
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "max_position_embeddings": 8192,
        "vocab_size": LLAMA3_VOCAB + len(SPECIALS),
        "rms_norm_eps": 1e-5,
        "rope_theta": 1000000000.0,
        "sliding_window": None,
    }


def _vision_config(patch: int, edge: int) -> dict[str, Any]:
    return {
        "model_type": "pixtral",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "head_dim": 32,
        "num_channels": 3,
        "image_size": edge,
        "patch_size": patch,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
    }


def _build(out: pathlib.Path, llama: pathlib.Path, kind: str) -> None:
    from tokenizers import AddedToken, Tokenizer

    tokenizer = Tokenizer.from_file(str(llama / "tokenizer.json"))
    assert tokenizer.get_vocab_size(with_added_tokens=True) == LLAMA3_VOCAB
    tokenizer.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in SPECIALS])
    assert [tokenizer.token_to_id(t) for t in SPECIALS] == [IMG, IMG_BREAK, IMG_END]
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
    if kind == "mistral3":
        patch, merge, edge = MISTRAL3_PATCH, MISTRAL3_MERGE, MISTRAL3_EDGE
        config: dict[str, Any] = {
            "architectures": ["Mistral3ForConditionalGeneration"],
            "model_type": "mistral3",
            "text_config": _text_config(),
            "vision_config": _vision_config(patch, edge),
            "image_token_index": IMG,
            "spatial_merge_size": merge,
            "multimodal_projector_bias": False,
            "projector_hidden_act": "gelu",
            "vision_feature_layer": -1,
            "dtype": "bfloat16",
        }
    else:
        patch, merge, edge = PIXTRAL_PATCH, 1, PIXTRAL_EDGE
        config = {
            "architectures": ["LlavaForConditionalGeneration"],
            "model_type": "llava",
            "text_config": _text_config(),
            "vision_config": _vision_config(patch, edge),
            "image_token_index": IMG,
            "projector_hidden_act": "gelu",
            "vision_feature_layer": -1,
            "vision_feature_select_strategy": "full",
            "dtype": "bfloat16",
        }
    tiny_vlm.write_json(out / "config.json", config)
    tiny_vlm.write_json(
        out / "preprocessor_config.json",
        {
            "image_processor_type": "PixtralImageProcessor",
            "processor_class": "PixtralProcessor",
            "do_convert_rgb": True,
            "do_normalize": True,
            "do_rescale": True,
            "do_resize": True,
            "image_mean": CLIP_MEAN,
            "image_std": CLIP_STD,
            "patch_size": {"height": patch, "width": patch},
            "resample": 3,
            "rescale_factor": 0.00392156862745098,
            "size": {"longest_edge": edge},
        },
    )
    tiny_vlm.write_json(
        out / "processor_config.json",
        {
            "processor_class": "PixtralProcessor",
            "patch_size": patch,
            "spatial_merge_size": merge,
            "image_token": "[IMG]",
            "image_break_token": "[IMG_BREAK]",
            "image_end_token": "[IMG_END]",
        },
    )


if __name__ == "__main__":
    print(tiny_mistral3_dir())
    print(tiny_pixtral_hf_dir())

"""Tiny LLaVA-1.5 and LLaVA-NeXT model directories for the frontends' tests (configs, tokenizer,
processor files and a chat template; no weights: vLLM's processor and render app read them in
process, and ours serves them in front of stand-in engines).

The tokenizer is the tiny Llama 3's (tests/support/tiny_model.py, its BOS post-processor kept)
with ``<image>`` appended as a special token (id :data:`IMAGE`, the config's
``image_token_index``). Each variant has a two-layer vision tower whose image is
:data:`IMAGE_SIZE` pixels of 14-pixel patches (a 4 x 4 grid):

- ``llava``: LLaVA-1.5 with a CLIP tower and ``CLIPImageProcessor`` (shortest edge, center
  crop), the "default" feature selection (the CLS token dropped: 16 tokens per image);
- ``llava_next``: LLaVA-NeXT with a CLIP tower and ``LlavaNextImageProcessor`` (anyres over a
  small grid of resolutions), "default" selection;
- ``llava_next_siglip``: LLaVA-NeXT with a SigLIP tower (no CLS token), square resizes without
  center crop, mean and std 0.5, the "full" selection.

The chat template is LLaVA-1.5's style (``USER: <image>\\n... ASSISTANT:``), written here.

    python -m tests.support.tiny_llava      # build (if needed) and print the directories
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

from tests.support import tiny_vlm
from tests.support.tiny_model import cached_build, inputs_hash, tiny_model_dir

BUILDER_VERSION = 1
"""Bump when the output changes in a way the hashed inputs do not capture."""
LLAMA3_VOCAB = 128256
IMAGE = LLAMA3_VOCAB
BOS = 128000
IMAGE_SIZE = 56
PATCH = 14
PINPOINTS = [[56, 112], [112, 56], [112, 112], [168, 56], [56, 168]]
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
VARIANTS = ("llava", "llava_next", "llava_next_siglip")

CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] != 'system' -%}{{ message['role'].upper() + ': ' }}{%- endif -%}"
    "{%- if message['content'] is string -%}{{ message['content'] + ' ' }}"
    "{%- else -%}"
    "{%- for part in message['content'] | selectattr('type', 'equalto', 'image') -%}"
    "{{ '<image>\\n' }}{%- endfor -%}"
    "{%- for part in message['content'] | selectattr('type', 'equalto', 'text') -%}"
    "{{ part['text'] + ' ' }}{%- endfor -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ 'ASSISTANT:' }}{%- endif -%}"
)


def _input_hash(llama: pathlib.Path, variant: str) -> str:
    return inputs_hash(
        pathlib.Path(__file__).read_bytes(),
        (llama / "tokenizer.json").read_bytes(),
        f"builder={BUILDER_VERSION} variant={variant}".encode(),
    )


def tiny_llava_dir(variant: str = "llava") -> pathlib.Path:
    """The tiny model of ``variant`` (one of :data:`VARIANTS`), built first if the cache lacks
    it."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown tiny LLaVA variant {variant!r}")
    llama = tiny_model_dir()
    name = f"tiny-{variant.replace('_', '-')}-{_input_hash(llama, variant)}"
    return cached_build(name, lambda out: _build(out, llama, variant))


def write_tokenizer(
    out: pathlib.Path,
    llama: pathlib.Path,
    specials: tuple[str, ...] = ("<image>",),
    max_length: int = 4096,
) -> None:
    """Write the tiny Llama 3's tokenizer with ``specials`` appended (ids from
    :data:`LLAMA3_VOCAB` on), its config and :data:`CHAT_TEMPLATE` into ``out``."""
    from tokenizers import AddedToken, Tokenizer

    tokenizer = Tokenizer.from_file(str(llama / "tokenizer.json"))
    assert tokenizer.get_vocab_size(with_added_tokens=True) == LLAMA3_VOCAB
    tokenizer.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in specials])
    ids = [tokenizer.token_to_id(t) for t in specials]
    assert ids == list(range(LLAMA3_VOCAB, LLAMA3_VOCAB + len(specials))), ids
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
            "eos_token": "<|end_of_text|>",
            "pad_token": "<|end_of_text|>",
            "clean_up_tokenization_spaces": False,
            "model_max_length": max_length,
            "tokenizer_class": "PreTrainedTokenizerFast",
            "chat_template": CHAT_TEMPLATE,
        },
    )
    (out / "chat_template.jinja").write_text(CHAT_TEMPLATE, encoding="utf-8")


def text_config(specials: int, max_positions: int = 4096) -> dict[str, Any]:
    """The two-layer Llama 3 text model's config, its vocabulary grown by ``specials`` tokens."""
    return {
        "model_type": "llama",
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "max_position_embeddings": max_positions,
        "vocab_size": LLAMA3_VOCAB + specials,
        "rope_theta": 500000.0,
        "bos_token_id": BOS,
        "eos_token_id": 128001,
        "dtype": "bfloat16",
    }


def vision_config(variant: str) -> dict[str, Any]:
    """The two-layer vision tower of ``variant``: SigLIP for ``*_siglip``, CLIP otherwise."""
    kind = "siglip_vision_model" if variant.endswith("siglip") else "clip_vision_model"
    return {
        "model_type": kind,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "image_size": IMAGE_SIZE,
        "patch_size": PATCH,
    }


def _preprocessor(variant: str) -> dict[str, Any]:
    if variant == "llava":
        return {
            "image_processor_type": "CLIPImageProcessor",
            "processor_class": "LlavaProcessor",
            "crop_size": {"height": IMAGE_SIZE, "width": IMAGE_SIZE},
            "size": {"shortest_edge": IMAGE_SIZE},
            "do_center_crop": True,
            "do_convert_rgb": True,
            "do_normalize": True,
            "do_rescale": True,
            "do_resize": True,
            "image_mean": CLIP_MEAN,
            "image_std": CLIP_STD,
            "resample": 3,
            "rescale_factor": 1 / 255,
        }
    common = {
        "image_processor_type": "LlavaNextImageProcessor",
        "processor_class": "LlavaNextProcessor",
        "image_grid_pinpoints": PINPOINTS,
        "do_convert_rgb": True,
        "do_normalize": True,
        "do_pad": True,
        "do_rescale": True,
        "do_resize": True,
        "rescale_factor": 1 / 255,
    }
    if variant == "llava_next":
        return {
            **common,
            "crop_size": {"height": IMAGE_SIZE, "width": IMAGE_SIZE},
            "size": {"shortest_edge": IMAGE_SIZE},
            "do_center_crop": True,
            "image_mean": CLIP_MEAN,
            "image_std": CLIP_STD,
            "resample": 3,
        }
    return {
        **common,
        "size": {"height": IMAGE_SIZE, "width": IMAGE_SIZE},
        "do_center_crop": False,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "resample": 2,
    }


def _build(out: pathlib.Path, llama: pathlib.Path, variant: str) -> None:
    write_tokenizer(out, llama)
    next_ = variant.startswith("llava_next")
    strategy = "full" if variant.endswith("siglip") else "default"
    config: dict[str, Any] = {
        "architectures": [
            "LlavaNextForConditionalGeneration" if next_ else "LlavaForConditionalGeneration"
        ],
        "model_type": "llava_next" if next_ else "llava",
        "text_config": text_config(1),
        "vision_config": vision_config(variant),
        "image_token_index": IMAGE,
        "vision_feature_select_strategy": strategy,
        "vision_feature_layer": -2,
        "projector_hidden_act": "gelu",
        "dtype": "bfloat16",
    }
    if next_:
        config["image_grid_pinpoints"] = PINPOINTS
    tiny_vlm.write_json(out / "config.json", config)
    tiny_vlm.write_json(out / "preprocessor_config.json", _preprocessor(variant))
    tiny_vlm.write_json(
        out / "processor_config.json",
        {
            "processor_class": "LlavaNextProcessor" if next_ else "LlavaProcessor",
            "image_token": "<image>",
            "patch_size": PATCH,
            "vision_feature_select_strategy": strategy,
            "num_additional_image_tokens": 0 if variant.endswith("siglip") else 1,
        },
    )


if __name__ == "__main__":
    for v in VARIANTS:
        print(tiny_llava_dir(v))

"""A tiny, reproducible Qwen2-VL checkpoint that the real vLLM CPU engine loads.

Text side: the tiny Llama 3's tokenizer (tests/support/tiny_model.py) with Qwen2-VL's 13 special
tokens appended under their real names (ids 128256..128268), no BOS added, Qwen2-VL-Instruct's
chat template (tests/fixtures/chat-templates/qwen2_vl.jinja). Network: a two-layer M-RoPE text
model (hidden 128, 4 heads / 2 KV heads, head_dim 32, the CPU attention minimum) and a two-layer
vision tower (width 64, patch 14, temporal patch 2, 2x2 merge), random weights from a fixed seed
(each tensor from its own generator, so the bytes do not depend on transformers' init code); the
lm_head is untied (with tied embeddings the output ignored the image). Images are resized to at
most 128*28*28 pixels (<= 128 ``<|image_pad|>`` per image).

vLLM's Qwen2-VL code and transformers' processor import torchvision, whose PyPI wheels do not
load next to torch+cpu: the engine, vLLM's frontend and transformers references run with
:data:`TORCHVISION_SHIM` on ``PYTHONPATH`` (tests/fixtures/torchvision_shim). Our frontend needs
nothing. The builder itself runs in a subprocess (it needs torch and transformers), once; the
checkpoint is cached under ``$VLLM_FRONTEND_TEST_CACHE`` like the tiny Llama.

    python -m tests.support.tiny_vlm      # build (if needed) and print the directory
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
import zlib
from collections.abc import Callable
from typing import Any

from tests.support.fixtures import CHAT_TEMPLATES, FIXTURES
from tests.support.tiny_model import cached_build, inputs_hash, run_builder, tiny_model_dir

TORCHVISION_SHIM = FIXTURES / "torchvision_shim"
"""Directory to put on ``PYTHONPATH`` of processes that import vLLM's Qwen2-VL code."""
TORCHVISION_STUB = FIXTURES / "torchvision_stub"
"""The torchvision stand-in transformers' video processors run on (after the shim)."""
VLM_PYTHONPATH = os.pathsep.join([str(TORCHVISION_SHIM), str(TORCHVISION_STUB)])
"""``PYTHONPATH`` for vLLM's processes serving the tiny Qwen2-VL with video: the shim first."""
CHAT_TEMPLATE_PATH = CHAT_TEMPLATES / "qwen2_vl.jinja"

# Qwen2-VL's special tokens in Qwen2-VL's order (151644.. there), appended to Llama 3's 128256.
QWEN2_VL_SPECIALS = (
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
LLAMA3_VOCAB = 128256
IM_END = LLAMA3_VOCAB + 1
IMAGE_PAD = LLAMA3_VOCAB + QWEN2_VL_SPECIALS.index("<|image_pad|>")
VIDEO_PAD = LLAMA3_VOCAB + QWEN2_VL_SPECIALS.index("<|video_pad|>")
VISION_START = LLAMA3_VOCAB + QWEN2_VL_SPECIALS.index("<|vision_start|>")
VISION_END = LLAMA3_VOCAB + QWEN2_VL_SPECIALS.index("<|vision_end|>")
BOS = 128000
END_OF_TEXT = 128001
MIN_PIXELS = 56 * 56
MAX_PIXELS = 128 * 28 * 28
SEED = 0
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]

# Bump when the output changes in a way the hashed inputs do not capture.
BUILDER_VERSION = 1


def shim_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) with the torchvision shim first on ``PYTHONPATH``."""
    out = dict(os.environ if env is None else env)
    out["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(TORCHVISION_SHIM), out.get("PYTHONPATH")) if p
    )
    return out


def _input_hash(llama: pathlib.Path) -> str:
    return inputs_hash(
        pathlib.Path(__file__).read_bytes(),
        (llama / "tokenizer.json").read_bytes(),
        CHAT_TEMPLATE_PATH.read_bytes(),
        f"builder={BUILDER_VERSION}".encode(),
    )


def tiny_vlm_dir() -> pathlib.Path:
    """The tiny Qwen2-VL checkpoint's directory, building it first if the cache lacks it."""
    llama = tiny_model_dir()

    def build(staging: pathlib.Path) -> None:
        run_builder("tests.support.tiny_vlm", staging, str(llama))

    return cached_build(f"tiny-qwen2-vl-{_input_hash(llama)}", build)


def write_json(path: pathlib.Path, value: Any) -> None:
    """``value`` as indented JSON (UTF-8, a final newline)."""
    path.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _build_tokenizer(llama: pathlib.Path, out: pathlib.Path, template: str) -> None:
    from tokenizers import AddedToken, Tokenizer, processors

    tokenizer = Tokenizer.from_file(str(llama / "tokenizer.json"))
    assert tokenizer.get_vocab_size(with_added_tokens=True) == LLAMA3_VOCAB
    tokenizer.add_special_tokens(
        [AddedToken(t, normalized=False, special=True) for t in QWEN2_VL_SPECIALS]
    )
    ids = [tokenizer.token_to_id(t) for t in QWEN2_VL_SPECIALS]
    assert ids == list(range(LLAMA3_VOCAB, LLAMA3_VOCAB + len(QWEN2_VL_SPECIALS))), ids
    # No BOS: Qwen2-VL's tokenizer adds none.
    tokenizer.post_processor = processors.ByteLevel(
        add_prefix_space=True, trim_offsets=False, use_regex=True
    )
    tokenizer.save(str(out / "tokenizer.json"))
    added = {
        str(t["id"]): {
            k: t[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word", "special")
        }
        for t in json.loads((out / "tokenizer.json").read_text())["added_tokens"]
    }
    config = {
        "added_tokens_decoder": added,
        "additional_special_tokens": list(QWEN2_VL_SPECIALS),
        "bos_token": None,
        "chat_template": template,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 4096,
        "pad_token": "<|end_of_text|>",
        "padding_side": "left",
        "split_special_tokens": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }
    write_json(out / "tokenizer_config.json", config)
    write_json(
        out / "special_tokens_map.json",
        {
            "additional_special_tokens": list(QWEN2_VL_SPECIALS),
            "eos_token": "<|im_end|>",
            "pad_token": "<|end_of_text|>",
        },
    )
    (out / "chat_template.jinja").write_text(template, encoding="utf-8")


def _checkpoint_name(name: str) -> str:
    # transformers 5 parameter names -> the names save_pretrained writes.
    for new, old in (("model.language_model.", "model."), ("model.visual.", "visual.")):
        if name.startswith(new):
            return old + name[len(new) :]
    return name


def randomize(model: Any, checkpoint_name: Callable[[str], str] = lambda name: name) -> None:
    """Give every parameter of ``model`` (a torch module) its random value: token embeddings
    N(0, 1), the lm_head N(0, 0.35^2), other matrices N(0, 1/fan_in), norm weights 1, biases 0,
    each from its own generator seeded by :data:`SEED` and the tensor's name in the checkpoint
    (``checkpoint_name`` of the parameter's name), so the bytes do not depend on transformers'
    init code."""
    import torch

    with torch.no_grad():
        for name, param in model.named_parameters():
            key = checkpoint_name(name)
            gen = torch.Generator().manual_seed(SEED * 1_000_003 + zlib.crc32(key.encode()))
            if param.dim() == 1:
                param.copy_(torch.ones_like(param) if key.endswith("weight") else 0 * param)
            elif key.endswith("embed_tokens.weight"):
                param.copy_(torch.randn(param.shape, generator=gen))
            elif key == "lm_head.weight":
                param.copy_(torch.randn(param.shape, generator=gen) * 0.35)
            else:
                param.copy_(torch.randn(param.shape, generator=gen) / param[0].numel() ** 0.5)


def _build(out: pathlib.Path, llama: pathlib.Path) -> None:
    """Write the checkpoint (runs in a subprocess: imports torch and transformers)."""
    import torch
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    out.mkdir(parents=True, exist_ok=True)
    _build_tokenizer(llama, out, CHAT_TEMPLATE_PATH.read_text(encoding="utf-8"))
    text = {
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 4096,
        "bos_token_id": BOS,
        "pad_token_id": END_OF_TEXT,
        "tie_word_embeddings": False,
        "vocab_size": LLAMA3_VOCAB + len(QWEN2_VL_SPECIALS),
        "rms_norm_eps": 1e-6,
        # head_dim 32: 16 rotary frequencies split over (t, h, w)
        "rope_parameters": {
            "rope_type": "default",
            "mrope_section": [4, 6, 6],
            "rope_theta": 1000000.0,
        },
        "eos_token_id": IM_END,
        "dtype": "bfloat16",
    }
    vision = {
        "depth": 2,
        "embed_dim": 64,
        "hidden_size": 128,
        "num_heads": 2,
        "mlp_ratio": 4,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "in_channels": 3,
        "hidden_act": "quick_gelu",
    }
    config = Qwen2VLConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=IMAGE_PAD,
        video_token_id=VIDEO_PAD,
        vision_start_token_id=VISION_START,
        vision_end_token_id=VISION_END,
        tie_word_embeddings=False,
        dtype="bfloat16",
    )
    torch.manual_seed(SEED)
    model = Qwen2VLForConditionalGeneration(config)
    randomize(model, _checkpoint_name)
    model.to(torch.bfloat16).save_pretrained(str(out))
    os.chmod(out / "model.safetensors", 0o644)
    write_json(
        out / "generation_config.json",
        {
            "bos_token_id": BOS,
            "do_sample": False,
            "eos_token_id": [IM_END, END_OF_TEXT],
            "pad_token_id": END_OF_TEXT,
        },
    )
    write_json(
        out / "preprocessor_config.json",
        {
            "min_pixels": MIN_PIXELS,
            "max_pixels": MAX_PIXELS,
            "patch_size": 14,
            "temporal_patch_size": 2,
            "merge_size": 2,
            "image_mean": CLIP_MEAN,
            "image_std": CLIP_STD,
            "image_processor_type": "Qwen2VLImageProcessor",
            "processor_class": "Qwen2VLProcessor",
        },
    )


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--build":
        _build(pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3]))
    else:
        print(tiny_vlm_dir())

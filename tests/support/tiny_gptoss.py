"""A tiny gpt-oss model directory: the real gpt-oss tokenizer and a two-layer random-weight
GptOssForCausalLM (bf16, unquantized experts) that vLLM's CPU engine runs.

gpt-oss checkpoints ship a Hugging Face ``tokenizer.json`` of the ``o200k_harmony`` encoding:
tiktoken's ``o200k_base`` byte-pair ranks (ids 0-199997) and Harmony's special tokens from
199998 up (``<|start|>``, ``<|channel|>``, ``<|message|>``, ``<|end|>``, ``<|return|>``,
``<|call|>``, ``<|constrain|>`` and reserved ones), with ``model_type`` ``gpt_oss`` in
``config.json`` and ``<|return|>``, ``<|endoftext|>`` and ``<|call|>`` as the generation
config's EOS ids. The network is cheap and deterministic (fixed seed), its text gibberish. This
builder takes the ranks and special tokens from the installed
``openai_harmony`` (oss-harmony embeds the vocabulary: no download), so the directory's tokenizer
encodes and decodes as Harmony does (``tests/chat/test_harmony_model.py`` checks it). Id 200018
is named ``<|endofprompt|>`` as in ``o200k_base``; Harmony's extra id 201088 is left out (the
model's vocabulary has 201088 ids).

It is built once into ``$VLLM_FRONTEND_TEST_CACHE`` under a name hashed from its inputs.

    python -m tests.support.tiny_gptoss      # build (if needed) and print the directory
"""

from __future__ import annotations

import hashlib
import pathlib
import sys
from typing import Any

import numpy as np

from tests.support.tiny_model import (
    _bpe_merges,
    _byte_level_alphabet,
    _write_bf16_safetensors,
    _write_json,
    cached_build,
)

NUM_BASE_TOKENS = 199998
VOCAB_SIZE = 201088
EOS_TOKEN_IDS = (200002, 199999, 200012)  # <|return|>, <|endoftext|>, <|call|>

# o200k_base's pre-tokenizer split regex (tiktoken_ext/openai_public.py, ``o200k_base``).
O200K_SPLIT_REGEX = "|".join(
    [
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"\p{N}{1,3}",
        r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
        r"\s*[\r\n]+",
        r"\s+(?!\S)",
        r"\s+",
    ]
)

HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, EXPERTS, INTERMEDIATE = 64, 2, 2, 1, 32, 4, 64
SEED = 20250805  # gpt-oss's release date
LOGIT_STD = 6.0  # as the tiny Llama: a wide logit spread keeps greedy decoding stable

BUILDER_VERSION = 2


def _encoding() -> Any:
    from openai_harmony import HarmonyEncodingName, load_harmony_encoding

    return load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)


def special_tokens() -> list[tuple[int, str]]:
    """(id, text) of the special tokens, in id order (199998-201087)."""
    enc = _encoding()
    named = {enc.encode(t, allowed_special="all")[0]: t for t in enc.special_tokens_set}
    named[200018] = "<|endofprompt|>"
    return [(i, named[i]) for i in range(NUM_BASE_TOKENS, VOCAB_SIZE)]


def _ranks() -> dict[bytes, int]:
    inner = _encoding()._inner  # the Rust encoding: decode_bytes gives a token's bytes
    return {bytes(inner.decode_bytes([i])): i for i in range(NUM_BASE_TOKENS)}


def _input_hash() -> str:
    import openai_harmony

    digest = hashlib.sha256()
    for part in (
        pathlib.Path(__file__).read_bytes(),
        pathlib.Path(openai_harmony.__file__).read_bytes(),
        f"builder={BUILDER_VERSION} numpy={np.__version__}".encode(),
    ):
        digest.update(hashlib.sha256(part).digest())
    return digest.hexdigest()[:16]


def tiny_gptoss_dir() -> pathlib.Path:
    """The directory, building it first if the cache lacks it."""
    return cached_build(f"tiny-gptoss-{_input_hash()}", build)


def build(out: pathlib.Path) -> None:
    """Write tokenizer, tokenizer config and model configs into ``out``."""
    ranks = _ranks()
    alphabet = _byte_level_alphabet()

    def show(token: bytes) -> str:
        return "".join(alphabet[b] for b in token)

    specials = special_tokens()
    added = [
        {
            "id": i,
            "content": text,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for i, text in specials
    ]
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {
                    "type": "Split",
                    "pattern": {"Regex": O200K_SPLIT_REGEX},
                    "behavior": "Isolated",
                    "invert": False,
                },
                {
                    "type": "ByteLevel",
                    "add_prefix_space": False,
                    "trim_offsets": True,
                    "use_regex": False,
                },
            ],
        },
        "post_processor": {
            "type": "ByteLevel",
            "add_prefix_space": True,
            "trim_offsets": False,
            "use_regex": True,
        },
        "decoder": {
            "type": "ByteLevel",
            "add_prefix_space": True,
            "trim_offsets": True,
            "use_regex": True,
        },
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": True,
            "vocab": {show(t): r for t, r in sorted(ranks.items(), key=lambda kv: kv[1])},
            "merges": [[show(a), show(b)] for a, b in _bpe_merges(ranks)],
        },
    }
    _write_json(out / "tokenizer.json", tokenizer, indent=None)
    _write_json(
        out / "tokenizer_config.json",
        {
            "added_tokens_decoder": {
                str(i): {
                    "content": text,
                    "lstrip": False,
                    "normalized": False,
                    "rstrip": False,
                    "single_word": False,
                    "special": True,
                }
                for i, text in specials
            },
            "bos_token": "<|startoftext|>",
            "eos_token": "<|return|>",
            "pad_token": "<|endoftext|>",
            "clean_up_tokenization_spaces": False,
            "model_input_names": ["input_ids", "attention_mask"],
            "model_max_length": 131072,
            "tokenizer_class": "PreTrainedTokenizerFast",
        },
    )
    _write_json(
        out / "special_tokens_map.json",
        {"bos_token": "<|startoftext|>", "eos_token": "<|return|>", "pad_token": "<|endoftext|>"},
    )
    _write_json(out / "config.json", _config())
    _write_bf16_safetensors(out / "model.safetensors", _weights())
    _write_json(
        out / "generation_config.json",
        {
            "bos_token_id": 199998,
            "eos_token_id": list(EOS_TOKEN_IDS),
            "pad_token_id": 199999,
            "do_sample": True,
            "transformers_version": "4.55.0",
        },
    )


def _config() -> dict[str, Any]:
    # gpt-oss's config.json, scaled down (as transformers' GptOssConfig writes it).
    return {
        "architectures": ["GptOssForCausalLM"],
        "model_type": "gpt_oss",
        "attention_bias": True,
        "attention_dropout": 0.0,
        "dtype": "bfloat16",
        "eos_token_id": 200002,
        "pad_token_id": 199999,
        "experts_per_token": 2,
        "num_experts_per_tok": 2,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "hidden_size": HIDDEN,
        "initializer_range": 0.02,
        "intermediate_size": INTERMEDIATE,
        "layer_types": ["sliding_attention", "full_attention"],
        "max_position_embeddings": 4096,
        "num_attention_heads": HEADS,
        "num_hidden_layers": LAYERS,
        "num_key_value_heads": KV_HEADS,
        "num_local_experts": EXPERTS,
        "output_router_logits": False,
        "rms_norm_eps": 1e-05,
        "rope_parameters": {
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "factor": 32.0,
            "original_max_position_embeddings": 4096,
            "rope_theta": 150000,
            "rope_type": "yarn",
            "truncate": False,
        },
        "router_aux_loss_coef": 0.001,
        "sliding_window": 128,
        "swiglu_alpha": 1.702,
        "swiglu_limit": 7.0,
        "tie_word_embeddings": False,
        "use_cache": True,
        "vocab_size": VOCAB_SIZE,
        "transformers_version": "5.19.0",
    }


def _weights() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(SEED)

    def normal(shape: tuple[int, ...], std: float) -> np.ndarray:
        return rng.standard_normal(shape, dtype=np.float32) * np.float32(std)

    h, q, kv, e, i = HIDDEN, HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, EXPERTS, INTERMEDIATE
    out = {"model.embed_tokens.weight": normal((VOCAB_SIZE, h), 1.0)}
    for layer in range(LAYERS):
        p = f"model.layers.{layer}."
        out[p + "input_layernorm.weight"] = np.ones(h, dtype=np.float32)
        out[p + "post_attention_layernorm.weight"] = np.ones(h, dtype=np.float32)
        for name, rows in (("q", q), ("k", kv), ("v", kv)):
            out[p + f"self_attn.{name}_proj.weight"] = normal((rows, h), h**-0.5)
            out[p + f"self_attn.{name}_proj.bias"] = normal((rows,), 0.02)
        out[p + "self_attn.o_proj.weight"] = normal((h, q), q**-0.5)
        out[p + "self_attn.o_proj.bias"] = normal((h,), 0.02)
        out[p + "self_attn.sinks"] = normal((HEADS,), 1.0)
        out[p + "mlp.router.weight"] = normal((e, h), h**-0.5)
        out[p + "mlp.router.bias"] = normal((e,), 0.02)
        out[p + "mlp.experts.gate_up_proj"] = normal((e, h, 2 * i), h**-0.5)
        out[p + "mlp.experts.gate_up_proj_bias"] = normal((e, 2 * i), 0.02)
        out[p + "mlp.experts.down_proj"] = normal((e, i, h), i**-0.5)
        out[p + "mlp.experts.down_proj_bias"] = normal((e, h), 0.02)
    out["model.norm.weight"] = np.ones(h, dtype=np.float32)
    out["lm_head.weight"] = normal((VOCAB_SIZE, h), LOGIT_STD * h**-0.5)
    return out


if __name__ == "__main__":
    print(tiny_gptoss_dir())
    sys.exit(0)

"""A tiny gpt-oss-like model directory for frontend tests (no weights: the mock engine serves it).

gpt-oss checkpoints ship a Hugging Face ``tokenizer.json`` of the ``o200k_harmony`` encoding:
tiktoken's ``o200k_base`` byte-pair ranks (ids 0-199997) and Harmony's special tokens from
199998 up (``<|start|>``, ``<|channel|>``, ``<|message|>``, ``<|end|>``, ``<|return|>``,
``<|call|>``, ``<|constrain|>`` and reserved ones), with ``model_type`` ``gpt_oss`` in
``config.json`` and ``<|return|>``, ``<|endoftext|>`` and ``<|call|>`` as the generation
config's EOS ids. This builder takes the ranks and special tokens from the installed
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
import shutil
import sys
import tempfile
from typing import Any

from tests.support.tiny_model import _bpe_merges, _byte_level_alphabet, _write_json, cache_root

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

BUILDER_VERSION = 1


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
        f"builder={BUILDER_VERSION}".encode(),
    ):
        digest.update(hashlib.sha256(part).digest())
    return digest.hexdigest()[:16]


def tiny_gptoss_dir() -> pathlib.Path:
    """The directory, building it first if the cache lacks it."""
    target = cache_root() / f"tiny-gptoss-{_input_hash()}"
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = pathlib.Path(tempfile.mkdtemp(prefix=".building-", dir=target.parent))
    try:
        build(staging)
        staging.chmod(0o755)
        try:
            staging.rename(target)
        except OSError:
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


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
    _write_json(
        out / "config.json",
        {
            "architectures": ["GptOssForCausalLM"],
            "model_type": "gpt_oss",
            "vocab_size": VOCAB_SIZE,
            "hidden_size": 64,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 32,
            "num_local_experts": 4,
            "num_experts_per_tok": 2,
            "experts_per_token": 2,
            "layer_types": ["sliding_attention", "full_attention"],
            "sliding_window": 128,
            "max_position_embeddings": 4096,
            "rope_theta": 150000,
            "rms_norm_eps": 1e-05,
            "tie_word_embeddings": False,
            "eos_token_id": 200002,
            "pad_token_id": 199999,
            "torch_dtype": "bfloat16",
            "transformers_version": "4.55.0",
        },
    )
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


if __name__ == "__main__":
    print(tiny_gptoss_dir())
    sys.exit(0)

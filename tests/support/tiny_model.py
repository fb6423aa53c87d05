"""A tiny, reproducible HF-format Llama 3 checkpoint that real vLLM engines can load.

The tokenizer is the real Llama 3 one (the tiktoken file shipped in the `llama-models` package,
converted to a Hugging Face `tokenizer.json`), so tokenization, special tokens, chat templates and
detokenization behave exactly as with a real Llama 3.1 model. The network is a two-layer
LlamaForCausalLM with random weights from a fixed seed: its text is gibberish, but it is cheap to
run on a CPU and fully deterministic.

The checkpoint is built once and cached under `$VLLM_FRONTEND_TEST_CACHE` (default
`<repo>/.cache/`) in a directory named after a hash of everything that shapes it.

    python -m tests.support.tiny_model      # build (if needed) and print the directory
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np

from tests.support.fixtures import CHAT_TEMPLATES

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
CHAT_TEMPLATE_PATH = CHAT_TEMPLATES / "tool_chat_template_llama3.1_json.jinja"

# Llama 3's pre-tokenizer split regex (llama_models/llama3/tokenizer.py, `pat_str`).
LLAMA3_SPLIT_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

NUM_BASE_TOKENS = 128000
NUM_SPECIAL_TOKENS = 256
VOCAB_SIZE = NUM_BASE_TOKENS + NUM_SPECIAL_TOKENS
BOS_TOKEN = "<|begin_of_text|>"
EOS_TOKEN = "<|eot_id|>"
BOS_TOKEN_ID = 128000
EOS_TOKEN_IDS = (128001, 128008, 128009)  # <|end_of_text|>, <|eom_id|>, <|eot_id|>

# Shapes of the network. vLLM's CPU attention needs a head size of at least 32.
HIDDEN_SIZE = 128
NUM_LAYERS = 2
NUM_HEADS = 4
NUM_KV_HEADS = 2
HEAD_DIM = HIDDEN_SIZE // NUM_HEADS
INTERMEDIATE_SIZE = 256
MAX_POSITION_EMBEDDINGS = 2048
SEED = 20240723  # Llama 3.1's release date

# Standard deviation of the lm_head weights: the final RMSNorm makes hidden states unit-scale, so
# logits get a spread of about LOGIT_STD. A wide spread keeps the gap between the best and the
# second-best token well above bfloat16 rounding, so greedy decoding is stable across batchings.
LOGIT_STD = 6.0

# Bump when the builder's output changes in a way its inputs do not capture.
BUILDER_VERSION = 1


def special_token_names() -> list[str]:
    """The 256 Llama 3 special tokens in id order (128000-128255), named as `llama_models` does."""
    named = [
        "<|begin_of_text|>",
        "<|end_of_text|>",
        "<|reserved_special_token_0|>",
        "<|reserved_special_token_1|>",
        "<|finetune_right_pad_id|>",
        "<|step_id|>",
        "<|start_header_id|>",
        "<|end_header_id|>",
        "<|eom_id|>",
        "<|eot_id|>",
        "<|python_tag|>",
        "<|image|>",
    ]
    reserved = [
        f"<|reserved_special_token_{n}|>" for n in range(2, 2 + NUM_SPECIAL_TOKENS - len(named))
    ]
    return named + reserved


def llama3_tiktoken_path() -> pathlib.Path:
    """The Llama 3 tiktoken BPE file shipped inside the installed `llama-models` package."""
    spec = importlib.util.find_spec("llama_models")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the test model needs the `llama-models` package (pip install it)")
    path = pathlib.Path(next(iter(spec.submodule_search_locations))) / "llama3" / "tokenizer.model"
    if not path.is_file():
        raise RuntimeError(f"llama-models is installed but has no {path}")
    return path


def cache_root() -> pathlib.Path:
    """Test artefacts kept between runs: under `$VLLM_FRONTEND_TEST_CACHE` or `<repo>/.cache`."""
    configured = os.environ.get("VLLM_FRONTEND_TEST_CACHE")
    return pathlib.Path(configured) if configured else REPO_ROOT / ".cache"


def inputs_hash(*parts: bytes) -> str:
    """The 16-hex-digit key of a cached build made from ``parts`` (each hashed on its own)."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(hashlib.sha256(part).digest())
    return digest.hexdigest()[:16]


def run_builder(module: str, staging: pathlib.Path, *args: str) -> None:
    """Run ``python -m <module> --build <staging> <args>`` offline from the repository root
    (builders that import torch and transformers run apart from the tests)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    subprocess.run(
        [sys.executable, "-m", module, "--build", str(staging), *args],
        check=True,
        env=env,
        cwd=REPO_ROOT,
    )


def _input_hash() -> str:
    return inputs_hash(
        pathlib.Path(__file__).read_bytes(),
        llama3_tiktoken_path().read_bytes(),
        CHAT_TEMPLATE_PATH.read_bytes(),
        f"numpy={np.__version__}".encode(),
        f"builder={BUILDER_VERSION}".encode(),
    )


def tiny_model_dir() -> pathlib.Path:
    """The tiny Llama 3 checkpoint's directory, building it first if the cache lacks it."""
    return cached_build(f"tiny-llama3-{_input_hash()}", build_tiny_model)


def cached_build(
    name: str, build: Callable[[pathlib.Path], None], marker: str = "config.json"
) -> pathlib.Path:
    """``cache_root() / name``, made by ``build(staging_dir)`` first if the cache lacks it (a
    built directory has the file ``marker``)."""
    target = cache_root() / name
    if (target / marker).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = pathlib.Path(tempfile.mkdtemp(prefix=".building-", dir=target.parent))
    try:
        build(staging)
        staging.chmod(0o755)
        try:
            staging.rename(target)  # atomic: concurrent builders race harmlessly
        except OSError:
            if not (target / marker).is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def build_tiny_model(out_dir: pathlib.Path) -> None:
    """Write the complete checkpoint (tokenizer, configs, weights) into `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    ranks = _load_tiktoken_ranks(llama3_tiktoken_path())
    _write_json(out_dir / "tokenizer.json", _tokenizer_json(ranks), indent=None)
    _write_json(out_dir / "tokenizer_config.json", _tokenizer_config())
    _write_json(out_dir / "special_tokens_map.json", _special_tokens_map())
    _write_json(out_dir / "config.json", _model_config())
    _write_json(out_dir / "generation_config.json", _generation_config())
    _write_bf16_safetensors(out_dir / "model.safetensors", _random_weights())


# --- tokenizer --------------------------------------------------------------------------------


def _load_tiktoken_ranks(path: pathlib.Path) -> dict[bytes, int]:
    ranks: dict[bytes, int] = {}
    for line in path.read_text(encoding="ascii").splitlines():
        if line.strip():
            token_b64, rank = line.split()
            ranks[base64.b64decode(token_b64)] = int(rank)
    if len(ranks) != NUM_BASE_TOKENS or sorted(ranks.values()) != list(range(NUM_BASE_TOKENS)):
        raise RuntimeError(f"{path} is not the 128000-token Llama 3 BPE file")
    return ranks


def _byte_level_alphabet() -> list[str]:
    # GPT-2's byte-level BPE shows every byte as a printable character: printable Latin-1 bytes
    # stand for themselves, the rest are moved to code points from 256 upwards in byte order.
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    alphabet: list[str] = [""] * 256
    shifted = 0
    for byte in range(256):
        if byte in printable:
            alphabet[byte] = chr(byte)
        else:
            alphabet[byte] = chr(256 + shifted)
            shifted += 1
    return alphabet


def _bpe_merges(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    # tiktoken merges, among adjacent parts, the pair whose concatenation has the lowest rank. A
    # Hugging Face BPE model does the same when each pair (left, right) whose concatenation is a
    # token is listed in the merge order of that token's rank.
    merges: list[tuple[int, int, int, bytes, bytes]] = []
    for token, rank in ranks.items():
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            left_rank, right_rank = ranks.get(left), ranks.get(right)
            if left_rank is not None and right_rank is not None:
                merges.append((rank, left_rank, right_rank, left, right))
    merges.sort()
    return [(left, right) for _, _, _, left, right in merges]


def _tokenizer_json(ranks: dict[bytes, int]) -> dict[str, Any]:
    alphabet = _byte_level_alphabet()

    def show(token: bytes) -> str:
        return "".join(alphabet[b] for b in token)

    vocab = {show(token): rank for token, rank in sorted(ranks.items(), key=lambda item: item[1])}
    merges = [[show(left), show(right)] for left, right in _bpe_merges(ranks)]
    added_tokens = [
        {
            "id": NUM_BASE_TOKENS + index,
            "content": name,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for index, name in enumerate(special_token_names())
    ]
    bos = {"id": BOS_TOKEN, "ids": [BOS_TOKEN_ID], "tokens": [BOS_TOKEN]}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added_tokens,
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {
                    "type": "Split",
                    "pattern": {"Regex": LLAMA3_SPLIT_REGEX},
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
            "type": "Sequence",
            "processors": [
                {
                    "type": "ByteLevel",
                    "add_prefix_space": True,
                    "trim_offsets": False,
                    "use_regex": True,
                },
                {
                    "type": "TemplateProcessing",
                    "single": [
                        {"SpecialToken": {"id": BOS_TOKEN, "type_id": 0}},
                        {"Sequence": {"id": "A", "type_id": 0}},
                    ],
                    "pair": [
                        {"SpecialToken": {"id": BOS_TOKEN, "type_id": 0}},
                        {"Sequence": {"id": "A", "type_id": 0}},
                        {"SpecialToken": {"id": BOS_TOKEN, "type_id": 1}},
                        {"Sequence": {"id": "B", "type_id": 1}},
                    ],
                    "special_tokens": {BOS_TOKEN: bos},
                },
            ],
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
            # tiktoken looks a whole pre-token up before merging; so does BPE with ignore_merges.
            "ignore_merges": True,
            "vocab": vocab,
            "merges": merges,
        },
    }


def _tokenizer_config() -> dict[str, Any]:
    # As in Meta's Llama 3.1 Instruct checkpoints, except clean_up_tokenization_spaces: Meta sets
    # it, transformers 5 ignores it for BPE tokenizers (with a warning) and so does vLLM.
    return {
        "added_tokens_decoder": {
            str(NUM_BASE_TOKENS + index): {
                "content": name,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": True,
            }
            for index, name in enumerate(special_token_names())
        },
        "bos_token": BOS_TOKEN,
        "eos_token": EOS_TOKEN,
        "clean_up_tokenization_spaces": False,
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": MAX_POSITION_EMBEDDINGS,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": CHAT_TEMPLATE_PATH.read_text(encoding="utf-8"),
    }


def _special_tokens_map() -> dict[str, Any]:
    return {"bos_token": BOS_TOKEN, "eos_token": EOS_TOKEN}


# --- model ------------------------------------------------------------------------------------


def _model_config() -> dict[str, Any]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": VOCAB_SIZE,
        "hidden_size": HIDDEN_SIZE,
        "intermediate_size": INTERMEDIATE_SIZE,
        "num_hidden_layers": NUM_LAYERS,
        "num_attention_heads": NUM_HEADS,
        "num_key_value_heads": NUM_KV_HEADS,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITION_EMBEDDINGS,
        "rms_norm_eps": 1e-05,
        "rope_theta": 500000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "initializer_range": 0.02,
        "pretraining_tp": 1,
        "tie_word_embeddings": False,
        "use_cache": True,
        "bos_token_id": BOS_TOKEN_ID,
        "eos_token_id": list(EOS_TOKEN_IDS),
        # vLLM's CPU backend runs bfloat16 anyway (it downcasts float32 checkpoints).
        "torch_dtype": "bfloat16",
        # transformers 5 re-checks the split regex of local tokenizers whose config lacks this.
        "transformers_version": "4.43.0",
    }


def _generation_config() -> dict[str, Any]:
    # As in Meta's Llama 3.1 Instruct checkpoints: these become the default sampling parameters.
    return {
        "bos_token_id": BOS_TOKEN_ID,
        "eos_token_id": list(EOS_TOKEN_IDS),
        "do_sample": True,
        "temperature": 0.6,
        "top_p": 0.9,
        "transformers_version": "4.43.0",
    }


def _random_weights() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(SEED)

    def normal(shape: tuple[int, ...], std: float) -> np.ndarray:
        return rng.standard_normal(shape, dtype=np.float32) * np.float32(std)

    h, q, kv, i = HIDDEN_SIZE, NUM_HEADS * HEAD_DIM, NUM_KV_HEADS * HEAD_DIM, INTERMEDIATE_SIZE
    # Unit-scale embeddings and 1/sqrt(fan_in) projections keep every layer's contribution of the
    # same order as its input, so outputs depend on the whole context.
    weights = {"model.embed_tokens.weight": normal((VOCAB_SIZE, h), 1.0)}
    for layer in range(NUM_LAYERS):
        prefix = f"model.layers.{layer}."
        weights[prefix + "input_layernorm.weight"] = np.ones(h, dtype=np.float32)
        weights[prefix + "self_attn.q_proj.weight"] = normal((q, h), h**-0.5)
        weights[prefix + "self_attn.k_proj.weight"] = normal((kv, h), h**-0.5)
        weights[prefix + "self_attn.v_proj.weight"] = normal((kv, h), h**-0.5)
        weights[prefix + "self_attn.o_proj.weight"] = normal((h, q), q**-0.5)
        weights[prefix + "post_attention_layernorm.weight"] = np.ones(h, dtype=np.float32)
        weights[prefix + "mlp.gate_proj.weight"] = normal((i, h), h**-0.5)
        weights[prefix + "mlp.up_proj.weight"] = normal((i, h), h**-0.5)
        weights[prefix + "mlp.down_proj.weight"] = normal((h, i), i**-0.5)
    weights["model.norm.weight"] = np.ones(h, dtype=np.float32)
    weights["lm_head.weight"] = normal((VOCAB_SIZE, h), LOGIT_STD * h**-0.5)
    return weights


def _to_bf16_bits(array: np.ndarray) -> np.ndarray:
    # Round float32 to the nearest bfloat16 (ties to even) and keep the upper 16 bits.
    bits = np.ascontiguousarray(array, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def _write_bf16_safetensors(path: pathlib.Path, tensors: dict[str, np.ndarray]) -> None:
    # numpy has no bfloat16, and safetensors' numpy API needs one: the raw bits, written directly.
    write_safetensors(
        path, {n: ("BF16", _to_bf16_bits(t).astype("<u2")) for n, t in tensors.items()}
    )


def write_safetensors(path: pathlib.Path, tensors: dict[str, tuple[str, np.ndarray]]) -> None:
    """Write ``{name: (safetensors dtype, little-endian array)}`` as a safetensors file: u64
    header length, JSON header, then the raw tensor bytes in name order."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    payloads: list[bytes] = []
    offset = 0
    for name in sorted(tensors):
        dtype, array = tensors[name]
        data = array.tobytes()
        header[name] = {
            "dtype": dtype,
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        payloads.append(data)
        offset += len(data)
    header_bytes = json.dumps(header, separators=(",", ":")).encode()
    header_bytes += b" " * (-len(header_bytes) % 8)
    with path.open("wb") as f:
        f.write(len(header_bytes).to_bytes(8, "little"))
        f.write(header_bytes)
        for data in payloads:
            f.write(data)


def _write_json(path: pathlib.Path, value: dict[str, Any], *, indent: int | None = 2) -> None:
    text = json.dumps(value, indent=indent, ensure_ascii=False)
    path.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    print(tiny_model_dir())
    sys.exit(0)

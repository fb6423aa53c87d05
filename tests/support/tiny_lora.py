"""A tiny LoRA adapter for the tiny Llama 3 test model (tests/support/tiny_model.py), in PEFT's
layout: ``adapter_config.json`` and ``adapter_model.safetensors`` with random float32 weights
from a fixed seed, on every attention and MLP projection of both layers. Its deltas are large
enough that the adapted model's greedy text differs from the base model's.

Built once and cached next to the model (``cached_build``), in a directory named after a hash of
this file and the rank.

    python -m tests.support.tiny_lora      # build (if needed) and print the directory
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import sys
from typing import Any

import numpy as np

from tests.support.tiny_model import (
    HEAD_DIM,
    HIDDEN_SIZE,
    INTERMEDIATE_SIZE,
    NUM_HEADS,
    NUM_KV_HEADS,
    NUM_LAYERS,
    cached_build,
    write_safetensors,
)

RANK = 8
"""The adapter's rank (engines serving it need ``--max-lora-rank`` at least this)."""
ALPHA = 16
SEED = 20250101

# (module, input size, output size) of each adapted projection
_PROJECTIONS = (
    ("self_attn.q_proj", HIDDEN_SIZE, NUM_HEADS * HEAD_DIM),
    ("self_attn.k_proj", HIDDEN_SIZE, NUM_KV_HEADS * HEAD_DIM),
    ("self_attn.v_proj", HIDDEN_SIZE, NUM_KV_HEADS * HEAD_DIM),
    ("self_attn.o_proj", NUM_HEADS * HEAD_DIM, HIDDEN_SIZE),
    ("mlp.gate_proj", HIDDEN_SIZE, INTERMEDIATE_SIZE),
    ("mlp.up_proj", HIDDEN_SIZE, INTERMEDIATE_SIZE),
    ("mlp.down_proj", INTERMEDIATE_SIZE, HIDDEN_SIZE),
)


def tiny_lora_dir(rank: int = RANK) -> pathlib.Path:
    """The adapter's directory (built on first use)."""
    digest = hashlib.sha256(pathlib.Path(__file__).read_bytes()).hexdigest()[:12]
    return cached_build(
        f"tiny-llama3-lora-r{rank}-{digest}",
        lambda out: build_tiny_lora(out, rank),
        marker="adapter_model.safetensors",
    )


def build_tiny_lora(out_dir: pathlib.Path, rank: int = RANK) -> None:
    """Write ``adapter_config.json`` and ``adapter_model.safetensors`` into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    config: dict[str, Any] = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": rank,
        "lora_alpha": ALPHA,
        "lora_dropout": 0.0,
        "bias": "none",
        "fan_in_fan_out": False,
        "target_modules": sorted(name.split(".")[-1] for name, _, _ in _PROJECTIONS),
        "modules_to_save": None,
        "use_rslora": False,
        "use_dora": False,
        "base_model_name_or_path": "tiny-llama3",
    }
    (out_dir / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")
    rng = np.random.default_rng(SEED + rank)
    tensors: dict[str, np.ndarray] = {}
    for layer in range(NUM_LAYERS):
        for name, fan_in, fan_out in _PROJECTIONS:
            prefix = f"base_model.model.model.layers.{layer}.{name}"
            a = rng.normal(0.0, 1.0 / np.sqrt(fan_in), (rank, fan_in))
            b = rng.normal(0.0, 1.0 / np.sqrt(rank), (fan_out, rank))
            tensors[f"{prefix}.lora_A.weight"] = a.astype(np.float32)
            tensors[f"{prefix}.lora_B.weight"] = b.astype(np.float32)
    write_safetensors(
        out_dir / "adapter_model.safetensors",
        {name: ("F32", t.astype("<f4")) for name, t in tensors.items()},
    )


if __name__ == "__main__":
    print(tiny_lora_dir())
    sys.exit(0)

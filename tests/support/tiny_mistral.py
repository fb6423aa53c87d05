"""Tiny Mistral-format model directories: a ``tekken.json`` of a chosen version beside an HF
``config.json`` (a one-layer Mistral), as ``--tokenizer-mode mistral`` loads them.

The tekken vocabulary is the first ``NUM_VOCAB`` byte-pair ranks of the ``tekken_240911.json``
that the installed ``mistral_common`` package ships (``mistral_common/data``: Mistral's own
file, Apache-2.0, no download), so real text encodes to real Mistral pieces (the 256 byte
tokens come first, so every text encodes). Its special tokens are mistral_common's
``SpecialTokens`` in the order Mistral's tekken files list them (the deprecated v3 table first,
then ``[ARGS]``, ``[CALL_ID]``, ..., ``[THINK]``, ``[/THINK]``), padded with ``<SPECIAL_n>``
fillers to ``NUM_SPECIAL``. Versions ``v3`` and ``v7`` (pre-v11: JSON-list tool calls), ``v11``
(``[TOOL_CALLS]name[ARGS]{...}``; reasoning as ``<think>`` text) and ``v13`` (``[THINK]``
special tokens) are the ones the tool and reasoning parsers tell apart. ``v3`` leaves the
special-token table out, as Mistral's v3 files do (mistral_common then uses its built-in one).

With ``consolidated=True`` an empty ``consolidated.safetensors`` marks the directory as a
Mistral-format repository, which makes vLLM 0.32's ``--tokenizer-mode auto`` choose ``mistral``.

    python -m tests.support.tiny_mistral v13   # build (if needed) and print the directory
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import sys
from typing import Any

from tests.support.tiny_model import cached_build

NUM_VOCAB = 3000
NUM_SPECIAL = 64
VERSIONS = ("v3", "v7", "v11", "v13")
BUILDER_VERSION = 1

# mistral_common's SpecialTokens values, in tekken files' id order.
SPECIAL_ORDER = (
    "<unk>",
    "<s>",
    "</s>",
    "[INST]",
    "[/INST]",
    "[AVAILABLE_TOOLS]",
    "[/AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]",
    "[/TOOL_RESULTS]",
    "[TOOL_CALLS]",
    "[IMG]",
    "<pad>",
    "[IMG_BREAK]",
    "[IMG_END]",
    "[PREFIX]",
    "[MIDDLE]",
    "[SUFFIX]",
    "[SYSTEM_PROMPT]",
    "[/SYSTEM_PROMPT]",
    "[TOOL_CONTENT]",
    "[ARGS]",
    "[CALL_ID]",
    "[AUDIO]",
    "[BEGIN_AUDIO]",
    "[TRANSCRIBE]",
    "[THINK]",
    "[/THINK]",
)
_V11_ONLY = ("[THINK]", "[/THINK]")


def _source_tekken() -> pathlib.Path:
    import mistral_common

    return pathlib.Path(mistral_common.__file__).parent / "data" / "tekken_240911.json"


def tekken_data(version: str) -> dict[str, Any]:
    """The tiny ``tekken.json`` content of ``version``."""
    if version not in VERSIONS:
        raise ValueError(f"unknown tekken version {version!r}")
    source = json.loads(_source_tekken().read_text(encoding="utf-8"))
    config = dict(source["config"])
    config.update(
        num_vocab_tokens=NUM_VOCAB,
        default_vocab_size=NUM_VOCAB + NUM_SPECIAL,
        default_num_special_tokens=NUM_SPECIAL,
        version=version,
    )
    data: dict[str, Any] = {"config": config, "vocab": source["vocab"][:NUM_VOCAB]}
    if version != "v3":
        names = [t for t in SPECIAL_ORDER if version == "v13" or t not in _V11_ONLY]
        data["special_tokens"] = [
            {"rank": i, "token_str": t, "is_control": True} for i, t in enumerate(names)
        ]
    return data


def _hf_config() -> dict[str, Any]:
    return {
        "architectures": ["MistralForCausalLM"],
        "model_type": "mistral",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "num_hidden_layers": 1,
        "head_dim": 32,
        "vocab_size": NUM_VOCAB + NUM_SPECIAL,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "float32",
    }


def build_tiny_mistral(target: pathlib.Path, version: str, *, consolidated: bool) -> None:
    """Write the directory's files into ``target``."""
    target.mkdir(parents=True, exist_ok=True)
    (target / "tekken.json").write_text(json.dumps(tekken_data(version)), encoding="utf-8")
    (target / "config.json").write_text(json.dumps(_hf_config()), encoding="utf-8")
    if consolidated:
        # A safetensors file with no tensors: an 8-byte header length, then "{}" padded.
        header = b"{}      "
        (target / "consolidated.safetensors").write_bytes(
            len(header).to_bytes(8, "little") + header
        )


def tiny_mistral_dir(version: str = "v13", *, consolidated: bool = False) -> pathlib.Path:
    """A cached tiny Mistral-format directory for ``version`` (built on first use)."""
    digest = hashlib.sha256()
    digest.update(pathlib.Path(__file__).read_bytes())
    digest.update(hashlib.sha256(_source_tekken().read_bytes()).digest())
    digest.update(f"{version}:{consolidated}:{BUILDER_VERSION}".encode())
    name = f"tiny-mistral-{version}{'-c' if consolidated else ''}-{digest.hexdigest()[:16]}"
    return cached_build(
        name, lambda d: build_tiny_mistral(d, version, consolidated=consolidated), "tekken.json"
    )


if __name__ == "__main__":
    print(tiny_mistral_dir(sys.argv[1] if len(sys.argv) > 1 else "v13"))

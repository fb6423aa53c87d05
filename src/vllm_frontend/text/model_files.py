"""Finding a model's files and reading what the frontend needs from them (never downloading).

A model is a local directory or a hub name (`org/name`) already in the Hugging Face cache
(`$HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`, layout
`models--org--name/snapshots/<commit>/`). From it we read `config.json`, the tokenizer files,
and `generation_config.json` (chat templates are the chat layer's: `chat/sources.py`), and derive
what vLLM derives:

* sampling defaults with vLLM's `--generation-config auto` semantics (`ModelConfig.
  get_diff_sampling_param`): the keys repetition_penalty, presence_penalty, frequency_penalty,
  temperature, top_k, top_p, min_p, max_new_tokens (renamed max_tokens) when set in
  generation_config.json; `vllm` means none; a directory path means that directory's file;
* the generation config's `eos_token_id` (int or list), falling back to config.json's when there
  is no generation_config.json (transformers' `GenerationConfig.from_model_config`), used for the
  extra stop ids vLLM adds to every request.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

__all__ = [
    "ModelFiles",
    "ModelFilesError",
    "hub_cache_dir",
    "load_model_files",
    "resolve_model_dir",
]

# The sampling keys vLLM takes from a generation config (ModelConfig.get_diff_sampling_param).
_SAMPLING_KEYS = (
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "temperature",
    "top_k",
    "top_p",
    "min_p",
    "max_new_tokens",
)
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
# Where config.json states the context length (vLLM's _get_and_verify_max_len keys, in order).
_MAX_LEN_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)


class ModelFilesError(Exception):
    """The model cannot be found locally or one of its files is unreadable."""


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache directory, as huggingface_hub resolves it."""
    if cache := os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE"):
        return Path(cache).expanduser()
    if home := os.environ.get("HF_HOME"):
        return Path(home).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "huggingface" / "hub"


def resolve_model_dir(model: str, revision: str | None = None) -> Path:
    """The local directory holding `model`'s files: the path itself, or its hub cache snapshot."""
    path = Path(model).expanduser()
    if path.is_dir():
        return path
    if model.count("/") != 1 or model.startswith(("/", ".", "~")):
        raise ModelFilesError(f"model {model!r} is not a directory and not a hub name (org/name)")
    repo = hub_cache_dir() / ("models--" + model.replace("/", "--"))
    rev = revision or "main"
    ref = repo / "refs" / rev
    commit = ref.read_text().strip() if ref.is_file() else rev if _COMMIT.match(rev) else None
    if commit is not None and (repo / "snapshots" / commit).is_dir():
        return repo / "snapshots" / commit
    raise ModelFilesError(
        f"model {model!r} (revision {rev}) is not in the Hugging Face cache at {repo.parent}; "
        "this frontend never downloads: fetch it first (e.g. `huggingface-cli download "
        f"{model}`) or pass a local directory"
    )


class ModelFiles(msgspec.Struct, frozen=True):
    """What the frontend reads from a model directory, parsed once at startup."""

    path: Path
    """The directory the files came from."""
    config: Mapping[str, Any]
    """config.json (empty if absent)."""
    tokenizer_config: Mapping[str, Any]
    """tokenizer_config.json (empty if absent)."""
    generation_config: Mapping[str, Any] | None
    """generation_config.json, or None when the model has none."""
    sampling_defaults: Mapping[str, Any] = msgspec.field(default_factory=dict)
    """vLLM's default sampling parameters from the generation config (`max_tokens` renamed)."""

    @property
    def max_position_embeddings(self) -> int | None:
        """The context length config.json states (a fallback when no engine reports one)."""
        for cfg in (self.config, self.config.get("text_config") or {}):
            for key in _MAX_LEN_KEYS:
                value = cfg.get(key)
                if isinstance(value, int) and not isinstance(value, bool):
                    return value
        return None

    @property
    def generation_eos_token_ids(self) -> list[int]:
        """`eos_token_id` of the generation config (config.json's if there is none), as a list."""
        source: Mapping[str, Any] | None = self.generation_config
        if source is None:
            source = self.config
            value = source.get("eos_token_id")
            if value is None:
                value = (source.get("text_config") or {}).get("eos_token_id")
        else:
            value = source.get("eos_token_id")
        if isinstance(value, bool):
            return []
        if isinstance(value, int):
            return [value]
        if isinstance(value, list):
            return [v for v in value if isinstance(v, int) and not isinstance(v, bool)]
        return []

    @property
    def default_max_tokens(self) -> int | None:
        """`max_new_tokens` of the generation config, vLLM's fallback for `max_tokens`."""
        value = self.sampling_defaults.get("max_tokens")
        return value if isinstance(value, int) else None


def override_max_tokens(
    generation_config: str, override_generation_config: Mapping[str, Any] | None, files: ModelFiles
) -> int | None:
    """vLLM's server-wide cap on ``max_tokens`` (its servings' ``override_max_tokens``): the
    ``max_new_tokens`` of a generation-config folder (overrides applied), else that of
    ``--override-generation-config``; the model's own generation config only gives a default."""
    if generation_config not in ("auto", "vllm"):
        value = files.sampling_defaults.get("max_tokens")
    else:
        value = (override_generation_config or {}).get("max_new_tokens")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def load_model_files(
    model: str,
    *,
    revision: str | None = None,
    generation_config: str = "auto",
    override_generation_config: Mapping[str, Any] | None = None,
) -> ModelFiles:
    """Read `model`'s files; `generation_config` is vLLM's flag: "auto", "vllm" or a directory."""
    path = resolve_model_dir(model, revision)
    config = _read_json(path / "config.json") or {}
    tokenizer_config = _read_json(path / "tokenizer_config.json") or {}
    if generation_config in ("auto", "vllm"):
        gen = _read_json(path / "generation_config.json")
    else:
        gen = _read_json(Path(generation_config).expanduser() / "generation_config.json")
    sampling: dict[str, Any] = {} if generation_config == "vllm" else dict(gen or {})
    sampling.update(override_generation_config or {})
    defaults = {k: sampling[k] for k in _SAMPLING_KEYS if sampling.get(k) is not None}
    if "max_new_tokens" in defaults:
        defaults["max_tokens"] = defaults.pop("max_new_tokens")
    return ModelFiles(
        path=path,
        config=config,
        tokenizer_config=tokenizer_config,
        generation_config=gen,
        sampling_defaults=defaults,
    )


def _read_json(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ModelFilesError(f"cannot read {path}: {e}") from e
    if not isinstance(data, dict):
        raise ModelFilesError(f"{path} does not hold a JSON object")
    return data

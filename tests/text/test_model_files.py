"""Models are found like vLLM finds them offline, and their generation defaults read like vLLM's."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vllm_frontend.text.model_files import (
    ModelFilesError,
    load_model_files,
    resolve_model_dir,
)

_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "bos_token_id": 1,
    "eos_token_id": [2, 9],
    "max_position_embeddings": 256,
    "hidden_size": 16,
    "num_attention_heads": 2,
    "num_hidden_layers": 1,
    "intermediate_size": 32,
    "vocab_size": 100,
}


def vllm_generation_fields(directory: Path, mode: str, override: dict[str, Any]) -> Any:
    """vLLM's try_get_generation_config + get_diff_sampling_param, minus ModelConfig."""
    from vllm.config.model import ModelConfig
    from vllm.transformers_utils.config import try_get_generation_config

    fields = try_get_generation_config(str(directory), trust_remote_code=False) or {}
    fields = fields.to_diff_dict() if hasattr(fields, "to_diff_dict") else fields
    fake = type("Fake", (), {})()
    fake.generation_config = mode
    fake.override_generation_config = override
    fake.try_get_generation_config = lambda: dict(fields)
    return fields, ModelConfig.get_diff_sampling_param(fake)  # type: ignore[arg-type]


# Valid configs only: transformers refuses e.g. max_new_tokens=0 and vLLM then fails to start.
gen_values = st.one_of(st.none(), st.integers(1, 50), st.floats(0.1, 2, allow_nan=False))


@pytest.mark.oracle
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    gen=st.one_of(
        st.none(),
        st.dictionaries(
            st.sampled_from(
                [
                    "temperature",
                    "top_p",
                    "top_k",
                    "min_p",
                    "repetition_penalty",
                    "max_new_tokens",
                    "do_sample",
                    "max_length",
                    "presence_penalty",
                ]
            ),
            gen_values,
        ).map(lambda d: {**d, "eos_token_id": [2, 5, 2], "bos_token_id": 1}),
    ),
    mode=st.sampled_from(["auto", "vllm"]),
    override=st.sampled_from([{}, {"temperature": 0.3}, {"max_new_tokens": 7}]),
)
def test_generation_defaults_and_eos_ids_match_vllm(
    tmp_path_factory: pytest.TempPathFactory, gen: Any, mode: str, override: dict[str, Any]
) -> None:
    d = tmp_path_factory.mktemp("model")
    (d / "config.json").write_text(json.dumps(_CONFIG))
    if gen is not None:
        (d / "generation_config.json").write_text(json.dumps(gen))
    fields, defaults = vllm_generation_fields(d, mode, override)
    files = load_model_files(str(d), generation_config=mode, override_generation_config=override)
    assert dict(files.sampling_defaults) == defaults
    eos = fields.get("eos_token_id")
    expected = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
    assert files.generation_eos_token_ids == expected
    assert files.max_position_embeddings == 256


def test_hub_names_resolve_to_the_cached_snapshot_without_downloading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import snapshot_download

    repo = tmp_path / "hub" / "models--org--tiny"
    commit = "a" * 40
    (repo / "snapshots" / commit).mkdir(parents=True)
    (repo / "snapshots" / commit / "config.json").write_text(json.dumps(_CONFIG))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    expected = snapshot_download("org/tiny", cache_dir=str(tmp_path / "hub"), local_files_only=True)
    assert resolve_model_dir("org/tiny") == Path(expected)
    assert resolve_model_dir("org/tiny", commit) == Path(expected)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "elsewhere"))
    with pytest.raises(ModelFilesError, match="never downloads"):
        resolve_model_dir("org/tiny")


def test_a_local_directory_is_used_as_is(tmp_path: Path) -> None:
    assert resolve_model_dir(str(tmp_path)) == tmp_path
    with pytest.raises(ModelFilesError):
        resolve_model_dir(str(tmp_path / "missing" / "deeper"))


def test_a_model_without_tokenizer_json_says_what_it_has(tmp_path: Path) -> None:
    """Startup names what stands in for tokenizer.json: the model's own tokenizer code, a
    Mistral file (then --tokenizer-mode mistral), or tiktoken / SentencePiece files."""
    from vllm_frontend.text.tokenizer import Tokenizer, TokenizerError

    remote = json.dumps({"auto_map": {"AutoTokenizer": ["t.T", None]}})
    cases = {
        "remote": ({"tokenizer_config.json": remote}, "own Python code"),
        "mistral": ({"tekken.json": "{}"}, "--tokenizer-mode mistral"),
        "tiktoken": ({"tiktoken.model": "x"}, "only tiktoken.model"),
        "nothing": ({}, "no tokenizer.json in"),
    }
    for name, (files, expected) in cases.items():
        directory = tmp_path / name
        directory.mkdir()
        for file, text in files.items():
            (directory / file).write_text(text)
        with pytest.raises(TokenizerError, match=re.escape(expected)):
            Tokenizer.from_dir(directory)

"""``GET /tokenizer_info`` answers what vLLM 0.32's answers for the same tokenizer directory
(its ``TokenizerInfo`` over the tokenizer vLLM loads, dumped as its response model), key order
included: the tiny Llama 3 tokenizer, and copies of it whose ``tokenizer_config.json`` has extra
special tokens, tokens written as ``AddedToken`` objects, or no chat template, with and without
``--chat-template``."""

from __future__ import annotations

import functools
import json
import pathlib
import shutil
from typing import Any

import pytest

from vllm_frontend.server.tokenizer_info import tokenizer_info

pytestmark = pytest.mark.oracle


def _variant(tiny: pathlib.Path, tmp: pathlib.Path, name: str) -> pathlib.Path:
    if name == "as built":
        return tiny
    target = tmp / name.replace(" ", "-")
    if target.exists():  # made by an earlier test of the module
        return target
    target.mkdir()
    for file in ("tokenizer.json", "config.json"):
        shutil.copy(tiny / file, target / file)
    config: dict[str, Any] = json.loads((tiny / "tokenizer_config.json").read_text())
    if name == "extra special tokens":
        config["additional_special_tokens"] = ["<|eot_id|>", "<|python_tag|>"]
        config["pad_token"] = "<|finetune_right_pad_id|>"
        config["padding_side"] = "left"
    elif name == "added token objects":
        config["bos_token"] = {"__type": "AddedToken", "content": "<|begin_of_text|>",
                               "lstrip": False, "normalized": False, "rstrip": False,
                               "single_word": False, "special": True}  # fmt: skip
        del config["chat_template"]
    (target / "tokenizer_config.json").write_text(json.dumps(config))
    return target


@pytest.fixture(scope="module")
def variants_dir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    # one directory per variant for the module: vLLM's tokenizer of each is loaded once
    return tmp_path_factory.mktemp("variants")


@functools.cache
def _vllms_tokenizer(directory: str, offline: bool) -> Any:
    # As vLLM's server holds it: its HF renderer wraps the tokenizer in a thread pool. One
    # load (~5 CPU-s for the 128k vocabulary) per directory and mode: the template only changes
    # what TokenizerInfo reports, not the tokenizer. (Released after the module.)
    from vllm.tokenizers import get_tokenizer
    from vllm.tokenizers.hf import maybe_make_thread_pool

    del offline  # (a key: the load reads HF_HUB_OFFLINE, set by the caller)
    return maybe_make_thread_pool(get_tokenizer(directory), 2)


@pytest.mark.parametrize("template", [None, "{{ messages[0]['content'] }}"])
@pytest.mark.parametrize("name", ["as built", "extra special tokens", "added token objects"])
@pytest.mark.parametrize("offline", [False, True])
def test_tokenizer_info_is_vllms(
    tiny_model: pathlib.Path,
    variants_dir: pathlib.Path,
    name: str,
    template: str | None,
    offline: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import huggingface_hub
    from vllm.entrypoints.serve.tokenize.protocol import TokenizerInfoResponse
    from vllm.entrypoints.serve.tokenize.serving import TokenizerInfo

    # offline (HF_HUB_OFFLINE=1, as the test engines run): the load says local_files_only
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", offline)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1" if offline else "0")
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    directory = _variant(tiny_model, variants_dir, name)
    tokenizer = _vllms_tokenizer(str(directory), offline)
    theirs = TokenizerInfoResponse(**TokenizerInfo(tokenizer, template).to_dict()).model_dump()
    config = json.loads((directory / "tokenizer_config.json").read_text())
    ours = tokenizer_info(config, str(directory), template)
    # over HTTP both are JSON objects: integer keys become strings, order stays
    assert json.dumps(ours) == json.dumps(theirs)

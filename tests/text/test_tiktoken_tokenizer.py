"""A model that ships a tiktoken ``tokenizer.model`` instead of ``tokenizer.json`` loads to the
tokenizer transformers converts it to (vLLM's tokenizer for it): the same ids, decoding and
special tokens, for a tiny tiktoken file (the first ranks of Llama 3's) with added tokens past
its ranks, a gap in them, and named special tokens."""

from __future__ import annotations

import json
import pathlib
import re

import pytest
from tests.support.tiny_model import llama3_tiktoken_path

from vllm_frontend.text.tokenizer import Tokenizer

pytestmark = pytest.mark.oracle

RANKS = 4000
TEXTS = ["", "Hello world", "  spaces\tand\nlines", "ünïcödé 日本 😀", "<|begin|>x<|end|>", "it's"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    lines = llama3_tiktoken_path().read_bytes().splitlines()[:RANKS]
    assert all(int(line.split()[1]) < RANKS for line in lines)
    directory = tmp_path_factory.mktemp("tiktoken")
    (directory / "tokenizer.model").write_bytes(b"\n".join(lines) + b"\n")
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|begin|>",
        "eos_token": "<|end|>",
        "added_tokens_decoder": {
            str(RANKS): {"content": "<|begin|>", "special": True},
            str(RANKS + 2): {"content": "<|end|>", "special": True},
        },
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return directory


def test_tiktoken_file_loads_as_transformers_converts_it(model_dir: pathlib.Path) -> None:
    from transformers import AutoTokenizer

    theirs = AutoTokenizer.from_pretrained(str(model_dir))
    ours = Tokenizer.from_dir(model_dir, use_fastokens=False)
    assert ours.vocab_size == len(theirs)
    for text in TEXTS:
        for special in (True, False):
            ids = theirs.encode(text, add_special_tokens=special)
            assert ours.encode(text, add_special_tokens=special) == ids, text
            for skip in (True, False):
                assert ours.decode(ids, skip_special_tokens=skip) == theirs.decode(
                    ids, skip_special_tokens=skip
                )
    assert ours.eos_token_id == theirs.eos_token_id
    assert ours.bos_token_id == theirs.bos_token_id
    assert ours.token_to_id("<|reserved_token_4001|>") == theirs.convert_tokens_to_ids(
        "<|reserved_token_4001|>"
    )


def test_other_tokenizer_classes_are_refused_naming_the_file(model_dir: pathlib.Path) -> None:
    from vllm_frontend.text.tokenizer import TokenizerError

    config = json.loads((model_dir / "tokenizer_config.json").read_text())
    other = model_dir.parent / "llama-class"
    other.mkdir()
    (other / "tokenizer.model").write_bytes((model_dir / "tokenizer.model").read_bytes())
    (other / "tokenizer_config.json").write_text(
        json.dumps({**config, "tokenizer_class": "LlamaTokenizer"})
    )
    with pytest.raises(TokenizerError, match=re.escape("has only tokenizer.model")):
        Tokenizer.from_dir(other)

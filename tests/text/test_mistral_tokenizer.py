"""``--tokenizer-mode mistral``: our mistral_common tokenizer answers as vLLM 0.32's
``MistralTokenizer`` does (encode, decode, vocabulary, special tokens), and our incremental
detokenizer streams exactly the text vLLM's ``SlowIncrementalDetokenizer`` streams, for tiny
tekken tokenizers of each version (byte pieces of split characters and special tokens
included) and for the SentencePiece file mistral_common ships."""

from __future__ import annotations

import functools
import pathlib
import random
import shutil
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.tiny_mistral import VERSIONS, tiny_mistral_dir

from vllm_frontend.text.detokenizer import IncrementalDetokenizer
from vllm_frontend.text.tokenizer_mistral import MistralTokenizer, is_mistral_repo

pytestmark = pytest.mark.oracle

pytest.importorskip("mistral_common")

TEXTS = [
    "",
    "Hello world",
    " leading space and  double",
    "ünïcödé — 日本語のテキスト 😀👍🏽",
    "[INST] not special [/INST] <s> </s> [TOOL_CALLS]",
    "line\nbreaks\r\n\ttabs",
    "lang:fr bonjour",
]


def _spm_dir(root: pathlib.Path) -> pathlib.Path:
    import mistral_common

    source = pathlib.Path(mistral_common.__file__).parent / "data"
    target = root / "spm-v7"
    target.mkdir()
    shutil.copy(
        source / "mistral_instruct_tokenizer_241114.model.v7", target / "tokenizer.model.v7"
    )
    return target


@functools.cache
def _pair(kind: str, root: str) -> tuple[MistralTokenizer, Any]:
    from vllm.tokenizers.mistral import MistralTokenizer as VllmMistralTokenizer

    directory = _spm_dir(pathlib.Path(root)) if kind == "spm" else tiny_mistral_dir(kind)
    return MistralTokenizer.from_dir(directory), VllmMistralTokenizer.from_pretrained(
        str(directory)
    )


KINDS = [*VERSIONS, "spm"]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("mistral-tok"))


@pytest.mark.parametrize("kind", KINDS)
def test_encode_decode_and_vocabulary_match_vllm(kind: str, root: str) -> None:
    ours, theirs = _pair(kind, root)
    for text in TEXTS:
        for special in (True, False):
            assert ours.encode(text, add_special_tokens=special) == theirs.encode(
                text, add_special_tokens=special
            )
    rng = random.Random(7)
    for _ in range(50):
        ids = [rng.randrange(theirs.vocab_size) for _ in range(rng.randrange(1, 12))]
        for skip in (True, False):
            assert ours.decode(ids, skip_special_tokens=skip) == theirs.decode(
                ids, skip_special_tokens=skip
            )
    assert ours.vocab_size == theirs.vocab_size == len(theirs)
    assert ours.max_token_id == theirs.max_token_id
    assert ours.max_chars_per_token == theirs.max_chars_per_token
    assert dict(ours.get_vocab()) == theirs.get_vocab()
    assert list(ours.all_special_tokens) == list(dict.fromkeys(theirs.all_special_tokens))
    assert sorted(ours.special_added_token_ids) == theirs.all_special_ids
    assert ours.eos_token_id == theirs.eos_token_id
    assert ours.bos_token_id == theirs.bos_token_id
    assert ours.special_token_id("pad_token") == theirs.pad_token_id
    for token_id in (0, 1, 5, 300, theirs.vocab_size - 1):
        assert ours.id_to_token(token_id) == theirs.convert_ids_to_tokens([token_id])[0]


def _vllm_stream(theirs: Any, prompt: list[int], output: list[int], skip: bool) -> list[str]:
    from vllm.tokenizers.detokenizer_utils import (
        convert_prompt_ids_to_tokens,
        detokenize_incrementally,
    )

    tokens, prefix, read = convert_prompt_ids_to_tokens(theirs, prompt, skip_special_tokens=skip)
    all_ids = list(prompt)
    out = []
    for token_id in output:
        all_ids.append(token_id)
        new_tokens, text, prefix, read = detokenize_incrementally(
            theirs,
            all_ids,
            tokens,
            prefix,
            read,
            skip_special_tokens=skip,
            spaces_between_special_tokens=True,
        )
        tokens.extend(new_tokens)
        out.append(text)
    return out


def _interesting_ids(ours: MistralTokenizer) -> list[int]:
    ids = sorted(ours.special_added_token_ids)[:30]
    # Byte pieces (incomplete characters) and multi-byte text's pieces.
    ids += ours.encode("é日本😀👍🏽", add_special_tokens=False)
    ids += [i for i in range(ours.vocab_size) if "\ufffd" in (ours.id_to_token(i) or "")][:40]
    return ids


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_streamed_text_matches_vllm(kind: str, root: str, data: st.DataObject) -> None:
    ours, theirs = _pair(kind, root)
    pool = _interesting_ids(ours)
    token = st.one_of(
        st.sampled_from(pool), st.integers(0, ours.vocab_size - 1), st.just(ours.vocab_size + 3)
    )
    prompt = data.draw(st.lists(st.integers(0, ours.vocab_size - 1), max_size=9))
    output = data.draw(st.lists(token, min_size=1, max_size=25))
    skip = data.draw(st.booleans())
    detok = IncrementalDetokenizer(ours, prompt, skip_special_tokens=skip)
    assert [detok.decode_next(t) for t in output] == _vllm_stream(theirs, prompt, output, skip)


def test_auto_mode_rule_is_vllms(tmp_path: pathlib.Path) -> None:
    """vLLM 0.32 picks mistral mode for `auto` when the directory has consolidated weights and
    a tekken (or versioned SentencePiece) file; a tekken file alone is not enough."""
    from vllm.transformers_utils.repo_utils import any_pattern_in_repo_files, is_mistral_model_repo

    plain = tiny_mistral_dir("v13")
    marked = tiny_mistral_dir("v13", consolidated=True)
    spm_only = tmp_path / "spm"
    spm_only.mkdir()
    (spm_only / "tokenizer.model.v3").write_bytes(b"")
    (spm_only / "consolidated-00001.safetensors").write_bytes(b"")
    for directory in (plain, marked, spm_only, tmp_path):
        theirs = is_mistral_model_repo(str(directory)) and any_pattern_in_repo_files(
            str(directory), allow_patterns=["tekken.json", "tokenizer.model.v*"]
        )
        assert is_mistral_repo(directory) == theirs, directory
    assert is_mistral_repo(marked) and not is_mistral_repo(plain)

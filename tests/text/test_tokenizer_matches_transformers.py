"""Our tokenizer encodes and decodes exactly like the transformers tokenizer vLLM loads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vllm_frontend.text.tokenizer import Tokenizer

SETTINGS = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
FRAGMENTS = [
    "hello",
    " world",
    "café",
    " 日本語",
    "😀",
    "👨‍👩‍👧",
    "\n",
    "  ",
    "<tool>",
    "<|eot_id|>",
    "<|begin_of_text|>",
    "</s>",
    "<s>",
    "<|im_end|>",
    " don't",
    " ,",
    "e\u0301",
]
texts = st.one_of(
    st.lists(st.sampled_from(FRAGMENTS), max_size=12).map("".join),
    st.text(max_size=40),
)


@pytest.mark.oracle
@SETTINGS
@given(text=texts, add_special=st.booleans())
def test_prompt_token_ids_match_transformers(
    ours: Tokenizer, hf: Any, text: str, add_special: bool
) -> None:
    assert ours.encode(text, add_special_tokens=add_special) == hf.encode(
        text, add_special_tokens=add_special
    )


@pytest.mark.oracle
@SETTINGS
@given(data=st.data(), skip=st.booleans())
def test_decoded_text_matches_transformers(ours: Tokenizer, hf: Any, data: Any, skip: bool) -> None:
    ids = data.draw(st.lists(st.integers(0, ours.vocab_size - 1), max_size=30))
    assert ours.decode(ids, skip_special_tokens=skip) == hf.decode(ids, skip_special_tokens=skip)


@pytest.mark.oracle
def test_special_token_ids_and_sizes_match_transformers(ours: Tokenizer, hf: Any) -> None:
    assert ours.eos_token_id == hf.eos_token_id
    assert ours.bos_token_id == hf.bos_token_id
    assert ours.vocab_size == len(hf)
    assert ours.max_chars_per_token == hf.max_chars_per_token
    assert ours.max_token_id == hf.max_token_id
    added = {i: t.content for i, t in hf.added_tokens_decoder.items()}
    assert dict(ours.added_tokens) == added


@pytest.mark.oracle
def test_single_token_strings_match_vllm(ours: Tokenizer, hf: Any) -> None:
    from vllm.tokenizers.detokenizer_utils import convert_ids_list_to_tokens

    from vllm_frontend.text.logprobs import TokenStrings

    ids = list(range(ours.vocab_size))
    strings = TokenStrings(ours)
    assert [strings.token(i) for i in ids] == convert_ids_list_to_tokens(hf, ids)


@pytest.fixture(scope="session")
def ours_fastokens(model_dir: Path, kind: str) -> Tokenizer:
    pytest.importorskip("fastokens")
    tokenizer = Tokenizer.from_dir(model_dir, use_fastokens=True)
    assert tokenizer.wait_for_fast_encoder(300)
    # fastokens has no Metaspace: `tokenizers` encodes
    assert tokenizer.uses_fastokens == (kind != "unigram_metaspace")
    return tokenizer


@pytest.fixture(scope="session")
def ours_tokenizers(model_dir: Path) -> Tokenizer:
    return Tokenizer.from_dir(model_dir, use_fastokens=False)


def test_prompts_are_encoded_alike_before_and_after_fastokens_has_loaded(
    model_dir: Path, kind: str
) -> None:
    pytest.importorskip("fastokens")
    if kind == "unigram_metaspace":
        pytest.skip("fastokens cannot load a Metaspace pre-tokenizer")
    texts = ["Hello, world!", "  two  spaces\n\ttab 🙂 数据 <|eot_id|> end", "x" * 300]
    tokenizer = Tokenizer.from_dir(model_dir, use_fastokens=True)
    # Usable at once: until the background load is done (or however it ends), `tokenizers`
    # encodes; the load's own outcome is checked after.
    first = [tokenizer.encode(t) for t in texts]
    assert tokenizer.wait_for_fast_encoder(300)
    fast = tokenizer._fast
    assert fast is not None
    assert [list(fast.encode(t, add_special_tokens=True).ids) for t in texts] == first
    assert first == [tokenizer.backend.encode(t).ids for t in texts]
    # Now with fastokens: single and batch encodes (the batch is how long prompts go).
    assert [tokenizer.encode(t) for t in texts] == tokenizer.encode_batch(texts) == first


@pytest.mark.oracle
@SETTINGS
@given(text=texts, add_special=st.booleans())
def test_prompt_token_ids_with_fastokens_match_transformers(
    ours_fastokens: Tokenizer, hf: Any, text: str, add_special: bool
) -> None:
    assert ours_fastokens.encode(text, add_special_tokens=add_special) == hf.encode(
        text, add_special_tokens=add_special
    )


@pytest.mark.oracle
@SETTINGS
@given(text=texts, add_special=st.booleans())
def test_prompt_token_ids_with_tokenizers_match_transformers(
    ours_tokenizers: Tokenizer, hf: Any, text: str, add_special: bool
) -> None:
    assert not ours_tokenizers.uses_fastokens
    assert ours_tokenizers.encode(text, add_special_tokens=add_special) == hf.encode(
        text, add_special_tokens=add_special
    )

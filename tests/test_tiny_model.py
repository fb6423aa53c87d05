"""The tiny test model tokenizes exactly like the real Llama 3 tokenizer (Meta's tiktoken one)."""

from __future__ import annotations

import hashlib
import json
import pathlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_models.llama3.tokenizer import Tokenizer as MetaTokenizer
from tokenizers import Tokenizer

from tests.support.tiny_model import build_tiny_model, llama3_tiktoken_path

SAMPLES = [
    "",
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "héllo wörld, ça va? Straße ñandú",
    "😀👍🏽 family: 👨‍👩‍👧 flags: 🇩🇪🇯🇵",
    "日本語のテキスト、中文文本，한국어 텍스트",
    "Привет, мир! مرحبا بالعالم שלום",
    "def f(x):\n    return x ** 2  # square\n\n\n\tpass\n",
    "a   b\t\t c \n\n  \r\n  \u00a0 \u200b\u3000end",
    " " * 40 + "x" + "\n" * 7 + " " * 3,
    "I'm sure you're right, THEY'LL say it's done; we'd've",
    "1234567890 3.14159 -42 1e-5 0x1F",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    'text<|python_tag|>{"name": "f"}<|eom_id|><|reserved_special_token_100|>',
    "<|not_a_special_token|> <|eot_id",
    "x" * 500,
    "ab" * 300,
]


@pytest.fixture(scope="module")
def hf_tokenizer(tiny_model: pathlib.Path) -> Tokenizer:
    return Tokenizer.from_file(str(tiny_model / "tokenizer.json"))


@pytest.fixture(scope="module")
def meta_tokenizer() -> MetaTokenizer:
    return MetaTokenizer(llama3_tiktoken_path())


def meta_encode(meta: MetaTokenizer, text: str, *, bos: bool = False) -> list[int]:
    return meta.encode(text, bos=bos, eos=False, allowed_special="all")


@pytest.mark.parametrize("text", SAMPLES)
def test_text_encodes_to_the_same_ids_as_meta_llama3(
    hf_tokenizer: Tokenizer, meta_tokenizer: MetaTokenizer, text: str
) -> None:
    assert hf_tokenizer.encode(text, add_special_tokens=False).ids == meta_encode(
        meta_tokenizer, text
    )
    assert hf_tokenizer.encode(text).ids == meta_encode(meta_tokenizer, text, bos=True)


@settings(max_examples=400, deadline=None)
@given(
    text=st.text(
        st.sampled_from([*"ab zZ\n\r\t'sStT_0123.,!?-(){}", "é", "日", "😀", "\u00a0", "’"])
        | st.characters(codec="utf-8"),
        max_size=60,
    )
)
def test_any_text_encodes_and_decodes_like_meta_llama3(
    hf_tokenizer: Tokenizer, meta_tokenizer: MetaTokenizer, text: str
) -> None:
    ids = meta_encode(meta_tokenizer, text)
    assert hf_tokenizer.encode(text, add_special_tokens=False).ids == ids
    assert hf_tokenizer.decode(ids, skip_special_tokens=False) == meta_tokenizer.decode(ids)


def test_special_tokens_have_their_llama3_names_and_ids(
    hf_tokenizer: Tokenizer, meta_tokenizer: MetaTokenizer
) -> None:
    assert hf_tokenizer.get_vocab_size(with_added_tokens=True) == meta_tokenizer.n_words == 128256
    for name, token_id in meta_tokenizer.special_tokens.items():
        assert hf_tokenizer.token_to_id(name) == token_id
        assert hf_tokenizer.id_to_token(token_id) == name
    assert hf_tokenizer.decode([128000, 9906, 128009], skip_special_tokens=True) == "Hello"


@pytest.mark.oracle
def test_transformers_loads_the_tokenizer_and_agrees(
    tiny_model: pathlib.Path, meta_tokenizer: MetaTokenizer
) -> None:
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(str(tiny_model))
    assert tok.bos_token_id == meta_tokenizer.bos_id
    assert tok.eos_token_id == meta_tokenizer.eot_id
    for text in SAMPLES:
        assert tok(text).input_ids == meta_encode(meta_tokenizer, text, bos=True)
    rendered = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert rendered.startswith("<|begin_of_text|><|start_header_id|>system<|end_header_id|>")
    assert rendered.endswith("hi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")


def test_generation_config_stops_on_every_llama3_end_token(
    tiny_model: pathlib.Path, meta_tokenizer: MetaTokenizer
) -> None:
    generation = json.loads((tiny_model / "generation_config.json").read_text())
    assert generation["bos_token_id"] == meta_tokenizer.bos_id
    assert sorted(generation["eos_token_id"]) == sorted(meta_tokenizer.stop_tokens)


def test_the_model_builds_byte_for_byte_the_same_every_time(
    tiny_model: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    build_tiny_model(tmp_path)

    def digests(directory: pathlib.Path) -> dict[str, str]:
        return {
            p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())
        }

    assert digests(tmp_path) == digests(tiny_model)

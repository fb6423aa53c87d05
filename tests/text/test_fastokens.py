"""Prompts encoded with fastokens (the default) get exactly the ids `tokenizers` gives them;
where fastokens cannot load a tokenizer, disagrees with it, is turned off or has not loaded yet,
`tokenizers` encodes."""

from __future__ import annotations

import json
import logging
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
import tokenizer_factory
import tokenizers
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vllm_frontend.text import tokenizer as tokenizer_module
from vllm_frontend.text import tokenizer_fastokens
from vllm_frontend.text.tokenizer import Tokenizer, TokenizerError
from vllm_frontend.text.tokenizer_fastokens import disagreement, fastokens_enabled

pytest.importorskip("fastokens")

SETTINGS = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
# Tokenizers fastokens loads (the factory's Unigram/Metaspace one it cannot: see below).
LOADABLE = ["byte_level", "byte_fallback", "tiny_model"]

_TOKENIZERS: dict[Path, Tokenizer] = {}


def _fast_tokenizer(model_dir: Path) -> Tokenizer:
    """A tokenizer whose prompts fastokens encodes (loaded once per directory)."""
    if model_dir not in _TOKENIZERS:
        tokenizer = Tokenizer.from_dir(model_dir, use_fastokens=True)
        assert tokenizer.wait_for_fast_encoder(300)
        assert tokenizer.uses_fastokens
        _TOKENIZERS[model_dir] = tokenizer
    return _TOKENIZERS[model_dir]


def _dir(tokenizer_dirs: dict[str, Path], name: str) -> Path:
    if name not in tokenizer_dirs:
        pytest.skip("needs the Llama 3 test model")
    return tokenizer_dirs[name]


# Text that stresses pre-tokenizers, normalizers and added-token matching.
_FRAGMENTS = [
    " ",
    "  ",
    "\t",
    "\n",
    "\n\n",
    "\r\n",
    "\u00a0",
    "\u3000",
    "\u2028",
    "\ufeff",
    "\u200b",
    "\u200d",
    "hello",
    " world",
    "HELLO",
    "'s",
    "'LL",
    " don't",
    "123",
    "4567890",
    "café",
    "e\u0301",
    "Z\u0308\u0323",
    "\u0301",
    " 日本語",
    "한국어",
    "שלום",
    " مرحبا",
    "\u200f",
    "\u202e",
    "😀",
    "👨‍👩‍👧",
    "👍🏽",
    "𝔘𝔫𝔦",
    "\U0010fffd",
    "ﬁ",
    "ß",
    "İ",
    "<",
    ">",
    "|",
    "<|",
    "|>",
    "</",
    "<s",
    "s>",
    "<|eot_id",
    "<|eot_id>",
    "<|begin_of_text|",
    "< |eot_id|>",
    "<|EOT_ID|>",
    "<tool",
    "<0x0A>",
    "<0x41>",
    "<0xFF",
    "!!!",
    "...",
    "```",
]
_CHARS = st.characters(codec="utf-8")  # every code point but surrogates: astral, combining, RTL


def _texts(added: list[str]) -> st.SearchStrategy[str]:
    piece = st.one_of(
        st.sampled_from(_FRAGMENTS + added),
        st.text(_CHARS, max_size=8),
        st.builds(
            lambda c, n: c * n, st.sampled_from([" ", "\n", "\t", "a", "1"]), st.integers(2, 70)
        ),
    )
    return st.one_of(st.text(_CHARS, max_size=60), st.lists(piece, max_size=24).map("".join))


def _added(tokenizer: Tokenizer) -> list[str]:
    return sorted(tokenizer.added_tokens.values())


@pytest.mark.parametrize("name", LOADABLE)
@SETTINGS
@given(data=st.data(), add_special=st.booleans())
def test_fastokens_gives_the_ids_tokenizers_gives(
    tokenizer_dirs: dict[str, Path], name: str, data: Any, add_special: bool
) -> None:
    tokenizer = _fast_tokenizer(_dir(tokenizer_dirs, name))
    added = _added(tokenizer)
    text = data.draw(_texts(added[:12] + added[-12:]))
    expected = tokenizer.backend.encode(text, add_special_tokens=add_special).ids
    assert tokenizer.encode(text, add_special_tokens=add_special) == expected
    assert tokenizer.encode_batch([text, text + text], add_special_tokens=add_special) == [
        expected,
        tokenizer.backend.encode(text + text, add_special_tokens=add_special).ids,
    ]


@pytest.mark.parametrize("name", LOADABLE)
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), add_special=st.booleans())
def test_fastokens_gives_the_ids_tokenizers_gives_for_long_texts(
    tokenizer_dirs: dict[str, Path], name: str, data: Any, add_special: bool
) -> None:
    tokenizer = _fast_tokenizer(_dir(tokenizer_dirs, name))
    unit = data.draw(_texts(_added(tokenizer)[:8]).filter(bool))
    text = (unit * (100_000 // len(unit) + 1))[: data.draw(st.integers(100_000, 160_000))]
    expected = tokenizer.backend.encode(text, add_special_tokens=add_special).ids
    assert tokenizer.encode(text, add_special_tokens=add_special) == expected


@pytest.mark.parametrize(
    "text",
    [
        " " * 150_000,
        "\n" * 150_000,
        " " * 150_000 + "x",
        "a" * 150_000,
        "7" * 150_000,
        "!" * 150_000,
        "😀" * 120_000,
        "e" + "\u0301" * 150_000,
        "<|eot_id|" * 15_000,
        "<|eot_id|>" * 15_000,
    ],
    ids=lambda t: f"{t[:3]!r}x{len(t)}",
)
def test_fastokens_gives_the_ids_tokenizers_gives_for_long_runs(
    tokenizer_dirs: dict[str, Path], text: str
) -> None:
    tokenizer = _fast_tokenizer(_dir(tokenizer_dirs, "tiny_model"))
    for add_special in (False, True):
        expected = tokenizer.backend.encode(text, add_special_tokens=add_special).ids
        assert tokenizer.encode(text, add_special_tokens=add_special) == expected


def test_byte_token_names_in_the_text_get_the_ids_tokenizers_gives(
    tokenizer_dirs: dict[str, Path],
) -> None:
    # fastokens alone reads "<0x0A>" as the byte-fallback token of that name.
    tokenizer = _fast_tokenizer(_dir(tokenizer_dirs, "byte_fallback"))
    texts = ["<0x00>", "a<0x41>b", "line<0x0A>break <0xFF> y", "<0x", "no byte names"]
    for add_special in (False, True):
        expected = [tokenizer.backend.encode(t, add_special_tokens=add_special).ids for t in texts]
        assert [tokenizer.encode(t, add_special_tokens=add_special) for t in texts] == expected
        assert tokenizer.encode_batch(texts, add_special_tokens=add_special) == expected
        assert tokenizer.encode_batch(texts[-1:], add_special_tokens=add_special) == expected[-1:]


def test_special_tokens_added_from_the_config_are_added_to_fastokens_too(
    tokenizer_dirs: dict[str, Path], tmp_path: Path
) -> None:
    # Special tokens named in tokenizer_config.json but missing from tokenizer.json are added
    # to the backend (as transformers does) and then to fastokens, at the same ids.
    directory = tmp_path / "extra_specials"
    shutil.copytree(tokenizer_dirs["byte_level"], directory)
    config = json.loads((directory / "tokenizer_config.json").read_text())
    config["unk_token"] = "<|unk|>"
    config["additional_special_tokens"] = ["<|im_start|>", "<tool>", "hello"]
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    tokenizer = Tokenizer.from_dir(directory, use_fastokens=True)
    assert tokenizer.wait_for_fast_encoder(60)
    assert tokenizer.uses_fastokens
    text = "<|unk|>hello <|im_start|> say hello<tool>x</tool><|eot_id|>"
    for add_special in (False, True):
        expected = tokenizer.backend.encode(text, add_special_tokens=add_special).ids
        assert tokenizer.encode(text, add_special_tokens=add_special) == expected
    assert tokenizer.token_to_id("<|im_start|>") in tokenizer.encode(text)


def test_fastokens_loads_the_tokenizer_caches_copy(
    tokenizer_dirs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The copy (sorted vocabulary, merges as strings) loads with less memory and GIL time.
    from vllm_frontend.text.tokenizer_cache import TokenizerCache

    directory = Path(shutil.copytree(tokenizer_dirs["byte_level"], tmp_path / "model"))
    cache = TokenizerCache(tmp_path / "cache")
    entry = cache.build(directory / "tokenizer.json")
    assert entry is not None and entry.path != directory / "tokenizer.json"
    loaded: list[Path | None] = []
    load = tokenizer_module.load_fastokens

    def recording_load(backend: Any, source: Path | None, *args: Any, **kwargs: Any) -> Any:
        loaded.append(source)
        return load(backend, source, *args, **kwargs)

    monkeypatch.setattr(tokenizer_module, "load_fastokens", recording_load)
    tokenizer = Tokenizer.from_dir(directory, cache=cache, use_fastokens=True)
    assert tokenizer.wait_for_fast_encoder(60)
    assert loaded == [entry.path]
    assert tokenizer.uses_fastokens
    text = "hello world <|eot_id|> café 😀\n\n  x"
    assert tokenizer.encode(text) == tokenizer.backend.encode(text).ids


def test_tokenizers_encodes_where_fastokens_cannot_load_the_tokenizer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # fastokens has no Metaspace pre-tokenizer (nor Unigram model): `tokenizers` encodes, and
    # the fallback is logged once however often the tokenizer is loaded.
    directory = tokenizer_factory.build_unigram_metaspace(tmp_path / "unigram")
    with caplog.at_level(logging.INFO, logger=tokenizer_fastokens.__name__):
        for _ in range(2):
            tokenizer = Tokenizer.from_dir(directory)
            assert tokenizer.wait_for_fast_encoder(60)
            assert not tokenizer.uses_fastokens
            text = "hello world <extra_id_0>  café"
            assert tokenizer.encode(text) == tokenizer.backend.encode(text).ids
    notes = [r for r in caplog.records if "fastokens cannot load" in r.getMessage()]
    assert len(notes) == 1
    assert notes[0].levelno == logging.INFO  # not asked for by name: a note
    assert "Metaspace" in notes[0].getMessage()


def test_not_loading_a_tokenizer_asked_for_by_name_is_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tokenizer_factory.build_unigram_metaspace(tmp_path / "unigram")
    monkeypatch.setenv("VLLM_USE_FASTOKENS", "1")
    with caplog.at_level(logging.INFO, logger=tokenizer_fastokens.__name__):
        tokenizer = Tokenizer.from_dir(directory)
        assert tokenizer.wait_for_fast_encoder(60)
    assert not tokenizer.uses_fastokens
    assert [r.levelno for r in caplog.records if "fastokens" in r.getMessage()] == [logging.WARNING]


def test_tokenizers_encodes_where_it_encodes_special_tokens_as_text(
    tokenizer_dirs: dict[str, Path],
) -> None:
    # fastokens ignores `encode_special_tokens`: it would give the special token's id.
    backend = tokenizers.Tokenizer.from_file(str(tokenizer_dirs["byte_level"] / "tokenizer.json"))
    backend.encode_special_tokens = True
    tokenizer = Tokenizer(backend, use_fastokens=True)
    assert tokenizer.wait_for_fast_encoder(60)
    assert not tokenizer.uses_fastokens
    ids = tokenizer.encode("<|eot_id|>", add_special_tokens=False)
    assert ids == backend.encode("<|eot_id|>", add_special_tokens=False).ids
    assert ids != [backend.token_to_id("<|eot_id|>")]


def test_an_encoder_that_disagrees_is_not_used(
    tokenizer_dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import fastokens

    # The check finds a fastokens encoder of another tokenizer, and the tokenizer then keeps
    # encoding with `tokenizers`.
    other = fastokens.Tokenizer.from_file(str(tokenizer_dirs["byte_fallback"] / "tokenizer.json"))
    byte_level = tokenizer_dirs["byte_level"] / "tokenizer.json"
    backend = tokenizers.Tokenizer.from_file(str(byte_level))
    assert disagreement(backend, fastokens.Tokenizer.from_file(str(byte_level))) is None
    assert disagreement(backend, other) is not None
    # Same sizes and added tokens, different merges: only the probe texts tell them apart.
    spec = json.loads(byte_level.read_text())
    spec["model"]["merges"] = spec["model"]["merges"][40:]
    assert disagreement(backend, fastokens.Tokenizer.from_json_str(json.dumps(spec))) is not None

    class Other:
        from_json_str = staticmethod(lambda _json: other)

    monkeypatch.setattr(fastokens, "Tokenizer", Other)
    tokenizer = Tokenizer(backend, use_fastokens=True)  # no source: loads from the JSON
    assert tokenizer.wait_for_fast_encoder(60)
    assert not tokenizer.uses_fastokens
    assert tokenizer.encode("hello world") == backend.encode("hello world").ids


def test_prompts_before_fastokens_has_loaded_get_the_same_ids(
    tokenizer_dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    model_dir = _dir(tokenizer_dirs, "tiny_model")
    release = threading.Event()
    load = tokenizer_module.load_fastokens

    def held_load(*args: Any, **kwargs: Any) -> Any:
        release.wait(60)
        return load(*args, **kwargs)

    monkeypatch.setattr(tokenizer_module, "load_fastokens", held_load)
    tokenizer = Tokenizer.from_dir(model_dir)  # default: fastokens
    chat = (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi 🙂 数据  there<|eot_id|>"
    )
    texts = [chat, "Hello, world!", " " * 9000 + "x", chat * 3]
    before = [tokenizer.encode(t, add_special_tokens=False) for t in texts]
    before_special = tokenizer.encode_batch(texts)
    assert not tokenizer.wait_for_fast_encoder(0)
    assert not tokenizer.uses_fastokens
    assert tokenizer._pieces is not None  # chat prompts reuse their pieces meanwhile
    release.set()
    assert tokenizer.wait_for_fast_encoder(300)
    assert tokenizer.uses_fastokens
    assert tokenizer._pieces is None
    assert [tokenizer.encode(t, add_special_tokens=False) for t in texts] == before
    assert tokenizer.encode_batch(texts) == before_special
    assert before == [tokenizer.backend.encode(t, add_special_tokens=False).ids for t in texts]
    assert before_special == [tokenizer.backend.encode(t).ids for t in texts]


def test_vllm_use_fastokens_0_keeps_tokenizers(
    tokenizer_dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_load(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("fastokens was loaded")

    monkeypatch.setattr(tokenizer_module, "load_fastokens", no_load)
    monkeypatch.setenv("VLLM_USE_FASTOKENS", "0")
    tokenizer = Tokenizer.from_dir(tokenizer_dirs["byte_level"])
    assert tokenizer.wait_for_fast_encoder(0)
    assert not tokenizer.uses_fastokens
    assert tokenizer.encode("hi <tool>") == tokenizer.backend.encode("hi <tool>").ids


def test_an_unparsable_vllm_use_fastokens_stops_loading(
    tokenizer_dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_USE_FASTOKENS", "true")
    with pytest.raises(TokenizerError, match="VLLM_USE_FASTOKENS"):
        Tokenizer.from_dir(tokenizer_dirs["byte_level"])


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, True), ("0", False), ("1", True), ("2", True), ("-1", True), (" 1 ", True),
     ("00", False), ("+0", False)],
)  # fmt: skip
def test_vllm_use_fastokens_values(value: str | None, expected: bool) -> None:
    environ = {} if value is None else {"VLLM_USE_FASTOKENS": value}
    assert fastokens_enabled(environ) is expected


@pytest.mark.parametrize("value", ["", "true", "yes", "on", "1.0"])
def test_vllm_use_fastokens_values_that_are_errors(value: str) -> None:
    with pytest.raises(ValueError, match="VLLM_USE_FASTOKENS"):
        fastokens_enabled({"VLLM_USE_FASTOKENS": value})


@pytest.mark.oracle
@pytest.mark.parametrize("value", ["0", "1", "2", "-1", " 1 ", "00", "+0", "", "true", "1.0"])
def test_vllm_use_fastokens_is_parsed_as_vllm_parses_it(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vllm import envs

    monkeypatch.setenv("VLLM_USE_FASTOKENS", value)
    try:
        expected: bool | type[Exception] = envs.environment_variables["VLLM_USE_FASTOKENS"]()
    except ValueError:
        expected = ValueError
    if expected is ValueError:
        with pytest.raises(ValueError):
            fastokens_enabled()
    else:
        assert fastokens_enabled() is expected

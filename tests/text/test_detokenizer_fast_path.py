"""Byte-level tokenizers stream exactly the text vLLM's DecodeStream-based detokenizer streams.

For byte-level BPE tokenizers (Llama 3, GPT-2, Qwen) our detokenizer decodes from a table of token
bytes instead of stepping tokenizers' DecodeStream. Every per-token chunk must equal what vLLM's
own `FastIncrementalDetokenizer` (a DecodeStream primed with the prompt) returns, and what our
DecodeStream implementation returns: random prompts and generations full of special and added
tokens, byte tokens that split characters, invalid UTF-8, real U+FFFD, unknown and invalid ids,
with skip_special_tokens and spaces_between_special_tokens both ways.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import tokenizer_factory
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import AddedToken, decoders, models, normalizers, pre_tokenizers
from tokenizers import Tokenizer as RustTokenizer
from vllm_reference import vllm_engine_request

from vllm_frontend.text import detokenizer
from vllm_frontend.text.detokenizer import IncrementalDetokenizer
from vllm_frontend.text.tokenizer import Tokenizer


def byte_chars() -> dict[int, str]:
    """GPT-2's byte -> character map, from transformers (an independent copy of it)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return dict(bytes_to_unicode())


def piece(raw: bytes) -> str:
    """The byte-level vocabulary piece that decodes to `raw`."""
    chars = byte_chars()
    return "".join(chars[b] for b in raw)


def build_odd_byte_level() -> Tokenizer:
    """A byte-level tokenizer with every corner the ByteLevel decoder has.

    Pieces for all 256 bytes, pieces that are complete or partial characters, invalid UTF-8, a
    real U+FFFD, pieces with characters outside the byte alphabet (decoded as their own UTF-8),
    holes in the id space, and added tokens: special ones (one of them also a vocabulary piece),
    non-special ones with and without byte-alphabet characters, and a normalized one.
    """
    pieces = [piece(bytes([b])) for b in range(256)]
    pieces += [
        piece("日本".encode()),
        piece("😀".encode()[:2]),
        piece("😀".encode()[2:]),
        piece("é".encode()[1:] + b"b"),
        piece(b"a" + "é".encode()[:1]),
        piece("\ufffd".encode()),
        piece(b"x" + "\ufffd".encode()),
        piece(b"\xff\xfe"),
        piece(b"\xed\xa0\x80"),
        piece(b"\xf4\x90\x80\x80"),
        piece(b" hello"),
        piece(b" world"),
        "日本",  # outside the alphabet: decoded as its own UTF-8
        "a b",
        "\ufffd",
        "x\u00ad",
    ]
    special = ["<|end|>", "<|im start|>", piece(b" hello")]  # the last: also a piece
    added: list[str | AddedToken] = [
        "<tool>",
        "</tool>",
        "Ġcall",  # byte-alphabet characters, lower-cased by the normalizer: "\x7fcall"
        "naïve",  # 'ï' is byte 0xEF in the alphabet: decodes to invalid UTF-8
        "tool call",  # a space: outside the alphabet, decoded as is
        AddedToken("<BIG>", normalized=True),  # decoded as normalized: "<big>"
    ]
    contents = [t if isinstance(t, str) else t.content for t in added]
    # Added tokens take the id of their vocabulary entry (tokenizers would otherwise number them
    # from the vocabulary's size, over any ids past a hole); ids 256..275 are holes.
    ordered = list(dict.fromkeys(pieces + special + contents))
    vocab = {p: i + 20 * (i >= 256) for i, p in enumerate(ordered)}
    assert len(vocab) == len(pieces) + len(special) + len(contents) - 1
    backend = RustTokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.normalizer = normalizers.Lowercase()
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(special)
    backend.add_tokens(added)
    return Tokenizer(backend)


@pytest.fixture(scope="module")
def byte_level_tokenizers(tokenizer_dirs: dict[str, Path]) -> dict[str, Tokenizer]:
    builders: dict[str, Callable[[], Tokenizer]] = {
        "odd": build_odd_byte_level,
        "gpt2_like": lambda: Tokenizer.from_dir(tokenizer_dirs["byte_level"]),
    }
    if "tiny_model" in tokenizer_dirs:
        builders["llama3"] = lambda: Tokenizer.from_dir(tokenizer_dirs["tiny_model"])
    tokenizers = {name: build() for name, build in builders.items()}
    # The same tokenizers with their tables filled ahead of use (what a server does at start)
    # instead of token by token: separate objects, so separate tables.
    for name, build in builders.items():
        tokenizers[f"{name}-prefilled"] = prefilled = build()
        for _ in detokenizer.prefill(prefilled, slice_size=100):  # slices end mid-vocabulary
            pass
    return tokenizers


NAMES = ["odd", "gpt2_like", "llama3", "odd-prefilled", "gpt2_like-prefilled", "llama3-prefilled"]


@pytest.fixture(params=NAMES)
def tok(request: pytest.FixtureRequest, byte_level_tokenizers: dict[str, Tokenizer]) -> Tokenizer:
    name = str(request.param)
    if name not in byte_level_tokenizers:
        pytest.skip(f"{name} tokenizer not available")
    return byte_level_tokenizers[name]


def vllm_detokenizer(
    tok: Tokenizer, prompt: Sequence[int], skip: bool, spaces: bool
) -> Callable[[int], str]:
    """vLLM's own FastIncrementalDetokenizer over the same Rust tokenizer."""
    from vllm.sampling_params import SamplingParams
    from vllm.v1.engine.detokenizer import FastIncrementalDetokenizer

    params = SamplingParams(
        max_tokens=10_000, skip_special_tokens=skip, spaces_between_special_tokens=spaces
    )
    request = vllm_engine_request(list(prompt), params)
    det = FastIncrementalDetokenizer(SimpleNamespace(_tokenizer=tok.backend), request)  # type: ignore[arg-type]
    return det.decode_next


def ours(tok: Tokenizer, prompt: Sequence[int], skip: bool, spaces: bool) -> IncrementalDetokenizer:
    return IncrementalDetokenizer(
        tok, prompt, skip_special_tokens=skip, spaces_between_special_tokens=spaces
    )


def stream_path(
    tok: Tokenizer, prompt: Sequence[int], skip: bool, spaces: bool
) -> IncrementalDetokenizer:
    return detokenizer._StreamDetokenizer(
        tok, prompt, skip_special_tokens=skip, spaces_between_special_tokens=spaces
    )


_CORNERS: weakref.WeakKeyDictionary[Tokenizer, dict[str, list[int]]] = weakref.WeakKeyDictionary()


def corner_ids(tok: Tokenizer) -> dict[str, list[int]]:
    """Ids where byte-level decoding has corners, by kind, from a scan of the whole vocabulary."""
    if tok not in _CORNERS:
        chars = byte_chars()
        alphabet = set(chars.values())
        real_fffd = piece("\ufffd".encode())
        backend = tok.backend
        corners: dict[str, set[int]] = {
            "added": set(tok.added_tokens),
            "single byte": {t for b in range(256) if (t := tok.token_to_id(chars[b])) is not None},
            "outside the alphabet": set(),
            "U+FFFD": set(),
            "partial or invalid": set(),
        }
        for token_id in range(tok.max_token_id + 1):
            text = backend.id_to_token(token_id)
            if text is None:
                continue
            if not set(text) <= alphabet:
                corners["outside the alphabet"].add(token_id)
            if real_fffd in text or "\ufffd" in text:
                corners["U+FFFD"].add(token_id)
            elif "\ufffd" in backend.decode([token_id]):
                corners["partial or invalid"].add(token_id)
        _CORNERS[tok] = {kind: sorted(ids) for kind, ids in corners.items() if ids}
    return _CORNERS[tok]


@st.composite
def token_streams(draw: st.DrawFn, tok: Tokenizer) -> tuple[list[int], list[int]]:
    vocab = tok.vocab_size
    top = max(tok.max_token_id, vocab - 1)
    valid = st.one_of(
        st.integers(0, top),
        *(st.sampled_from(ids) for ids in corner_ids(tok).values()),
        st.integers(top + 1, top + 3),  # past the tokenizer: no token
    )
    # Runs of ids from real text too, so that characters split across tokens come back whole.
    text_run = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=6).map(
        lambda s: tok.encode(s, add_special_tokens=False)
    )
    run = st.one_of(valid.map(lambda t: [t]), text_run)
    prompt = [t for r in draw(st.lists(run, max_size=6)) for t in r]
    generated = [t for r in draw(st.lists(run, min_size=1, max_size=20)) for t in r]
    # Ids that are not u32s (the engine never sends them): logged and skipped.
    for _ in range(draw(st.integers(0, 2))):
        bad = draw(st.sampled_from([-1, -5, 2**32, 2**40]))
        generated.insert(draw(st.integers(0, len(generated))), bad)
    return prompt, generated


SETTINGS = settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.mark.oracle
@SETTINGS
@given(data=st.data())
def test_byte_level_streams_the_same_chunks_as_vllms_detokenizer(tok: Tokenizer, data: Any) -> None:
    prompt, generated = data.draw(token_streams(tok))
    for skip in (True, False):
        for spaces in (True, False):
            mine = ours(tok, prompt, skip, spaces)
            assert isinstance(mine, detokenizer._ByteLevelDetokenizer)  # the fast path ran
            reference = vllm_detokenizer(tok, prompt, skip, spaces)
            stream = stream_path(tok, prompt, skip, spaces)
            for i, token_id in enumerate(generated):
                expected = reference(token_id)
                got = mine.decode_next(token_id)
                assert got == expected, (skip, spaces, prompt, generated[: i + 1])
                assert stream.decode_next(token_id) == expected


@pytest.mark.oracle
@SETTINGS
@given(data=st.data())
def test_the_prompts_pending_bytes_shortcut_agrees_with_the_scan(tok: Tokenizer, data: Any) -> None:
    # A prompt ending with a token known as text of its own leaves nothing pending: the
    # shortcut must say what scanning the prompt's last bytes says (with the tables filled
    # ahead, the "-prefilled" tokenizers, the shortcut is taken wherever it can be).
    tables = detokenizer._byte_tables(tok)
    assert tables is not None
    prompt, generated = data.draw(token_streams(tok))
    for table in (tables.skip, tables.keep):
        for ids in (prompt, prompt + generated, generated):
            expected = detokenizer._scanned_prompt_bytes(table, ids)
            assert detokenizer._pending_prompt_bytes(table, ids) == expected, ids


def byte_tokens(tok: Tokenizer, raw: bytes) -> list[int]:
    """One single-byte token per byte of `raw`."""
    chars = byte_chars()
    ids = [tok.token_to_id(chars[b]) for b in raw]
    assert all(i is not None for i in ids)
    return [i for i in ids if i is not None]


@pytest.mark.oracle
def test_a_character_split_across_byte_tokens_comes_out_whole_with_its_last_piece(
    tok: Tokenizer,
) -> None:
    emoji = byte_tokens(tok, "😀".encode())
    prompt = tok.encode("hi", add_special_tokens=False)
    for skip in (True, False):
        det = ours(tok, prompt, skip, True)
        chunks = [det.decode_next(t) for t in emoji]
        assert chunks == ["", "", "", "😀"]
        reference = vllm_detokenizer(tok, prompt, skip, True)
        assert [reference(t) for t in emoji] == chunks


@pytest.mark.oracle
def test_a_prompt_cut_mid_character_is_repeated_in_the_first_chunk_as_vllm_does(
    tok: Tokenizer,
) -> None:
    # DecodeStream never takes a prompt whose text ends with U+FFFD as its emitted prefix, so
    # the first chunk carries the whole prompt text: vLLM streams that, and so must we.
    lead, *rest = byte_tokens(tok, "日".encode())
    prompt = [*tok.encode("Hello", add_special_tokens=False), lead]
    det = ours(tok, prompt, True, True)
    reference = vllm_detokenizer(tok, prompt, True, True)
    chunks = [det.decode_next(t) for t in rest]
    assert chunks == [reference(t) for t in rest]
    assert "".join(chunks) == tok.decode([*prompt, *rest])


@pytest.mark.oracle
def test_special_tokens_vanish_when_skipped_and_show_when_kept(tok: Tokenizer) -> None:
    special = sorted(tok.special_added_token_ids)[:3]
    words = tok.encode(" hello", add_special_tokens=False)
    ids = [special[0], *words, *special]
    for skip in (True, False):
        det = ours(tok, [], skip, True)
        text = "".join(det.decode_next(t) for t in ids)
        assert text == tok.decode(ids, skip_special_tokens=skip)


@pytest.mark.parametrize("name", ["odd", "gpt2_like", "llama3"])
@pytest.mark.parametrize("prefilled", [False, True])
def test_the_kept_table_made_after_the_skipping_one_shows_special_tokens(
    tokenizer_dirs: dict[str, Path], name: str, prefilled: bool
) -> None:
    # The table that keeps special tokens is made on first use, from the skipping table's text
    # so far: special tokens that table already met (as empty text) must show in it.
    if name == "odd":
        tok = build_odd_byte_level()
    else:
        directory = tokenizer_dirs.get("tiny_model" if name == "llama3" else "byte_level")
        if directory is None:
            pytest.skip(f"{name} tokenizer not available")
        tok = Tokenizer.from_dir(directory)
    if prefilled:
        for _ in detokenizer.prefill(tok, slice_size=100):
            pass
    tables = detokenizer._byte_tables(tok)
    assert tables is not None and tables._keep is None
    special = sorted(tok.special_added_token_ids)
    added = sorted(set(tok.added_tokens) - set(special))
    words = tok.encode(" hello world", add_special_tokens=False)
    ids = [*special[:4], *words, *added[:4], *special[-2:]]
    for skip in (True, False):
        det = ours(tok, [], skip, True)
        text = "".join(det.decode_next(t) for t in ids)
        assert text == tok.backend.decode(ids, skip_special_tokens=skip), skip
    assert tables.skip.skipped_ids >= set(special[:4])
    assert all(tables.keep.text[i] is None or tables.keep.text[i] for i in special)


@pytest.mark.oracle
def test_prefilled_text_is_what_tokenizers_decodes_for_each_token_alone(tok: Tokenizer) -> None:
    # Every id the prefill marks as text decodes, alone, to that text with the Rust decoder.
    tables = detokenizer._byte_tables(tok)
    assert tables is not None
    for _ in detokenizer.prefill(tok):
        pass
    for skip, table in ((True, tables.skip), (False, tables.keep)):
        filled = [i for i, text in enumerate(table.text) if text is not None]
        assert filled
        decoded = tok.backend.decode_batch([[i] for i in filled], skip_special_tokens=skip)
        assert decoded == [table.text[i] for i in filled]


@pytest.mark.parametrize("kind", ["byte_fallback", "unigram_metaspace"])
def test_prefilling_other_tokenizers_does_nothing(
    tokenizer_dirs: dict[str, Path], kind: str
) -> None:
    tok = Tokenizer.from_dir(tokenizer_dirs[kind])
    assert list(detokenizer.prefill(tok)) == []


@pytest.mark.parametrize("kind", ["byte_fallback", "unigram_metaspace"])
def test_other_tokenizers_keep_decode_stream(tokenizer_dirs: dict[str, Path], kind: str) -> None:
    tok = Tokenizer.from_dir(tokenizer_dirs[kind])
    assert isinstance(ours(tok, [1, 2], True, True), detokenizer._StreamDetokenizer)


def test_a_decoder_wrapping_byte_level_keeps_decode_stream(tmp_path: Path) -> None:
    # Only an exact ByteLevel decoder is known to decode token by token: anything around it
    # (here a Sequence, which could hold Strip or Replace) keeps the general path.
    directory = tokenizer_factory.build_byte_level(tmp_path / "bl")
    tok = Tokenizer.from_dir(directory)
    tok.backend.decoder = decoders.Sequence([decoders.ByteLevel()])
    assert isinstance(ours(tok, [1, 2], True, True), detokenizer._StreamDetokenizer)

"""Once fastokens encodes a byte-level tokenizer's prompts, the `tokenizers` object is let go
(~50 MB for Llama 3): pieces and ids then come from fastokens, token text from our byte tables,
and everything else loads `tokenizers` again. Each of those gives what `tokenizers` gives."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.tokenizer_reloads import record_reloads

from vllm_frontend.engine.protocol import EngineCoreRequest
from vllm_frontend.llm import LLM
from vllm_frontend.text import detokenizer
from vllm_frontend.text.detokenizer import IncrementalDetokenizer
from vllm_frontend.text.llm import TextLlm, TextRequest
from vllm_frontend.text.sampling import ModelSamplingInfo, SamplingRequest
from vllm_frontend.text.tokenizer import Tokenizer, release_enabled
from vllm_frontend.text.tokenizer_cache import TokenizerCache

pytest.importorskip("fastokens")

BYTE_LEVEL = ["byte_level", "tiny_model"]


def _released(directory: Path, **kwargs: Any) -> Tokenizer:
    tokenizer = Tokenizer.from_dir(directory, use_fastokens=True, **kwargs)
    assert tokenizer.wait_for_fast_encoder(300)
    assert tokenizer.uses_fastokens
    return tokenizer


@pytest.fixture(scope="module")
def pairs(tokenizer_dirs: dict[str, Path]) -> dict[str, tuple[Tokenizer, Tokenizer]]:
    """(released, kept) tokenizers of each byte-level directory: the kept one never loads
    fastokens, so it serves everything from `tokenizers` (the oracle)."""
    out = {}
    for name in BYTE_LEVEL:
        if name in tokenizer_dirs:
            kept = Tokenizer.from_dir(tokenizer_dirs[name], use_fastokens=False)
            out[name] = (_released(tokenizer_dirs[name]), kept)
    return out


@pytest.fixture(params=BYTE_LEVEL)
def pair(
    request: pytest.FixtureRequest, pairs: dict[str, tuple[Tokenizer, Tokenizer]]
) -> tuple[Tokenizer, Tokenizer]:
    if request.param not in pairs:
        pytest.skip("needs the Llama 3 test model")
    released, kept = pairs[request.param]
    assert not released.holds_backend  # (no test below may load it again)
    return released, kept


def test_every_piece_and_id_is_what_tokenizers_gives(pair: tuple[Tokenizer, Tokenizer]) -> None:
    released, kept = pair
    backend = kept.backend
    size = backend.get_vocab_size(with_added_tokens=True)
    ids = [*range(size + 64), 2**32 - 1]
    assert released.convert_ids_to_tokens(ids) == [backend.id_to_token(i) for i in ids]
    pieces = [*backend.get_vocab(with_added_tokens=True), "", "not a piece", " hello", "日本"]
    assert [released.token_to_id(p) for p in pieces] == [backend.token_to_id(p) for p in pieces]
    for bad in (-1, 2**32, 2**40):
        with pytest.raises(OverflowError):
            backend.id_to_token(bad)
        with pytest.raises(OverflowError):
            released.id_to_token(bad)
    assert not released.holds_backend


def test_special_tokens_and_vocabulary_bounds_are_unchanged(
    pair: tuple[Tokenizer, Tokenizer],
) -> None:
    released, kept = pair
    assert released.all_special_tokens == kept.all_special_tokens
    for slot in ("bos_token", "eos_token", "unk_token", "pad_token"):
        assert released.special_token_id(slot) == kept.special_token_id(slot)
    assert released.eos_token_id == kept.eos_token_id
    assert released.max_token_id == kept.max_token_id
    assert released.max_chars_per_token == kept.max_chars_per_token
    assert released.vocab_size == kept.vocab_size
    assert released.added_tokens == kept.added_tokens
    assert released.special_added_token_ids == kept.special_added_token_ids
    assert not released.holds_backend


@st.composite
def _streams(draw: st.DrawFn, tok: Tokenizer) -> tuple[list[int], list[int]]:
    top = tok.vocab_size + 2
    ids = st.one_of(st.integers(0, top), st.sampled_from(sorted(tok.added_tokens)))
    text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=8)
    run = st.one_of(ids.map(lambda t: [t]), text.map(lambda s: tok.encode(s, False)))
    prompt = [t for r in draw(st.lists(run, max_size=5)) for t in r]
    generated = [t for r in draw(st.lists(run, min_size=1, max_size=16)) for t in r]
    return prompt, generated


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_streamed_text_is_what_tokenizers_decode_stream_gives(
    pair: tuple[Tokenizer, Tokenizer], data: Any
) -> None:
    released, kept = pair
    prompt, generated = data.draw(_streams(released))
    for skip in (True, False):
        for spaces in (True, False):
            kwargs = {"skip_special_tokens": skip, "spaces_between_special_tokens": spaces}
            mine = IncrementalDetokenizer(released, prompt, **kwargs)
            assert isinstance(mine, detokenizer._ByteLevelDetokenizer)
            # The DecodeStream path over the kept `tokenizers` object (the path the other
            # detokenizer tests pin to vLLM's own detokenizer).
            oracle = detokenizer._StreamDetokenizer(kept, prompt, **kwargs)
            for i, token_id in enumerate(generated):
                expected = oracle.decode_next(token_id)
                assert mine.decode_next(token_id) == expected, (skip, spaces, generated[: i + 1])
    assert not released.holds_backend


def test_prompts_get_the_ids_tokenizers_gives(pair: tuple[Tokenizer, Tokenizer]) -> None:
    released, kept = pair
    text = "Hello, world! <|eot_id|> café 日本語 😀\n\n  x" + "".join(kept.added_tokens.values())
    for add_special in (True, False):
        expected = kept.backend.encode(text, add_special_tokens=add_special).ids
        assert released.encode(text, add_special_tokens=add_special) == expected
        assert released.encode_batch([text], add_special_tokens=add_special) == [expected]
    assert not released.holds_backend


def test_a_lone_surrogate_is_refused_as_tokenizers_refuses_it(
    pair: tuple[Tokenizer, Tokenizer],
) -> None:
    released, kept = pair
    with pytest.raises(Exception) as expected:
        kept.encode("a\ud800b")
    with pytest.raises(Exception) as got:
        released.encode("a\ud800b")
    assert (type(got.value), str(got.value)) == (type(expected.value), str(expected.value))
    assert not released.holds_backend


def test_decoding_loads_tokenizers_again_and_keeps_it(tokenizer_dirs: dict[str, Path]) -> None:
    directory = tokenizer_dirs["byte_level"]
    released = _released(directory)
    assert not released.holds_backend
    kept = Tokenizer.from_dir(directory, use_fastokens=False)
    ids = [*kept.encode("Hello, world! café <|eot_id|>"), 3, 200, 5]
    for skip in (True, False):
        assert released.decode(ids, skip_special_tokens=skip) == kept.decode(ids, skip)
    assert released.holds_backend
    assert released.decode_verbatim(ids) == kept.decode_verbatim(ids)
    assert released.backend.to_str() == kept.backend.to_str()  # the same configuration


def test_the_original_file_serves_when_the_cached_copy_is_gone(
    tokenizer_dirs: dict[str, Path], tmp_path: Path
) -> None:
    directory = Path(shutil.copytree(tokenizer_dirs["byte_level"], tmp_path / "model"))
    cache = TokenizerCache(tmp_path / "cache")
    entry = cache.build(directory / "tokenizer.json")
    assert entry is not None and entry.path != directory / "tokenizer.json"
    released = _released(directory, cache=cache)
    assert not released.holds_backend
    entry.path.unlink()
    kept = Tokenizer.from_dir(directory, use_fastokens=False)
    assert released.backend.to_str() == kept.backend.to_str()


def test_special_tokens_added_from_the_config_are_added_again(
    tokenizer_dirs: dict[str, Path], tmp_path: Path
) -> None:
    # transformers adds the config's special tokens the vocabulary lacks; so does the reload.
    directory = Path(shutil.copytree(tokenizer_dirs["byte_level"], tmp_path / "model"))
    config_path = directory / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config.pop("added_tokens_decoder", None)
    config["additional_special_tokens"] = ["<|extra one|>", "<|extra two|>"]
    config_path.write_text(json.dumps(config))
    released = _released(directory)
    assert not released.holds_backend
    kept = Tokenizer.from_dir(directory, use_fastokens=False)
    assert {"<|extra one|>", "<|extra two|>"} <= set(kept.all_special_tokens)
    text = "a<|extra two|>b <|extra one|>"
    assert released.encode(text) == kept.encode(text)
    assert released.all_special_tokens == kept.all_special_tokens
    assert released.decode(released.encode(text)) == kept.decode(kept.encode(text))
    assert released.holds_backend
    assert released.backend.to_str() == kept.backend.to_str()


@pytest.mark.parametrize("kind", ["byte_fallback"])
def test_other_decoders_keep_tokenizers(tokenizer_dirs: dict[str, Path], kind: str) -> None:
    # Their detokenizer steps tokenizers' DecodeStream for every token.
    tokenizer = _released(tokenizer_dirs[kind])
    assert tokenizer.holds_backend


def test_vllm_frontend_keep_tokenizers_keeps_it(
    tokenizer_dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_FRONTEND_KEEP_TOKENIZERS", "1")
    assert _released(tokenizer_dirs["byte_level"]).holds_backend


@pytest.mark.parametrize(
    ("value", "expected"), [(None, True), ("0", True), ("1", False), ("2", False), ("x", True)]
)
def test_keep_tokenizers_values(value: str | None, expected: bool) -> None:
    environ = {} if value is None else {"VLLM_FRONTEND_KEEP_TOKENIZERS": value}
    assert release_enabled(environ) is expected


def test_ensure_backend_loads_it_on_a_worker_thread(tokenizer_dirs: dict[str, Path]) -> None:
    released = _released(tokenizer_dirs["byte_level"])
    assert not released.holds_backend
    loaded_on = record_reloads(released)
    asyncio.run(released.ensure_backend())
    assert released.holds_backend
    assert loaded_on and loaded_on[0] != threading.get_ident()
    asyncio.run(released.ensure_backend())  # held now: nothing more is loaded
    assert len(loaded_on) == 1


@pytest.mark.parametrize(
    ("fields", "sampling", "expected"),
    [
        ({}, {}, False),
        ({}, {"logprobs": 0}, True),
        ({}, {"prompt_logprobs": 0}, True),
        ({"echo": True}, {}, True),
        ({"use_beam_search": True}, {}, True),
        ({}, {"temperature": 0.0, "stop": ["x"]}, False),
    ],
)
def test_the_text_facade_loads_it_before_a_request_that_decodes(
    tokenizer_dirs: dict[str, Path],
    fields: dict[str, Any],
    sampling: dict[str, Any],
    expected: bool,
) -> None:
    released = _released(tokenizer_dirs["byte_level"])
    model = ModelSamplingInfo(max_model_len=128, eos_token_id=released.eos_token_id)
    text = TextLlm(LLM(None, EngineCoreRequest), released, 128, model)  # type: ignore[arg-type]
    request = TextRequest(
        request_id="r", prompt="hi", max_tokens=4, sampling=SamplingRequest(**sampling), **fields
    )
    asyncio.run(text.generate(request))
    assert released.holds_backend is expected


def test_detokenize_route_loads_it_on_a_worker_thread(tokenizer_dirs: dict[str, Path]) -> None:
    # /detokenize decodes with `tokenizers`: a let-go object comes back off the event loop.
    from vllm_frontend.server.app import ServerSettings
    from vllm_frontend.server.services import Services
    from vllm_frontend.server.tokenize import tokenize_handlers
    from vllm_frontend.server.transport import Request

    released = _released(tokenizer_dirs["byte_level"])
    kept = Tokenizer.from_dir(tokenizer_dirs["byte_level"], use_fastokens=False)
    assert not released.holds_backend
    loaded_on = record_reloads(released)
    _, detokenize = tokenize_handlers(ServerSettings(), Services(tokenizer=released))
    ids = released.encode("Hello world, again")
    body = json.dumps({"tokens": ids}).encode()
    response = asyncio.run(detokenize(Request("POST", "/detokenize", b"", {}, body)))
    assert loaded_on and loaded_on[0] != threading.get_ident()
    expected = kept.backend.decode(ids, skip_special_tokens=False)
    assert json.loads(response.body) == {"prompt": expected}
    assert released.holds_backend


def test_derender_routes_load_it_on_first_use_off_the_loop(
    tokenizer_dirs: dict[str, Path],
) -> None:
    # The scale-out derender routes read `tokenizers` pieces: their detokenizer is made on the
    # first derender request (the object loaded again on a worker thread), not at startup,
    # where it would keep the let-go object alive.
    from types import SimpleNamespace

    from vllm_frontend.server.derender import DerenderHandlers
    from vllm_frontend.server.transport import Request

    released = _released(tokenizer_dirs["byte_level"])
    model = ModelSamplingInfo(max_model_len=128, eos_token_id=released.eos_token_id)
    text = TextLlm(LLM(None, EngineCoreRequest), released, 128, model)  # type: ignore[arg-type]
    ctx = SimpleNamespace(text=text, check_model=lambda name: None, model_name="m")
    handlers = DerenderHandlers(ctx, SimpleNamespace(parsers=None))  # type: ignore[arg-type]
    assert not released.holds_backend
    loaded_on = record_reloads(released)
    ids = released.encode("Hello world, again", add_special_tokens=False)
    answer = {"request_id": "g", "choices": [{"index": 0, "token_ids": ids}]}
    body = json.dumps({"generate_responses": [answer]}).encode()
    route = "/v1/completions/derender"
    response = asyncio.run(handlers.derender_completion(Request("POST", route, b"", {}, body)))
    assert loaded_on and loaded_on[0] != threading.get_ident()
    kept = Tokenizer.from_dir(tokenizer_dirs["byte_level"], use_fastokens=False)
    assert json.loads(response.body)["choices"][0]["text"] == kept.backend.decode(ids)

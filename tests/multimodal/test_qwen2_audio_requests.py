"""Engine-request differential for Qwen2-Audio: vLLM 0.32's Python frontend and ours, each in
front of a recording mock engine, get the same audio chat requests (``input_audio`` and
``audio_url`` parts; clips at the model's 16 kHz and at other rates, which both resample; mono
and stereo; WAV, FLAC and MP3); the engine requests must be equal: prompt ids, placeholder
ranges, field factories, dtypes and shapes, the attention masks exactly, and the log-mel
features within the float32 rounding stated in :mod:`vllm_frontend.multimodal.processors.whisper`
(then cast to the engine's bfloat16, so within one bfloat16 step).

Item hashes: equal for clips at 16 kHz (both hash the decoded samples). A clip vLLM resamples
is hashed after resampling, and our resampler's sums are numpy's, not torch's: those hashes
differ from vLLM's (ours are stable across requests, which is what the engine's caches need).
vLLM's side runs with torchaudio (installed without its native code) for its resampler."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import httpx
import numpy as np
import pytest

from tests.multimodal.media.sounds import tone, with_soundfile
from tests.multimodal.recorded import Side, recorded_sides
from tests.support.tiny_qwen2_audio import AUDIO, tiny_qwen2_audio_dir
from tests.support.torchaudio_pure import TORCHAUDIO_PURE

pytestmark = pytest.mark.engine


def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Side]]:
    """This module's recorded stack, its directory and model made now (started by the
    session's ``recorded_idefics3_qwen2_audio`` beside test_idefics3_requests')."""
    tmp = tmp_path_factory.mktemp("records-audio")
    args = ["--limit-mm-per-prompt", '{"audio": 3}']
    return recorded_sides(tiny_qwen2_audio_dir(), tmp, args, {"PYTHONPATH": str(TORCHAUDIO_PURE)})


@pytest.fixture(scope="module")
def sides(recorded_idefics3_qwen2_audio: dict[str, Future[dict[str, Side]]]) -> dict[str, Side]:
    return recorded_idefics3_qwen2_audio["qwen2_audio"].result()


def _input_audio(data: bytes, fmt: str) -> dict[str, Any]:
    payload = base64.b64encode(data).decode()
    return {"type": "input_audio", "input_audio": {"data": payload, "format": fmt}}


def _audio_url(data: bytes, mime: str) -> dict[str, Any]:
    url = f"data:{mime};base64," + base64.b64encode(data).decode()
    return {"type": "audio_url", "audio_url": {"url": url}}


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _wav(seconds: float, rate: int, channels: int = 1, seed: int = 0) -> bytes:
    return with_soundfile(tone(seconds, rate, channels, seed), rate, "WAV", "FLOAT")


REQUESTS: dict[str, tuple[list[Any], bool]] = {
    # name: (messages, every clip at 16 kHz)
    "one clip": ([{"role": "user", "content": [_input_audio(_wav(1.5, 16000), "wav"),
                                               _text("What is it?")]}], True),
    "two clips and text": ([
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [_text("First"),
                                     _audio_url(_wav(0.7, 16000, 2, 1), "audio/wav"),
                                     _text("then"),
                                     _input_audio(_wav(3.2, 16000, 1, 2), "wav")]},
    ], True),
    "longer than 30 s": ([{"role": "user", "content": [_input_audio(_wav(31.0, 16000, 1, 3),
                                                                     "wav")]}], True),
    "flac": ([{"role": "user", "content": [
        _audio_url(with_soundfile(tone(2.0, 16000, 1, 4), 16000, "FLAC"), "audio/flac")]}], True),
    "44.1 kHz": ([{"role": "user", "content": [_input_audio(_wav(1.0, 44100, 1, 5), "wav")]}],
                 False),
    "8 kHz stereo": ([{"role": "user", "content": [_input_audio(_wav(2.5, 8000, 2, 6), "wav")]}],
                     False),
    "mp3 22.05 kHz": ([{"role": "user", "content": [
        _input_audio(with_soundfile(tone(1.2, 22050, 1, 7), 22050, "MP3"), "mp3")]}], False),
    "string content": ([{"role": "user", "content": "No audio here."}], True),
    # A format OpenAI's InputAudio refuses, beside text: the custom-role message branch takes
    # the message, and vLLM's parser only casts an input_audio part (the clip decodes).
    "format flac beside text": ([{"role": "user", "content": [
        _text("Hear:"), _input_audio(_wav(0.8, 16000, 1, 8), "flac")]}], True),
}  # fmt: skip


def _post(side: Side, messages: list[Any]) -> httpx.Response:
    body = {"messages": messages, "max_tokens": 3}
    return httpx.post(side.url + "/v1/chat/completions", json=body, timeout=120)


def _values(tensor: Any) -> np.ndarray:
    return np.asarray(tensor.numpy(), dtype=np.float64)


def _compare(vllm: Any, ours: Any, exact_hashes: bool) -> None:
    assert ours.prompt_token_ids == vllm.prompt_token_ids
    if vllm.mm_features is None:
        assert ours.mm_features is None
        return
    assert len(ours.mm_features) == len(vllm.mm_features)
    for theirs, mine in zip(vllm.mm_features, ours.mm_features, strict=True):
        assert mine.modality == theirs.modality == "audio"
        if exact_hashes:
            assert (mine.identifier, mine.mm_hash) == (theirs.identifier, theirs.mm_hash)
        pos, want_pos = mine.mm_position, theirs.mm_position
        assert (pos.offset, pos.length) == (want_pos.offset, want_pos.length)
        assert ours.prompt_token_ids[pos.offset : pos.offset + pos.length] == [AUDIO] * pos.length
        assert (mine.data is None) == (theirs.data is None)
        if theirs.data is None:
            continue
        assert set(mine.data) == set(theirs.data)
        for key, elem in theirs.data.items():
            got = mine.data[key]
            assert got.field == elem.field, key
            assert (got.data.dtype, tuple(got.data.shape)) == (
                elem.data.dtype,
                tuple(elem.data.shape),
            ), key
            want, have = _values(elem.data), _values(got.data)
            if key == "feature_attention_mask":
                assert np.array_equal(have, want)
            else:  # log-mel features in [-1.5, 1.5]: a bfloat16 step there is <= 2**-7
                assert float(np.max(np.abs(have - want))) <= 2**-7, key
                assert np.mean(have == want) > 0.99, key


@pytest.mark.parametrize("name", list(REQUESTS))
def test_engine_requests_equal(sides: dict[str, Side], name: str) -> None:
    messages, at_16k = REQUESTS[name]
    for _ in range(2):  # the second time, the engine holds the clips: sent without data
        responses = {k: _post(side, messages) for k, side in sides.items()}
        assert responses["ours"].status_code == responses["vllm"].status_code == 200, (
            responses["ours"].text,
            responses["vllm"].text,
        )
        [vllm] = sides["vllm"].new_requests()
        [ours] = sides["ours"].new_requests()
        assert (vllm.mm_features is None) == (name == "string content")
        _compare(vllm, ours, at_16k)


BAD = {
    "not audio": [{"role": "user", "content": [_input_audio(b"hello world" * 20, "wav")]}],
    "too many clips": [{"role": "user", "content": [_input_audio(_wav(0.2, 16000, 1, i), "wav")
                                                    for i in range(4)]}],
    "an image": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]}],
    # Alone in its message, a part OpenAI's InputAudio refuses (a format not wav or mp3, none,
    # no data, not an object): OpenAI's message branch reads it, and pydantic refuses it.
    "format flac": [{"role": "user", "content": [_input_audio(_wav(0.2, 16000), "flac")]}],
    "format WAV": [{"role": "user", "content": [_input_audio(_wav(0.2, 16000), "WAV")]}],
    "no format": [{"role": "user", "content": [
        {"type": "input_audio", "input_audio": {"data": "AAAA"}}]}],
    "no data": [{"role": "user", "content": [
        {"type": "input_audio", "input_audio": {"format": "wav"}}]}],
    "input_audio a string": [{"role": "user", "content": [
        {"type": "input_audio", "input_audio": "AAAA"}]}],
    "audio_url a string": [{"role": "user", "content": [
        {"type": "audio_url", "audio_url": "data:audio/wav;base64,AAAA"}]}],
    "audio_url without url": [{"role": "user", "content": [
        {"type": "audio_url", "audio_url": {}}]}],
}  # fmt: skip


@pytest.mark.parametrize("name", list(BAD))
def test_bad_input_answers_as_vllm(sides: dict[str, Side], name: str) -> None:
    responses = {k: _post(side, BAD[name]) for k, side in sides.items()}
    assert responses["ours"].status_code == responses["vllm"].status_code
    assert responses["ours"].json() == responses["vllm"].json()
    for side in sides.values():
        assert side.new_requests() == []

"""Audio chat end to end on the real CPU engine: the tiny Qwen2-Audio
(tests/support/tiny_qwen2_audio.py) behind vLLM 0.32's own server and behind ours (each with its
own engine of the same build and arguments), streaming and not, for ``input_audio`` (base64 WAV)
and ``audio_url`` (``data:`` URL) parts, one clip and several, a repeated clip (vLLM's sender
cache sends it as cached) and a clip vLLM resamples.

What is compared, exactly: the prompt token ids and usage (so the placeholder expansion, the
``<|AUDIO|>`` run each clip's feature length gives, is vLLM's) and the greedy output: content and
token ids. Not the logprobs: our log-mel features equal vLLM's to float32 rounding only (numpy's
FFT, not torch's; see test_qwen2_audio_requests.py), so the engine's input differs in the last
bits of some values, and through the bfloat16 model the logprobs differ by up to ~0.15 and
near-tied runners-up swap places. The greedy tokens of the clips at the model's rate come out
equal on this tiny model, which this module pins; another model or other clips could flip a near
tie without a bug, as the resampled clip did (only its prompt compares)."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest

from tests.multimodal.engine_pair import chat, engine_pair
from tests.multimodal.media.sounds import tone, with_soundfile
from tests.support.tiny_qwen2_audio import AUDIO, tiny_qwen2_audio_dir
from tests.support.torchaudio_pure import TORCHAUDIO_PURE

pytestmark = pytest.mark.engine

LIMITS = '{"audio": 2}'
ENGINE_ARGS = ("--max-model-len", "2048", "--gpu-memory-utilization", "0.2",
               "--limit-mm-per-prompt", LIMITS)  # fmt: skip
# Greedy output with its token ids (prompt ids too, when not streamed); no logprobs (see above).
EXTRA = {"return_token_ids": True}


@pytest.fixture(scope="module")
def urls() -> Iterator[dict[str, str]]:
    env = {"PYTHONPATH": str(TORCHAUDIO_PURE)}  # vLLM resamples with torchaudio
    yield from engine_pair(
        tiny_qwen2_audio_dir(), ENGINE_ARGS, ["--limit-mm-per-prompt", LIMITS], env
    )


def _wav(seconds: float, rate: int = 16000, channels: int = 1, seed: int = 0) -> bytes:
    return with_soundfile(tone(seconds, rate, channels, seed), rate, "WAV", "FLOAT")


def _input_audio(data: bytes) -> dict[str, Any]:
    return {"type": "input_audio", "input_audio": {"data": base64.b64encode(data).decode(),
                                                   "format": "wav"}}  # fmt: skip


def _audio_url(data: bytes) -> dict[str, Any]:
    url = "data:audio/wav;base64," + base64.b64encode(data).decode()
    return {"type": "audio_url", "audio_url": {"url": url}}


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _same(urls: dict[str, str], messages: list[Any], clips: int) -> None:
    for stream in (False, True):
        results = {name: chat(url, messages, stream, **EXTRA) for name, url in urls.items()}
        # Content, usage and sampled token ids (and the prompt ids, when not streamed).
        assert results["ours"] == results["vllm"], stream
        assert results["ours"]["token_ids"]
        if not stream:
            prompt = results["ours"]["prompt_token_ids"]
            runs = sum(1 for a, b in zip([None, *prompt], prompt, strict=False)
                       if b == AUDIO and a != AUDIO)  # fmt: skip
            assert runs == clips


def test_input_audio(urls: dict[str, str]) -> None:
    _same(urls, [{"role": "user", "content": [_input_audio(_wav(1.5)), _text("What is it?")]}], 1)


def test_audio_url_and_interleaved_text(urls: dict[str, str]) -> None:
    content = [_text("First"), _audio_url(_wav(0.7, 16000, 2, 1)), _text("then"),
               _input_audio(_wav(3.2, seed=2))]  # fmt: skip
    _same(
        urls, [{"role": "system", "content": "Be brief."}, {"role": "user", "content": content}], 2
    )


def test_repeated_clip(urls: dict[str, str]) -> None:
    clip = _audio_url(_wav(2.0, seed=3))
    _same(urls, [{"role": "user", "content": [clip, _text("Once.")]}], 1)
    _same(urls, [{"role": "user", "content": [_text("Again:"), clip, clip]}], 2)


def test_resampled_clip(urls: dict[str, str]) -> None:
    # Resampled, the clip's samples are ours to float32 rounding (numpy's sums, not torch's), on
    # top of the features' rounding: a near tie of the random-weight model flipped the greedy
    # output once (at its tenth token, CI rehearsal), so only the prompt compares here.
    messages = [{"role": "user", "content": [_input_audio(_wav(1.0, 44100, 1, 5))]}]
    results = {name: chat(url, messages, False, **EXTRA) for name, url in urls.items()}
    assert results["ours"]["prompt_token_ids"] == results["vllm"]["prompt_token_ids"]
    assert results["ours"]["usage"]["prompt_tokens"] == results["vllm"]["usage"]["prompt_tokens"]
    assert results["ours"]["token_ids"] and results["vllm"]["token_ids"]

"""Audio clips: decoded at their own rate to float32 mono, with vLLM's limits and errors."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import numpy as np
import pytest

pytest.importorskip("soundfile")
pytest.importorskip("av")

from tests.multimodal.media.images import data_url
from tests.multimodal.media.sounds import clips, tone, with_soundfile
from vllm_frontend.multimodal.media import MediaError, MediaLoader, MediaPolicy
from vllm_frontend.multimodal.media.loader import input_audio_url


def load(url: str, kwargs: dict[str, Any] | None = None, **policy: Any) -> tuple[np.ndarray, Any]:
    async def run() -> tuple[np.ndarray, Any]:
        loader = MediaLoader(MediaPolicy(**policy))
        try:
            return await loader.load_audio(url, kwargs)
        finally:
            await loader.aclose()

    return asyncio.run(run())


def error(url: str, kwargs: dict[str, Any] | None = None, **policy: Any) -> MediaError:
    with pytest.raises(MediaError) as caught:
        load(url, kwargs, **policy)
    return caught.value


def test_a_float_wav_comes_back_sample_for_sample() -> None:
    samples = tone(0.25, 16000, 1)
    audio, rate = load(data_url(with_soundfile(samples, 16000, "WAV", "FLOAT"), "audio/wav"))
    assert rate == 16000
    assert audio.dtype == np.float32
    assert np.array_equal(audio, samples[:, 0])


def test_stereo_is_averaged_to_mono_at_the_files_own_rate() -> None:
    samples = tone(0.25, 44100, 2)
    audio, rate = load(data_url(with_soundfile(samples, 44100, "WAV", "FLOAT")))
    assert rate == 44100
    assert np.allclose(audio, samples.mean(axis=1), atol=1e-7)


def test_every_clip_format_decodes() -> None:
    for name, data in clips().items():
        audio, rate = load(data_url(data, "audio/x"))
        assert audio.ndim == 1 and audio.dtype == np.float32 and audio.size > 1000, name
        assert rate in (16000, 24000, 44100, 48000), name


def test_input_audio_parts_are_data_urls() -> None:
    data = base64.b64encode(clips()["mono.ogg"]).decode()
    assert load(input_audio_url(data, "ogg"))[1] == 16000


def test_bytes_that_are_no_audio_are_a_400() -> None:
    err = error(data_url(b"definitely not audio" * 50, "audio/wav"))
    assert (err.status, err.err_type) == (400, "BadRequestError")
    assert err.message.startswith("Invalid or corrupted audio data.")


def test_a_clip_over_the_size_limit_is_refused_before_decoding() -> None:
    data = with_soundfile(tone(1.0, 44100, 2), 44100, "WAV", "FLOAT")  # ~350 KB
    policy = {"max_audio_clip_mb": 0}
    err = error(data_url(data), **policy)
    assert (err.status, err.err_type, err.param) == (400, "BadRequestError", "audio_filesize_mb")
    assert err.message.startswith("Maximum file size exceeded (parameter=audio_filesize_mb")


def test_a_clip_over_the_duration_limit_is_refused() -> None:
    data = with_soundfile(tone(2.0, 8000, 1), 8000, "WAV", "PCM_16")
    err = error(data_url(data), max_audio_decode_duration_s=1)
    assert err.status == 400
    assert err.message.startswith("Audio exceeds maximum allowed duration of 1s")


def test_an_unknown_audio_backend_is_a_400() -> None:
    err = error(data_url(clips()["mono.ogg"]), {"audio": {"audio_backend": "nope"}})
    assert (err.status, err.message) == (
        400,
        "Unknown audio_backend 'nope'. Available backends: "
        "['auto', 'soundfile', 'pyav', 'torchcodec']",
    )


def test_pyav_can_be_chosen() -> None:
    data = clips()["mono_float.wav"]
    audio, rate = load(data_url(data), {"audio": {"audio_backend": "pyav"}})
    reference, _ = load(data_url(data))
    assert rate == 16000
    assert np.array_equal(audio, reference)

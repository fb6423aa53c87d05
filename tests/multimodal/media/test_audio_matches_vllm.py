"""Audio decoded exactly as vLLM 0.32's AudioMediaIO decodes it here (soundfile, then PyAV;
no torchcodec): the same samples and rate, and its answer for bad clips."""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

pytest.importorskip("soundfile")
pytest.importorskip("av")

from tests.multimodal.media.http_server import MediaServer
from tests.multimodal.media.images import data_url
from tests.multimodal.media.sounds import clips, tone, with_soundfile
from tests.multimodal.media.vllm_reference import (
    our_error,
    vllm_connector,
    vllm_outcome,
)
from vllm_frontend.multimodal.media import MediaError, MediaLoader, MediaPolicy

pytestmark = pytest.mark.oracle  # imports vLLM as the reference

CLIPS = clips()


def ours(url: str, kwargs: dict[str, Any] | None = None, **policy: Any) -> Any:
    async def run() -> Any:
        loader = MediaLoader(MediaPolicy.from_env(allow_private_addresses=True, **policy))
        try:
            return await loader.load_audio(url, kwargs)
        finally:
            await loader.aclose()

    try:
        return "ok", asyncio.run(run())
    except MediaError as exc:
        return "error", our_error(exc)


def theirs(url: str, kwargs: dict[str, Any] | None = None, **extra: Any) -> Any:
    return vllm_outcome(vllm_connector(media_io_kwargs=kwargs, **extra).fetch_audio_async(url))


def same(url: str, kwargs: dict[str, Any] | None = None, **extra: Any) -> None:
    mine, reference = ours(url, kwargs, **extra), theirs(url, kwargs, **extra)
    assert mine[0] == reference[0], (mine, reference)
    if mine[0] == "error":
        assert mine == reference
        return
    (audio, rate), (their_audio, their_rate) = mine[1], reference[1]
    assert rate == their_rate
    assert audio.dtype == their_audio.dtype
    assert np.array_equal(audio, their_audio)


@pytest.mark.parametrize("backend", [None, "soundfile", "pyav"])
@pytest.mark.parametrize("name", list(CLIPS))
def test_clips_decode_to_vllms_samples(name: str, backend: str | None) -> None:
    kwargs = {"audio": {"audio_backend": backend}} if backend else None
    same(data_url(CLIPS[name], "audio/x"), kwargs)


def test_bad_clips_and_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    same(data_url(b"not audio" * 100, "audio/wav"))
    same(data_url(CLIPS["stereo.flac"][:2000], "audio/flac"))
    same(data_url(CLIPS["stereo_16bit.wav"][:50], "audio/wav"))
    same(data_url(CLIPS["mono.ogg"]), {"audio": {"audio_backend": "nope"}})
    monkeypatch.setenv("VLLM_MAX_AUDIO_DECODE_DURATION_S", "1")
    long_clip = with_soundfile(tone(2.0, 8000, 1), 8000, "WAV", "PCM_16")
    same(data_url(long_clip))
    same(data_url(long_clip), {"audio": {"audio_backend": "pyav"}})
    monkeypatch.setenv("VLLM_MAX_AUDIO_DECODE_DURATION_S", "600")
    monkeypatch.setenv("VLLM_MAX_AUDIO_CLIP_FILESIZE_MB", "0")
    same(data_url(CLIPS["mono.ogg"]))


@pytest.fixture(scope="module")
def server() -> Iterator[MediaServer]:
    media = MediaServer()
    media.files.update(CLIPS)
    media.files["big.wav"] = with_soundfile(tone(8.0, 48000, 2), 48000, "WAV", "FLOAT")
    with media.running() as running:
        yield running


def test_over_http_and_from_files(
    server: MediaServer, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_MEDIA_FETCH_MAX_RETRIES", "1")
    same(server.url("files/stereo.mp3"))
    same(server.url("files/missing.wav"))
    monkeypatch.setenv("VLLM_MAX_AUDIO_CLIP_FILESIZE_MB", "1")
    same(server.url("files/big.wav"))  # over the clip limit: vLLM's 400, not the download 422
    for name in ("mono.aac", "stereo.flac"):
        (tmp_path / name).write_bytes(CLIPS[name])
        same(f"file://{tmp_path}/{name}", allowed_local_media_path=str(tmp_path))
    (tmp_path / "big.wav").write_bytes(server.files["big.wav"])
    same(f"file://{tmp_path}/big.wav", allowed_local_media_path=str(tmp_path))

"""Encoded test clips (WAV, FLAC, OGG, MP3 with soundfile; AAC in ADTS and M4A with PyAV)."""

from __future__ import annotations

import io

import numpy as np


def tone(seconds: float, rate: int, channels: int = 1, seed: int = 0) -> np.ndarray:
    """A chord plus a little noise, ``[samples, channels]`` float32 in [-0.9, 0.9]."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    columns = [
        0.5 * np.sin(2 * np.pi * (220 + 110 * c) * t) + 0.05 * rng.standard_normal(t.size)
        for c in range(channels)
    ]
    return np.clip(np.stack(columns, axis=1), -0.9, 0.9).astype(np.float32)


def with_soundfile(samples: np.ndarray, rate: int, fmt: str, subtype: str | None = None) -> bytes:
    """``samples`` encoded by libsndfile as ``fmt`` (WAV, FLAC, OGG, MP3)."""
    import soundfile

    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, format=fmt, subtype=subtype)
    return buffer.getvalue()


def with_pyav(samples: np.ndarray, rate: int, container: str, codec: str = "aac") -> bytes:
    """``samples`` encoded by FFmpeg into ``container`` (``adts``, ``ipod`` for m4a)."""
    import av

    channels = samples.shape[1]
    layout = "mono" if channels == 1 else "stereo"
    buffer = io.BytesIO()
    with av.open(buffer, "w", format=container) as out:
        stream = out.add_stream(codec, rate=rate)
        stream.layout = layout  # type: ignore[union-attr]
        planar = np.ascontiguousarray(samples.T)
        for start in range(0, planar.shape[1], 1024):
            frame = av.AudioFrame.from_ndarray(
                planar[:, start : start + 1024], format="fltp", layout=layout
            )
            frame.sample_rate = rate
            for packet in stream.encode(frame):  # type: ignore[union-attr]
                out.mux(packet)
        for packet in stream.encode(None):  # type: ignore[union-attr]
            out.mux(packet)
    return buffer.getvalue()


def clips() -> dict[str, bytes]:
    """Named encoded clips of several formats, rates and channel counts."""
    stereo = tone(0.5, 44100, 2, 1)
    mono = tone(0.4, 16000, 1, 2)
    return {
        "stereo_16bit.wav": with_soundfile(stereo, 44100, "WAV", "PCM_16"),
        "mono_float.wav": with_soundfile(mono, 16000, "WAV", "FLOAT"),
        "mono_8bit.wav": with_soundfile(mono, 16000, "WAV", "PCM_U8"),
        "stereo.flac": with_soundfile(stereo, 44100, "FLAC"),
        "mono.ogg": with_soundfile(mono, 16000, "OGG", "VORBIS"),
        "stereo.mp3": with_soundfile(stereo, 44100, "MP3"),
        "mono.aac": with_pyav(tone(0.3, 24000, 1, 3), 24000, "adts"),
        "stereo.m4a": with_pyav(tone(0.3, 48000, 2, 4), 48000, "ipod"),
    }

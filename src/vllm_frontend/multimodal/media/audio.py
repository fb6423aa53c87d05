"""Audio decoding as vLLM 0.32's ``AudioMediaIO`` decodes it where torchcodec is absent:
libsndfile (soundfile) first, PyAV (FFmpeg) for what libsndfile does not recognise; float32
samples at the file's own rate, channels averaged to mono, with vLLM's size, duration and
decoded-size limits. Resampling to a model's rate is the processor's business, not loading's.
soundfile and av are optional dependencies (the ``audio`` extra)."""

from __future__ import annotations

import io
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from .errors import MediaError
from .policy import MIB

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)

AUDIO_BACKENDS = ("auto", "soundfile", "pyav", "torchcodec")
"""The ``audio_backend`` values vLLM accepts (torchcodec is not implemented here)."""

_UNRECOGNISED = {0, 1, 3, 4}  # libsndfile: garbled, unrecognised, malformed, unsupported
_CORRUPT = (
    "Invalid or corrupted audio data. Ensure the input is a valid audio or video file (e.g. a "
    "complete WAV, MP3, or MP4)."
)


class AudioOptions(msgspec.Struct, frozen=True):
    """How audio is decoded: ``media_io_kwargs["audio"]`` and the policy's limits."""

    backend: str
    max_bytes: int
    max_duration_s: float | None
    max_decode_bytes: int | None

    @classmethod
    def from_kwargs(
        cls,
        kwargs: Mapping[str, Any] | None,
        *,
        max_clip_mb: int,
        max_duration_s: float | None,
        max_decode_bytes: int | None,
    ) -> AudioOptions:
        """Options as vLLM reads them; 400 with its message for an unknown ``audio_backend``."""
        backend = (kwargs or {}).get("audio_backend")
        if backend is not None and backend not in AUDIO_BACKENDS:
            raise MediaError.bad_request(
                f"Unknown audio_backend {backend!r}. Available backends: {list(AUDIO_BACKENDS)}"
            )
        return cls(backend or "auto", int(max_clip_mb * MIB), max_duration_s, max_decode_bytes)

    def too_large(self, size_mb: float) -> MediaError:
        """vLLM's 400 for an encoded clip over ``VLLM_MAX_AUDIO_CLIP_FILESIZE_MB``."""
        return MediaError.invalid(
            "Maximum file size exceeded", parameter="audio_filesize_mb", value=size_mb
        )


def _duration_error(limit: float | None, detail: str) -> MediaError:
    return MediaError.bad_request(
        f"Audio exceeds maximum allowed duration of {limit}s ({detail}). Set "
        "VLLM_MAX_AUDIO_DECODE_DURATION_S to increase this limit."
    )


def _with_soundfile(source: io.BytesIO | Path, options: AudioOptions) -> tuple[np.ndarray, int]:
    import numpy as np
    import soundfile

    with soundfile.SoundFile(source) as f:
        rate = f.samplerate
        limit = options.max_duration_s
        if limit is not None and f.frames / rate > limit:
            raise _duration_error(limit, f"file contains {f.frames / rate:.1f}s at {rate}Hz")
        if options.max_decode_bytes is not None:
            estimate = f.frames * f.channels * 4
            if estimate > options.max_decode_bytes:
                raise MediaError.bad_request(
                    f"Audio would allocate {estimate / MIB:.0f} MiB of PCM ({f.frames} frames x "
                    f"{f.channels} channels x 4B), exceeding the "
                    f"{options.max_decode_bytes / MIB:.0f} MiB limit. Set "
                    "VLLM_MAX_AUDIO_DECODE_BYTES to increase this limit."
                )
        samples = f.read(dtype="float32", always_2d=False).T
    if samples.ndim > 1:
        samples = np.mean(samples, axis=tuple(range(samples.ndim - 1)))
    return samples, rate


def _with_pyav(source: io.BytesIO | Path, options: AudioOptions) -> tuple[np.ndarray, int]:
    import av
    import numpy as np

    try:
        container = av.open(source, mode="r")
    except av.error.FFmpegError as exc:
        raise MediaError.bad_request(_CORRUPT) from exc
    with container:
        if not container.streams.audio:
            raise MediaError.bad_request("No audio stream found.")
        stream = container.streams.audio[0]
        stream.thread_type = "AUTO"  # type: ignore[attr-defined]
        rate = stream.rate
        limit = options.max_duration_s
        if limit is not None:
            declared = None
            if stream.duration and stream.time_base:
                declared = float(stream.duration * stream.time_base)
            elif container.duration:
                declared = container.duration / 1_000_000
            if declared is not None and declared > limit:
                raise _duration_error(limit, f"metadata reports {declared:.1f}s")
        max_samples = int(rate * limit) if limit is not None else None
        chunks: list[np.ndarray] = []
        samples = decoded_bytes = 0
        try:
            for frame in container.decode(stream):
                array = frame.to_ndarray()
                samples += array.shape[-1]
                decoded_bytes += array.nbytes
                chunks.append(array)
                if max_samples is not None and samples > max_samples:
                    raise _duration_error(limit, f"decoded {samples} samples at {rate}Hz")
                if (
                    options.max_decode_bytes is not None
                    and decoded_bytes > options.max_decode_bytes
                ):
                    raise MediaError.bad_request(
                        f"Audio decode exceeded {options.max_decode_bytes / MIB:.0f} MiB memory "
                        f"limit ({decoded_bytes / MIB:.0f} MiB decoded so far). Set "
                        "VLLM_MAX_AUDIO_DECODE_BYTES to increase this limit."
                    )
        except av.error.FFmpegError as exc:
            raise MediaError.bad_request(_CORRUPT) from exc
    if not chunks:
        raise MediaError.bad_request("No audio found in the input.")
    audio = np.concatenate(chunks, axis=-1).astype(np.float32)
    if audio.ndim > 1:
        audio = np.mean(audio, axis=0)
    return audio, rate


def _missing(extra_module: str) -> MediaError:
    return MediaError(
        500,
        "InternalServerError",
        f"audio decoding needs the {extra_module!r} package (install vllm-frontend-py[audio])",
        server_fault=True,
    )


def decode_audio(source: bytes | Path, options: AudioOptions) -> tuple[np.ndarray, int]:
    """Samples (float32, mono) and sample rate of an encoded clip or a file (blocking; on a
    worker thread). MediaError as vLLM answers for what cannot be decoded."""
    try:
        size = source.stat().st_size if isinstance(source, Path) else len(source)
        if size > options.max_bytes:
            raise options.too_large(size / MIB)
        return _decode(source, options)
    except MediaError:
        raise
    except Exception as exc:
        MediaError.raise_from(exc)


def _decode(source: bytes | Path, options: AudioOptions) -> tuple[np.ndarray, int]:
    def opened() -> io.BytesIO | Path:
        return io.BytesIO(source) if isinstance(source, bytes) else source

    backend = options.backend
    if backend == "torchcodec":
        raise MediaError(
            501, "NotImplementedError", "the 'torchcodec' audio backend is not implemented"
        )
    if backend == "pyav":
        return _pyav_or_missing(opened(), options)
    try:
        import soundfile
    except ImportError:
        if backend == "soundfile":
            raise _missing("soundfile") from None
        logger.error("soundfile is not installed: decoding audio with PyAV")
    else:
        try:
            return _with_soundfile(opened(), options)
        except soundfile.LibsndfileError as exc:
            # libsndfile knows fewer containers than FFmpeg: anything it does not recognise
            # goes to PyAV (in "auto"); a recognised but broken file is the client's.
            if backend == "soundfile" or exc.code not in _UNRECOGNISED:
                MediaError.raise_from(exc)
    return _pyav_or_missing(opened(), options)


def _pyav_or_missing(source: io.BytesIO | Path, options: AudioOptions) -> tuple[np.ndarray, int]:
    try:
        import av  # noqa: F401
    except ImportError:
        raise _missing("av") from None
    return _with_pyav(source, options)


def check_base64_size(payload: str, options: AudioOptions) -> None:
    """vLLM refuses a base64 clip by its length before decoding it."""
    if len(payload) > 4 * ((options.max_bytes + 2) // 3):
        raise options.too_large((len(payload) * 3 / 4) / MIB)

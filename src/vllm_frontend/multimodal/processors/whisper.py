"""Whisper log-mel features (the audio input of Qwen2-Audio, Qwen2.5-Omni and Whisper-style
encoders): transformers' ``WhisperFeatureExtractor`` in numpy, following the torch path that
transformers takes whenever torch is installed (as it is under vLLM): float32 STFT of the
reflect-padded waveform (periodic Hann window), power spectrum, Slaney mel filters, log10 floored
at 1e-10 and at the clip's maximum minus 8, then ``(x + 4) / 4``.

The float32 FFT and matrix product are numpy's, not torch's, so features agree with transformers'
to float32 rounding, not bit for bit (most within 1e-6; up to ~6e-5 in mel bins many decades
below a clip's peak, where transformers' own numpy path differs from its torch path as much); the
mel filters, padding, truncation and attention masks are exact. The audio token count per clip is
the model's (Qwen2-Audio: :func:`qwen2_audio_output_length` of the mask's sum).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from vllm_frontend.multimodal.processors.options import Options

DEFAULTS: dict[str, Any] = {
    "feature_size": 80,
    "sampling_rate": 16000,
    "hop_length": 160,
    "chunk_length": 30,
    "n_fft": 400,
    "padding_value": 0.0,
    "dither": 0.0,
    "return_attention_mask": False,
}

# Qwen2AudioProcessor's and Qwen2_5OmniProcessor's audio_kwargs defaults (what vLLM calls with).
QWEN_AUDIO_DEFAULTS: dict[str, Any] = {"return_attention_mask": True, "padding": "max_length"}

_CALL_DEFAULTS: dict[str, Any] = {
    "sampling_rate": None,
    "padding": "max_length",
    "max_length": None,
    "truncation": True,
    "pad_to_multiple_of": None,
    "return_attention_mask": None,
    "do_normalize": False,
}


def _hertz_to_mel_slaney(freq: np.ndarray | float) -> np.ndarray:
    """Slaney's mel scale of ``freq`` Hz (linear below 1 kHz, logarithmic above)."""
    freq = np.asarray(freq, dtype=np.float64)
    mels = 3.0 * freq / 200.0
    logstep = 27.0 / np.log(6.4)
    log_region = freq >= 1000.0
    return np.where(log_region, 15.0 + np.log(np.maximum(freq, 1e-300) / 1000.0) * logstep, mels)


def _mel_to_hertz_slaney(mels: np.ndarray) -> np.ndarray:
    """The frequency in Hz of Slaney mels."""
    freq = 200.0 * mels / 3.0
    logstep = np.log(6.4) / 27.0
    log_region = mels >= 15.0
    freq[log_region] = 1000.0 * np.exp(logstep * (mels[log_region] - 15.0))
    return freq


def mel_filter_bank(
    num_frequency_bins: int,
    num_mel_filters: int,
    min_frequency: float,
    max_frequency: float,
    sampling_rate: int,
) -> np.ndarray:
    """Slaney-normalised triangular mel filters on Slaney's mel scale, (frequency bins, mels)
    float64: transformers' ``mel_filter_bank(norm="slaney", mel_scale="slaney")``."""
    mel_min = float(_hertz_to_mel_slaney(min_frequency))
    mel_max = float(_hertz_to_mel_slaney(max_frequency))
    filter_freqs = _mel_to_hertz_slaney(np.linspace(mel_min, mel_max, num_mel_filters + 2))
    fft_freqs = np.linspace(0, sampling_rate // 2, num_frequency_bins)
    filter_diff = np.diff(filter_freqs)
    slopes = np.expand_dims(filter_freqs, 0) - np.expand_dims(fft_freqs, 1)
    down_slopes = -slopes[:, :-2] / filter_diff[:-1]
    up_slopes = slopes[:, 2:] / filter_diff[1:]
    filters = np.maximum(np.zeros(1), np.minimum(down_slopes, up_slopes))
    enorm = 2.0 / (filter_freqs[2 : num_mel_filters + 2] - filter_freqs[:num_mel_filters])
    return filters * np.expand_dims(enorm, 0)


class WhisperFeatureExtractor:
    """transformers' ``WhisperFeatureExtractor`` of one model's config; ``call_defaults`` are a
    processor's audio defaults (:data:`QWEN_AUDIO_DEFAULTS` for the Qwen audio models)."""

    def __init__(
        self, config: Mapping[str, Any], call_defaults: Mapping[str, Any] | None = None
    ) -> None:
        self.options = Options(DEFAULTS, config)
        o = self.options
        self.n_samples = int(o["chunk_length"]) * int(o["sampling_rate"])
        self.mel_filters = mel_filter_bank(
            1 + int(o["n_fft"]) // 2, int(o["feature_size"]), 0.0, 8000.0, int(o["sampling_rate"])
        )
        self._filters32 = np.ascontiguousarray(self.mel_filters.T, dtype=np.float32)
        n_fft = int(o["n_fft"])
        # torch.hann_window (periodic), in float32.
        self._window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)).astype(np.float32)
        self._call = Options(
            {**_CALL_DEFAULTS, "return_attention_mask": o["return_attention_mask"]},
            call_defaults or {},
        )

    def extract(
        self, audios: Sequence[np.ndarray | Sequence[float]], **kwargs: Any
    ) -> dict[str, np.ndarray]:
        """``input_features`` (clips, mels, frames) float32 of mono clips at the model's sampling
        rate, padded or truncated as the call asks (30 s by default), and ``attention_mask``
        (clips, frames) int32 of the real audio's frames when asked for."""
        c = self._call.merged(kwargs)
        o = self.options
        if c["sampling_rate"] is not None and c["sampling_rate"] != o["sampling_rate"]:
            raise ValueError(
                f"The model's feature extractor expects audio sampled at {o['sampling_rate']} Hz, "
                f"got {c['sampling_rate']} Hz."
            )
        clips = [np.asarray(audio, dtype=np.float32) for audio in audios]
        if any(clip.ndim != 1 for clip in clips):
            raise ValueError("Only mono-channel audio is supported")
        waveforms, mask = self._pad(clips, c)
        if c["do_normalize"]:
            waveforms = _zero_mean_unit_var(waveforms, mask, float(o["padding_value"]))
        out = {"input_features": self._log_mel(waveforms)}
        if c["return_attention_mask"]:
            hop = int(o["hop_length"])
            frames = mask[:, ::hop]
            if mask.shape[1] % hop != 0:
                frames = frames[:, :-1]
            out["attention_mask"] = frames
        elif c["do_normalize"]:
            out["attention_mask"] = mask  # transformers returns the per-sample mask then
        return out

    def _pad(self, clips: list[np.ndarray], c: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        """The clips truncated and padded into one (clips, samples) float32 batch, and its
        (clips, samples) int32 mask of real samples, as ``SequenceFeatureExtractor.pad``."""
        padding = c["padding"]
        max_length = c["max_length"] or self.n_samples
        multiple = c["pad_to_multiple_of"]
        if c["truncation"]:
            limit = max_length
            if multiple and limit % multiple:
                limit = (limit // multiple + 1) * multiple
            clips = [clip[:limit] for clip in clips]
        longest = max(len(clip) for clip in clips)
        if padding in (True, "longest"):
            length = longest
        elif padding == "max_length":
            length = max_length
        elif padding in (False, "do_not_pad", None):
            length = longest
            multiple = None
        else:
            raise ValueError(f"unknown padding {padding!r}")
        if multiple and length % multiple:
            length = (length // multiple + 1) * multiple
        if any(len(clip) > length for clip in clips) or (
            padding in (False, "do_not_pad", None) and len({len(clip) for clip in clips}) > 1
        ):
            raise ValueError("clips of different lengths cannot form one batch")
        waveforms = np.full((len(clips), length), self.options["padding_value"], np.float32)
        mask = np.zeros((len(clips), length), dtype=np.int32)
        for index, clip in enumerate(clips):
            waveforms[index, : len(clip)] = clip
            mask[index, : len(clip)] = 1
        return waveforms, mask

    def _log_mel(self, waveforms: np.ndarray) -> np.ndarray:
        """Whisper's log-mel spectrogram of each (float32) waveform, (clips, mels, frames)."""
        o = self.options
        n_fft, hop = int(o["n_fft"]), int(o["hop_length"])
        if o["dither"]:
            noise = np.random.default_rng().standard_normal(waveforms.shape).astype(np.float32)
            waveforms = waveforms + np.float32(o["dither"]) * noise
        padded = np.pad(waveforms, ((0, 0), (n_fft // 2, n_fft // 2)), mode="reflect")
        frames = np.lib.stride_tricks.sliding_window_view(padded, n_fft, axis=-1)[:, ::hop]
        frames = frames[:, :-1]  # the last frame is dropped, as Whisper does
        spectrum = np.fft.rfft(frames * self._window, axis=-1)
        power = np.abs(spectrum) ** 2  # (clips, frames, bins) float32
        mel = np.matmul(self._filters32, power.transpose(0, 2, 1))
        log_spec = np.log10(np.maximum(mel, np.float32(1e-10)))
        peaks = log_spec.max(axis=(1, 2), keepdims=True)
        log_spec = np.maximum(log_spec, peaks - np.float32(8.0))
        return ((log_spec + np.float32(4.0)) / np.float32(4.0)).astype(np.float32)


def _zero_mean_unit_var(
    waveforms: np.ndarray, mask: np.ndarray, padding_value: float
) -> np.ndarray:
    """Each waveform's real samples normalised to zero mean and unit variance, padding reset."""
    out = np.empty_like(waveforms)
    for index, (waveform, length) in enumerate(zip(waveforms, mask.sum(-1), strict=True)):
        part = waveform[:length]
        out[index] = (waveform - part.mean()) / np.sqrt(part.var() + 1e-7)
        out[index, length:] = padding_value
    return out


def qwen2_audio_output_length(num_frames: int) -> int:
    """How many audio tokens Qwen2-Audio's encoder gives for ``num_frames`` mel frames (the
    feature mask's sum): two stride-2 reductions, as vLLM's ``_get_feat_extract_output_lengths``."""
    feat_length = (num_frames - 1) // 2 + 1
    return (feat_length - 2) // 2 + 1

"""Our Whisper log-mel features equal transformers' ``WhisperFeatureExtractor``: the mel filters,
padding, truncation and attention masks exactly, the float32 features within float32 rounding.

transformers computes the features with torch (``torch.stft``, float32) whenever torch is
installed, as it is under vLLM, so that path is the reference; without torch it takes a float64
numpy path. Ours is a float32 numpy STFT. The FFT's rounding (about 1e-7 of a clip's peak power)
grows, in log10, in the mel bins whose power is several decades below the peak (a pure tone's
far bins): there torch's float32 features differ from transformers' own float64 numpy path by up
to ~6e-5. The test holds ours to that: no further from the torch path than transformers' numpy
path is (plus 1e-5), and within 1e-5 of the float64 numpy path, whose rounding is negligible."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from transformers import WhisperFeatureExtractor as ReferenceExtractor
from transformers.models.whisper import feature_extraction_whisper
from vllm.model_executor.models.qwen2_audio import _get_feat_extract_output_lengths

from tests.multimodal.processor_oracle import assert_close_outputs
from vllm_frontend.multimodal.processors.whisper import (
    QWEN_AUDIO_DEFAULTS,
    WhisperFeatureExtractor,
    qwen2_audio_output_length,
)

pytestmark = pytest.mark.oracle

# Qwen/Qwen2-Audio-7B-Instruct's preprocessor_config.json values (Qwen2.5-Omni's are the same).
QWEN2_AUDIO: dict[str, Any] = {
    "chunk_length": 30,
    "feature_size": 128,
    "hop_length": 160,
    "n_fft": 400,
    "n_samples": 480000,
    "nb_max_frames": 3000,
    "padding_side": "right",
    "padding_value": 0.0,
    "return_attention_mask": True,
    "sampling_rate": 16000,
}
# openai/whisper-small's (80 mels, no attention mask).
WHISPER_SMALL: dict[str, Any] = {
    "chunk_length": 30,
    "feature_size": 80,
    "hop_length": 160,
    "n_fft": 400,
    "padding_value": 0.0,
    "return_attention_mask": False,
    "sampling_rate": 16000,
}


def _clips(seed: int) -> list[np.ndarray]:
    """Noise, tones, chirps, silence, near-silence, short and over-long clips at 16 kHz."""
    rng = np.random.default_rng(seed)
    t = np.arange(16000 * 3) / 16000
    return [
        rng.normal(0, 0.1, 16000 * 2).astype(np.float32),
        (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32),
        (0.3 * np.sin(2 * np.pi * (100 + 2000 * t) * t)).astype(np.float32),
        np.zeros(8000, dtype=np.float32),
        rng.normal(0, 1e-6, 4000).astype(np.float32),
        rng.uniform(-1, 1, 400).astype(np.float32),
        rng.normal(0, 0.2, 16000 * 31 + 77).astype(np.float32),  # truncated at 30 s
        rng.normal(0, 0.05, 16000 * 5 + 123).astype(np.float64),  # float64 input
    ]


def _both_paths(
    reference: Any, audios: list[np.ndarray], kwargs: dict[str, Any]
) -> tuple[Any, Any]:
    """transformers' output by its torch path and by its numpy path."""
    torch_path = reference(audios, sampling_rate=16000, return_tensors="np", **kwargs)
    available = feature_extraction_whisper.is_torch_available
    feature_extraction_whisper.is_torch_available = lambda: False
    try:
        numpy_path = reference(audios, sampling_rate=16000, return_tensors="np", **kwargs)
    finally:
        feature_extraction_whisper.is_torch_available = available
    return torch_path, numpy_path


@pytest.mark.parametrize("name", ["qwen2-audio", "whisper-small"])
def test_features_and_masks_equal_transformers(name: str) -> None:
    config = QWEN2_AUDIO if name == "qwen2-audio" else WHISPER_SMALL
    reference = ReferenceExtractor(**config)
    call_defaults = QWEN_AUDIO_DEFAULTS if name == "qwen2-audio" else None
    ours = WhisperFeatureExtractor(config, call_defaults)
    assert np.array_equal(ours.mel_filters, reference.mel_filters)
    clips = _clips(seed=len(name))
    calls: list[tuple[list[np.ndarray], dict[str, Any]]] = [([clip], {}) for clip in clips]
    calls += [
        (clips[:3], {}),
        (clips[3:6], {"padding": "longest"}),
        (clips[:2], {"padding": "longest", "pad_to_multiple_of": 1000}),
        ([clips[6]], {"truncation": False, "padding": "longest"}),
        (clips[:2], {"do_normalize": True}),
        (clips[1:3], {"max_length": 40000, "return_attention_mask": True}),
    ]
    for audios, kwargs in calls:
        kwargs = {**(call_defaults or {}), **kwargs}
        torch_path, numpy_path = _both_paths(reference, audios, kwargs)
        got = ours.extract(audios, sampling_rate=16000, **kwargs)
        what = f"{name} {[len(a) for a in audios]} {kwargs}"
        assert_close_outputs(dict(numpy_path), got, what, atol=1e-5)
        features = got["input_features"]
        transformers_spread = np.abs(numpy_path["input_features"] - torch_path["input_features"])
        budget = float(transformers_spread.max()) + 1e-5
        assert_close_outputs(dict(torch_path), got, what, atol=budget)
        print(
            what, f"ours - torch path: {np.abs(features - torch_path['input_features']).max():.3g}"
        )


def test_a_wrong_sampling_rate_is_refused() -> None:
    with pytest.raises(ValueError, match="16000"):
        WhisperFeatureExtractor(QWEN2_AUDIO).extract([np.zeros(100)], sampling_rate=8000)


def test_qwen2_audio_token_counts_follow_the_mask_as_vllms() -> None:
    reference = ReferenceExtractor(**QWEN2_AUDIO)
    ours = WhisperFeatureExtractor(QWEN2_AUDIO, QWEN_AUDIO_DEFAULTS)
    for samples in (1, 159, 160, 161, 16000, 16000 * 7 + 5, 16000 * 30, 16000 * 40):
        clip = np.ones(samples, dtype=np.float32) * 0.1
        mask = reference([clip], sampling_rate=16000, return_tensors="np", **QWEN_AUDIO_DEFAULTS)[
            "attention_mask"
        ]
        frames = int(mask.sum())
        _, want = _get_feat_extract_output_lengths(torch.tensor([frames]))
        got = ours.extract([clip], sampling_rate=16000)["attention_mask"]
        assert int(got.sum()) == frames
        assert qwen2_audio_output_length(frames) == int(want[0]), samples

"""Our audio resampler against torchaudio's ``Resample`` (vLLM 0.32's default resampler): the
same length for every rate pair and clip length, samples within float32 rounding of the sums
(the kernel is built the same way; the dot products are numpy's)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from tests.support.torchaudio_pure import TORCHAUDIO_PURE, available
from vllm_frontend.multimodal.processors.resample import resample

pytestmark = pytest.mark.oracle

RATES = [8000, 11025, 12000, 22050, 24000, 32000, 44100, 48000, 96000, 16000.4, 15999.6]
LENGTHS = [1, 7, 160, 4410, 48001]


def _torchaudio_resample(clip: np.ndarray, orig: int, new: int) -> np.ndarray:
    assert available(), "scripts/setup-env installs torchaudio-pure"
    if str(TORCHAUDIO_PURE) not in sys.path:
        sys.path.insert(0, str(TORCHAUDIO_PURE))
    import torch
    import torchaudio

    return torchaudio.transforms.Resample(orig, new)(torch.from_numpy(clip)).numpy()


@pytest.mark.parametrize("rate", RATES)
def test_resample_equals_torchaudio(rate: float) -> None:
    rng = np.random.default_rng(int(rate))
    for length in LENGTHS:
        clip = (rng.standard_normal(length) * 0.3).astype(np.float32)
        clip[: length // 3] = np.sin(np.arange(length // 3) * 0.05)  # a smooth stretch too
        ours = resample(clip, rate, 16000)
        if round(rate) == 16000:
            assert ours is clip  # vLLM returns the clip as it is
            continue
        want = _torchaudio_resample(clip, round(rate), 16000)
        assert ours.dtype == want.dtype == np.float32
        assert ours.shape == want.shape, (rate, length)
        np.testing.assert_allclose(ours, want, rtol=0, atol=2e-6)


def test_upsampling_and_other_targets_too() -> None:
    rng = np.random.default_rng(5)
    clip = rng.standard_normal(3000).astype(np.float32)
    for orig, new in [(16000, 44100), (8000, 24000), (48000, 22050)]:
        want = _torchaudio_resample(clip, orig, new)
        np.testing.assert_allclose(resample(clip, orig, new), want, rtol=0, atol=2e-6)


def test_rates_with_a_tiny_common_divisor_are_refused() -> None:
    # torchaudio would build a 2 GB kernel for 16001 -> 16000 Hz.
    with pytest.raises(ValueError, match="16001 Hz to 16000 Hz"):
        resample(np.zeros(100, dtype=np.float32), 16001, 16000)

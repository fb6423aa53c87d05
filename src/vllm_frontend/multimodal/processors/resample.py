"""Audio resampling as vLLM 0.32 resamples a clip to its model's rate by default: torchaudio's
``Resample`` (band-limited sinc interpolation with a Hann window, 6 zero crossings, roll-off
0.99, the rates reduced by their GCD), in numpy.

The kernel is built as torchaudio builds it (float64, phase offsets in float32 first, stored as
float32) and applied as its strided ``conv1d``: each output phase is a dot product of the
zero-padded clip's window with that phase's kernel, in float32. The sums are numpy's, not
torch's, so samples agree with torchaudio's to float32 rounding, not bit for bit.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

__all__ = ["resample"]

_ZERO_CROSSINGS = 6
_ROLLOFF = 0.99


_CACHED_ELEMENTS = 1 << 22
"""Kernels up to this size (float32 elements) are kept per rate pair; larger ones (rates whose
GCD is small, e.g. 16001 -> 16000 Hz) are built and applied a block of phases at a time."""


_MAX_ELEMENTS = 1 << 24
"""Larger kernels are refused: torchaudio would build one of ``new * (2 * width + orig)``
float64 elements (16001 -> 16000 Hz: 257 million, 2 GB, and a minute of CPU here) for a single
clip, which an untrusted file's header must not be able to ask for."""


def _width(orig: int, new: int) -> tuple[float, int]:
    base = min(orig, new) * _ROLLOFF
    return base, math.ceil(_ZERO_CROSSINGS * orig / base)


def _kernel_rows(orig: int, new: int, start: int, stop: int) -> np.ndarray:
    """Rows ``start:stop`` (output phases) of the ``[new, 2 * width + orig]`` float32 kernel of
    the reduced rates."""
    base, width = _width(orig, new)
    idx = np.arange(-width, width + orig, dtype=np.float64) / orig
    # torch divides the integer phases in float32 (the default dtype) before adding idx.
    phases = np.arange(-start, -stop, -1).astype(np.float32) / np.float32(new)
    t = phases.astype(np.float64)[:, None] + idx[None, :]
    t *= base
    np.clip(t, -_ZERO_CROSSINGS, _ZERO_CROSSINGS, out=t)
    window = np.cos(t * math.pi / _ZERO_CROSSINGS / 2) ** 2
    t *= math.pi
    with np.errstate(invalid="ignore", divide="ignore"):
        kernels = np.where(t == 0, 1.0, np.sin(t) / t)
    kernels *= window * (base / orig)
    return kernels.astype(np.float32)


@lru_cache(maxsize=16)
def _kernel(orig: int, new: int) -> np.ndarray:
    kernel = _kernel_rows(orig, new, 0, new)
    kernel.setflags(write=False)
    return kernel


def resample(audio: np.ndarray, orig_sr: float, target_sr: float) -> np.ndarray:
    """The mono float32 ``audio`` at ``orig_sr`` resampled to ``target_sr`` (both rounded to
    integers as vLLM does; equal rates return the clip as it is). ValueError for rates whose
    kernel would be too large (see ``_MAX_ELEMENTS``)."""
    orig_int, new_int = round(float(orig_sr)), round(float(target_sr))
    if orig_int == new_int:
        return audio
    if orig_int <= 0 or new_int <= 0:
        raise ValueError(f"cannot resample audio from {orig_sr} Hz to {target_sr} Hz")
    gcd = math.gcd(orig_int, new_int)
    orig, new = orig_int // gcd, new_int // gcd
    _, width = _width(orig, new)
    size = 2 * width + orig
    if new * size > _MAX_ELEMENTS:
        raise ValueError(
            f"Resampling audio from {orig_int} Hz to {new_int} Hz is not supported: the rates "
            "have too small a common divisor."
        )
    clip = np.asarray(audio, dtype=np.float32)
    length = clip.shape[-1]
    padded = np.zeros(length + size, dtype=np.float32)
    padded[width : width + length] = clip
    windows = np.ascontiguousarray(np.lib.stride_tricks.sliding_window_view(padded, size)[::orig])
    if new * size <= _CACHED_ELEMENTS:
        out = windows @ _kernel(orig, new).T
    else:
        out = np.empty((windows.shape[0], new), dtype=np.float32)
        block = max(1, _CACHED_ELEMENTS // size)
        for start in range(0, new, block):
            stop = min(new, start + block)
            out[:, start:stop] = windows @ _kernel_rows(orig, new, start, stop).T
    target = math.ceil(new * length / orig)
    return np.ascontiguousarray(out.reshape(-1)[:target])

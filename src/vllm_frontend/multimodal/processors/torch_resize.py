"""torch's antialiased bicubic and bilinear resizes of ``uint8`` images on the CPU, in numpy: what
torchvision's ``resize`` runs for a ``uint8`` tensor (``interpolate(mode=..., antialias=True)``
straight on the bytes), so what transformers' torchvision-backed processors give.

It is not Pillow's: torch computes each axis's filter weights in double (Keys cubic, ``a = -0.5``,
or the triangle for bilinear, support scaled by the reduction factor, weights normalized per
output sample),
turns them into int16 at the largest precision under which the axis's largest weight fits,
and resamples width first then height, each output sample an integer dot product plus half an
LSB, shifted down and clamped to ``[0, 255]`` after each pass. Integer sums do not depend on
their order, so the result is exact whatever the vectorization: here each band of outputs is one
float64 matrix product (every partial sum is an integer below 2^31, so float64 holds it exactly),
about twice as fast as a numpy pass per tap.

torchvision resizes ``uint8`` bilinearly on these bytes only where torch's CPU capability is
"AVX2"; elsewhere (an "AVX512" torch build, for one) it resizes a float32 copy and rounds, which
differs from this by one level on a fraction of pixels (and, where the output is one pixel wide,
gives wrong values: every output row the same).

:func:`resize_bicubic_float` is torch's bicubic without antialiasing on float32 values (what
transformers' Phi-4-multimodal processor runs on its normalised canvas), within 1e-6 of torch's.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

__all__ = ["resize_bicubic_float", "resize_bicubic_u8", "resize_bilinear_u8"]


def _cubic(x: float) -> float:
    # Keys' cubic convolution with a = -0.5, evaluated in the same order as torch.
    a = -0.5
    x = abs(x)
    if x < 1.0:
        return ((a + 2) * x - (a + 3)) * x * x + 1
    if x < 2.0:
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return 0.0


def _triangle(x: float) -> float:
    # torch's antialiasing bilinear filter.
    x = abs(x)
    return 1.0 - x if x < 1.0 else 0.0


_FILTERS = {"bicubic": (_cubic, 2.0), "bilinear": (_triangle, 1.0)}


@lru_cache(maxsize=64)
def _axis(in_size: int, out_size: int, mode: str) -> tuple[np.ndarray, np.ndarray, int]:
    """One axis's taps: source indices ``[out, taps]`` (clamped into range; their weight is 0
    where the window is shorter), int16-valued weights ``[out, taps]`` and the precision."""
    kernel, half_size = _FILTERS[mode]
    scale = in_size / out_size
    support = half_size * scale if scale >= 1.0 else half_size
    taps = math.ceil(support) * 2 + 1
    invscale = 1.0 / scale if scale >= 1.0 else 1.0
    starts = np.zeros(out_size, dtype=np.int64)
    real = np.zeros((out_size, taps), dtype=np.float64)
    wt_max = 0.0
    for i in range(out_size):
        center = scale * (i + 0.5)
        xmin = max(int(center - support + 0.5), 0)
        xsize = min(int(center + support + 0.5), in_size) - xmin
        xsize = min(max(xsize, 0), taps)
        weights = [kernel((j + xmin - center + 0.5) * invscale) for j in range(xsize)]
        total = 0.0
        for w in weights:
            total += w
        if total != 0.0:
            weights = [w / total for w in weights]
            wt_max = max(wt_max, *weights)
        starts[i] = xmin
        real[i, :xsize] = weights
    precision = 0
    while precision < 22:
        if int(0.5 + wt_max * (1 << (precision + 1))) >= 1 << 15:
            break
        precision += 1
    scaled = real * (1 << precision)
    # C's (int)(v + 0.5) / (int)(v - 0.5): rounding half away from zero by truncation.
    weights = np.trunc(np.where(scaled < 0, scaled - 0.5, scaled + 0.5)).astype(np.int32)
    indices = np.minimum(starts[:, None] + np.arange(taps), in_size - 1)
    return indices, weights, precision


# Outputs per band: each band's taps form a small dense matrix over the input rows it reads.
_BAND = 8
# float64 elements of input converted at a time (32 MB).
_BLOCK = 1 << 22


@lru_cache(maxsize=64)
def _bands(
    in_size: int, out_size: int, mode: str
) -> tuple[tuple[tuple[int, int, int, int, np.ndarray], ...], int]:
    """One axis's taps as dense float64 matrices, one per band of ``_BAND`` outputs:
    ``(first output, end output, first input, end input, weights[outputs, inputs])``."""
    indices, weights, precision = _axis(in_size, out_size, mode)
    bands = []
    for o0 in range(0, out_size, _BAND):
        o1 = min(o0 + _BAND, out_size)
        rows, cols = indices[o0:o1], weights[o0:o1]
        used = cols != 0
        lo = int(rows[used].min()) if used.any() else 0
        hi = int(rows[used].max()) + 1 if used.any() else 1
        dense = np.zeros((o1 - o0, hi - lo), dtype=np.float64)
        out_at, tap_at = np.nonzero(used)
        np.add.at(dense, (out_at, rows[out_at, tap_at] - lo), cols[out_at, tap_at])
        bands.append((o0, o1, lo, hi, dense))
    return tuple(bands), precision


def _pass(pixels: np.ndarray, axis: int, out_size: int, mode: str) -> np.ndarray:
    # Each output sample is an integer dot product of int16 weights and bytes; float64 holds
    # every partial sum exactly (|sum| < 2^31), so a BLAS product per band gives torch's integers
    # whatever its summation order.
    bands, precision = _bands(pixels.shape[axis], out_size, mode)
    moved = np.moveaxis(pixels, axis, 0)
    rest = moved.shape[1:]
    flat = moved.reshape(moved.shape[0], -1)
    out = np.empty((out_size, flat.shape[1]), dtype=np.uint8)
    half = float(1 << (precision - 1)) if precision else 0.0
    scale = 1.0 / (1 << precision)
    step = max(1, _BLOCK // max(1, flat.shape[0]))
    acc = np.empty((out_size, min(step, flat.shape[1])), dtype=np.float64)
    for c0 in range(0, flat.shape[1], step):
        block = flat[:, c0 : c0 + step].astype(np.float64)
        width = block.shape[1]
        part = acc[:, :width]
        for o0, o1, lo, hi, dense in bands:
            np.matmul(dense, block[lo:hi], out=part[o0:o1])
        part += half
        part *= scale  # exact: a power of two
        np.floor(part, out=part)
        np.clip(part, 0, 255, out=part)
        out[:, c0 : c0 + width] = part
    return np.moveaxis(out.reshape(out_size, *rest), 0, axis)


def _resize(pixels: np.ndarray, height: int, width: int, mode: str) -> np.ndarray:
    if pixels.dtype != np.uint8:
        raise ValueError(f"expected uint8 pixels, got {pixels.dtype}")
    h_axis, w_axis = pixels.ndim - 3, pixels.ndim - 2
    out = pixels
    if out.shape[w_axis] != width:
        out = _pass(out, w_axis, width, mode)
    if out.shape[h_axis] != height:
        out = _pass(out, h_axis, height, mode)
    return np.ascontiguousarray(out)


def resize_bicubic_u8(pixels: np.ndarray, height: int, width: int) -> np.ndarray:
    """``pixels`` ``(..., H, W, C)`` uint8 resized to ``height`` x ``width`` as torch resizes a
    ``uint8`` tensor with ``mode="bicubic", antialias=True`` (an unchanged size is a no-op)."""
    return _resize(pixels, height, width, "bicubic")


def resize_bilinear_u8(pixels: np.ndarray, height: int, width: int) -> np.ndarray:
    """``pixels`` ``(..., H, W, C)`` uint8 resized to ``height`` x ``width`` as torch resizes a
    ``uint8`` tensor with ``mode="bilinear", antialias=True`` (an unchanged size is a no-op)."""
    return _resize(pixels, height, width, "bilinear")


def _fma(a: float | np.floating, b: float | np.floating, c: float | np.floating) -> np.float32:
    # a * b + c rounded once to float32, as torch's kernels (built with FMA) compute it; the
    # product of two float32 numbers is exact in float64.
    return np.float32(float(a) * float(b) + float(c))


def _cubic_coefficients(t: np.float32) -> tuple[np.float32, ...]:
    # torch's upsample_bicubic2d coefficients (Keys cubic, a = -0.75) for a fraction t, float32.
    a = np.float32(-0.75)
    one = np.float32(1)

    def near(x: np.float32) -> np.float32:  # ((a + 2) * x - (a + 3)) * x * x + 1
        return _fma(np.float32(_fma(a + 2, x, -(a + 3)) * x), x, one)

    def far(x: np.float32) -> np.float32:  # ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
        return _fma(_fma(_fma(a, x, -(5 * a)), x, 8 * a), x, -(4 * a))

    rest = np.float32(one - t)
    return far(np.float32(t + one)), near(t), near(rest), far(np.float32(rest + one))


@lru_cache(maxsize=64)
def _cubic_axis(in_size: int, out_size: int) -> tuple[np.ndarray, np.ndarray]:
    """One axis's four source indices and float32 weights per output sample, as torch's bicubic
    without antialiasing (``align_corners=False``) computes them."""
    f32 = np.float32
    scale = f32(in_size) / f32(out_size)
    indices = np.empty((out_size, 4), dtype=np.int64)
    weights = np.empty((out_size, 4), dtype=np.float32)
    for i in range(out_size):
        real = _fma(scale, f32(i) + f32(0.5), -0.5)
        index = min(math.floor(real), in_size - 1)
        fraction = f32(min(max(real - f32(index), f32(0)), f32(1)))
        weights[i] = _cubic_coefficients(fraction)
        indices[i] = [min(max(index - 1 + j, 0), in_size - 1) for j in range(4)]
    return indices, weights


def resize_bicubic_float(values: np.ndarray, height: int, width: int) -> np.ndarray:
    """float32 ``values`` ``(..., H, W)`` resized to ``height`` x ``width`` like torch's
    ``interpolate(mode="bicubic", antialias=False, align_corners=False)``, in float32 (torch's
    kernel sums in another order: values differ from its in the last bits, by under 1e-6 for
    values in [-1, 1])."""
    out = np.asarray(values, dtype=np.float32)
    for axis, size in ((out.ndim - 1, width), (out.ndim - 2, height)):
        if out.shape[axis] == size:
            continue
        indices, weights = _cubic_axis(out.shape[axis], size)
        shape = [1] * out.ndim
        shape[axis] = size
        acc = np.take(out, indices[:, 0], axis=axis) * weights[:, 0].reshape(shape)
        for j in range(1, 4):
            acc += np.take(out, indices[:, j], axis=axis) * weights[:, j].reshape(shape)
        out = acc
    return out

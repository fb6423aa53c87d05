"""One image's Pillow resize spread over threads, the pixels exactly those of ``Image.resize``.

Pillow resamples in two separable passes with an 8-bit image between them (``Resample.c``,
``ImagingResampleInner``): a horizontal pass over the source rows the output needs, then a
vertical pass over that intermediate. The filter coefficients of a pass depend only on the input
and output lengths along its axis (and the box, here the whole image), so:

- the horizontal pass of a band of whole source rows, cropped out and resized to the output width
  and the same number of rows (no vertical pass: Pillow skips a pass whose size and box are the
  identity), is exactly those rows of the whole image's intermediate;
- the vertical pass of a band of whole intermediate columns, resized to the output height at the
  same width (no horizontal pass), is exactly those columns of the output.

Each band of a stage runs on its own thread (Pillow releases the GIL while it resamples), the
stages meet once, and nothing rounds differently. A resize is split only while fewer images are
being resized than there are cores (otherwise the cores are busy anyway), and only in the modes
and filters whose resize is this plain two-pass path (Pillow converts ``RGBA``/``LA`` to
premultiplied alpha around the resize and uses another path for ``NEAREST``); the others go to
``Image.resize`` unchanged.
"""

from __future__ import annotations

import functools
import itertools
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from PIL.Image import Image

__all__ = ["resize_in_bands"]

_T = TypeVar("_T")
# Modes resampled by the plain two-pass path, and its filters (PIL.Image.Resampling's values:
# BOX 4, BILINEAR 2, HAMMING 5, BICUBIC 3, LANCZOS 1).
_SPLIT_MODES = frozenset({"RGB", "L"})
_SPLIT_FILTERS = frozenset({1, 2, 3, 4, 5})
# Below this many source pixels a resize is cheaper than the threads' hand-offs.
_MIN_PIXELS = 256 * 256
_pool: ThreadPoolExecutor | None = None
_lock = threading.Lock()
_resizing = 0  # resizes under way in this process


def _bands_count() -> int:
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, 4))


_BANDS = _bands_count()


def _pillow_13() -> bool:
    from PIL import __version__

    return int(__version__.split(".")[0]) >= 13


_PILLOW_13 = _pillow_13()


def _band_pool() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max(1, _BANDS - 1), thread_name_prefix="vllm-frontend-band")
    return _pool


def _run_all(jobs: Sequence[Callable[[], _T]]) -> list[_T]:
    """Every job's result, the first run on this thread and the others on the band pool; a job
    still queued when this thread is done with its own is taken back and run here, so a busy
    pool costs no waiting."""
    pending: list[Future[_T]] = [_band_pool().submit(job) for job in jobs[1:]]
    results = [jobs[0]()]
    for job, future in zip(jobs[1:], pending, strict=True):
        results.append(job() if future.cancel() else future.result())
    return results


def _vertical_first(size: tuple[int, int], out: tuple[int, int]) -> bool:
    # Pillow 13 (python-pillow/Pillow#9549, Resample.c) runs the vertical pass first when the
    # height shrinks by more than twice as many pixels as the width; earlier Pillows never do.
    shrink_x, shrink_y = size[0] - out[0], size[1] - out[1]
    return _PILLOW_13 and shrink_y > 0 and shrink_y > 2 * shrink_x


def _pass(image: Image, length: int, axis: int, resample: int) -> Image:
    """One of Pillow's passes over ``image`` (``axis`` 0: the width becomes ``length``, row
    bands on threads; 1: the height, column bands), assembled into one image."""
    from PIL import Image as PilImage

    width, height = image.size
    across = height if axis == 0 else width  # the side the bands cut
    edges = [across * k // _BANDS for k in range(_BANDS + 1)]

    def band(start: int, stop: int) -> Image:
        if axis == 0:
            part = image.crop((0, start, width, stop))
            return part.resize((length, stop - start), resample=resample)
        part = image.crop((start, 0, stop, height))
        return part.resize((stop - start, length), resample=resample)

    jobs = [functools.partial(band, a, b) for a, b in itertools.pairwise(edges)]
    out = PilImage.new(image.mode, (length, height) if axis == 0 else (width, length))
    for start, part in zip(edges, _run_all(jobs), strict=False):
        out.paste(part, (0, start) if axis == 0 else (start, 0))
    return out


def resize_in_bands(image: Image, size: tuple[int, int], resample: int) -> Image:
    """``image.resize(size, resample=resample)``, pixel for pixel, each of its two passes split
    into bands across the threads: the bands of a pass cut across its axis (rows for the
    horizontal pass, columns for the vertical), in the order Pillow runs the passes."""
    width, height = image.size
    out_width, out_height = size
    if (
        _BANDS < 2
        or image.mode not in _SPLIT_MODES
        or resample not in _SPLIT_FILTERS
        or width * height < _MIN_PIXELS
        or min(width, height, out_width, out_height) < _BANDS
        or width == out_width
        or height == out_height
    ):
        return image.resize(size, resample=resample)
    global _resizing
    with _lock:
        # Bands only while the cores are not all busy resizing other images: when they are,
        # splitting adds hand-offs and cache misses and no parallelism.
        split = _resizing < _BANDS
        _resizing += 1
    try:
        if not split:
            return image.resize(size, resample=resample)
        image.load()
        if _vertical_first(image.size, size):
            return _pass(_pass(image, out_height, 1, resample), out_width, 0, resample)
        return _pass(_pass(image, out_width, 0, resample), out_height, 1, resample)
    finally:
        with _lock:
            _resizing -= 1

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

The bands of a pass are shared by the calling thread and the band pool's threads (Pillow
releases the GIL while it resamples), the passes run in Pillow's order (Pillow 13 runs the
vertical one first when the height shrinks much more than the width) and meet once, and nothing
rounds differently. A resize is split only while there seem to be idle cores (see ``_Gate``),
and only in the modes and filters whose resize is this plain two-pass path (Pillow converts
``RGBA``/``LA`` to premultiplied alpha around the resize and uses another path for ``NEAREST``);
the others go to ``Image.resize`` unchanged.
"""

from __future__ import annotations

import collections
import functools
import itertools
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
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
# Bands per thread: small enough that a helper thread's band in progress is a short wait.
_PIECES = 3
_pool: ThreadPoolExecutor | None = None


class _Gate:
    """Whether a resize is split: only while fewer images are being resized than there are cores
    (when they all are, splitting adds hand-offs and no parallelism), and not while recent splits
    found no free core (the helper threads did under a quarter of the bands: on a loaded machine
    the caller would wait for them). After such a split the next ``backoff`` resizes are whole,
    ``backoff`` doubling up to 64 while it lasts and back to 1 after a split the helpers shared."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.resizing = 0
        self.skip = 0
        self.backoff = 1

    def enter(self) -> bool:
        with self.lock:
            self.resizing += 1
            if self.skip:
                self.skip -= 1
                return False
            return self.resizing <= _BANDS

    def leave(self, helped: float | None) -> None:
        with self.lock:
            self.resizing -= 1
            if helped is None:
                return
            if helped < 0.25:
                self.skip = self.backoff
                self.backoff = min(2 * self.backoff, 64)
            else:
                self.backoff = 1


_gate = _Gate()


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


def _run_all(jobs: Sequence[Callable[[], _T]]) -> tuple[list[_T], int]:
    """Every job's result, and how many ran on this thread: this thread and the band pool's
    threads take jobs from one queue, so a helper slow to get a core leaves its share to this
    thread, which waits at most for the jobs already running elsewhere."""
    results: list[_T | None] = [None] * len(jobs)
    queue = collections.deque(range(len(jobs)))

    def drain() -> int:
        done = 0
        while True:
            try:
                index = queue.popleft()
            except IndexError:
                return done
            results[index] = jobs[index]()
            done += 1

    helpers = [_band_pool().submit(drain) for _ in range(min(_BANDS, len(jobs)) - 1)]
    here = drain()
    for helper in helpers:
        if not helper.cancel():
            helper.result()
    return results, here  # type: ignore[return-value]  # every slot was filled


def _vertical_first(size: tuple[int, int], out: tuple[int, int]) -> bool:
    # Pillow 13 (python-pillow/Pillow#9549, Resample.c) runs the vertical pass first when the
    # height shrinks by more than twice as many pixels as the width; earlier Pillows never do.
    shrink_x, shrink_y = size[0] - out[0], size[1] - out[1]
    return _PILLOW_13 and shrink_y > 0 and shrink_y > 2 * shrink_x


def _pass(image: Image, length: int, axis: int, resample: int) -> tuple[Image, float]:
    """One of Pillow's passes over ``image`` (``axis`` 0: the width becomes ``length``, row
    bands on threads; 1: the height, column bands), assembled into one image, and the share of
    the bands the helper threads resized."""
    from PIL import Image as PilImage

    width, height = image.size
    across = height if axis == 0 else width  # the side the bands cut
    pieces = _PIECES * _BANDS
    edges = [across * k // pieces for k in range(pieces + 1)]

    def band(start: int, stop: int) -> Image:
        if axis == 0:
            part = image.crop((0, start, width, stop))
            return part.resize((length, stop - start), resample=resample)
        part = image.crop((start, 0, stop, height))
        return part.resize((stop - start, length), resample=resample)

    jobs = [functools.partial(band, a, b) for a, b in itertools.pairwise(edges)]
    out = PilImage.new(image.mode, (length, height) if axis == 0 else (width, length))
    parts, here = _run_all(jobs)
    for start, part in zip(edges, parts, strict=False):
        out.paste(part, (0, start) if axis == 0 else (start, 0))
    return out, 1 - here / len(jobs)


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
        or min(width, height, out_width, out_height) < _PIECES * _BANDS
        or width == out_width
        or height == out_height
    ):
        return image.resize(size, resample=resample)
    helped: float | None = None
    split = _gate.enter()
    try:
        if not split:
            return image.resize(size, resample=resample)
        image.load()
        first, second = (out_height, 1), (out_width, 0)
        if not _vertical_first(image.size, size):
            first, second = second, first
        middle, helped_first = _pass(image, *first, resample)
        out, helped_second = _pass(middle, *second, resample)
        helped = (helped_first + helped_second) / 2
        return out
    finally:
        _gate.leave(helped)

"""A resize split into bands across threads gives Pillow's own ``Image.resize`` pixels, byte for
byte: random sizes on both sides of Pillow 13's pass-order rule, every filter it splits, the
Qwen2-VL target sizes, and the cases it hands to Pillow whole (other modes, NEAREST, one side
unchanged, small images)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from PIL import Image

from tests.multimodal.random_images import random_image
from vllm_frontend.multimodal.processors import band_resize
from vllm_frontend.multimodal.processors.band_resize import resize_in_bands
from vllm_frontend.multimodal.processors.qwen2_vl import smart_resize

FILTERS = [
    Image.Resampling.BICUBIC,
    Image.Resampling.BILINEAR,
    Image.Resampling.LANCZOS,
    Image.Resampling.BOX,
    Image.Resampling.HAMMING,
]


@pytest.fixture(autouse=True)
def _two_or_more_bands(monkeypatch: pytest.MonkeyPatch) -> None:
    # The split is what is tested, whatever the machine's CPU count.
    monkeypatch.setattr(band_resize, "_BANDS", max(band_resize._BANDS, 3))


def _same(image: Image.Image, size: tuple[int, int], resample: int) -> None:
    expected = np.asarray(image.resize(size, resample=resample))
    ours = resize_in_bands(image, size, resample)
    assert ours.mode == image.mode and ours.size == size
    np.testing.assert_array_equal(np.asarray(ours), expected)


@pytest.mark.parametrize("mode", ["RGB", "L"])
@pytest.mark.parametrize("resample", FILTERS)
def test_random_sizes_equal_pillows_resize(mode: str, resample: int) -> None:
    rng = np.random.default_rng(1000 * int(resample) + len(mode))
    for index in range(8):
        while True:  # half of the cases in each of Pillow's pass orders
            width, height = int(rng.integers(256, 1000)), int(rng.integers(256, 1000))
            size = (int(rng.integers(3, 900)), int(rng.integers(3, 900)))
            if band_resize._vertical_first((width, height), size) == bool(index % 2):
                break
        _same(random_image(rng, width, height, mode), size, resample)


@pytest.mark.parametrize(
    ("width", "height", "size"),
    [
        (1024, 768, (800, 200)),  # the height shrinks by 568 > 2 x 224: vertical pass first
        (1024, 768, (801, 500)),  # 268 = 2 x 223 + 22: vertical first
        (1024, 768, (802, 324)),  # 444 = 2 x 222: horizontal first (the rule is strict)
        (700, 900, (1400, 600)),  # width grows, height shrinks: vertical first
        (700, 900, (300, 1200)),  # height grows: horizontal first
        (1200, 1000, (1300, 1100)),  # both grow
    ],
)
def test_pass_order_edges(width: int, height: int, size: tuple[int, int]) -> None:
    rng = np.random.default_rng(width + height + size[0])
    _same(random_image(rng, width, height), size, Image.Resampling.BICUBIC)


@pytest.mark.parametrize(("width", "height"), [(1024, 768), (768, 1024), (1920, 1080), (640, 480),
                                               (333, 1777), (2049, 1023)])  # fmt: skip
def test_qwen2_vl_target_sizes(width: int, height: int) -> None:
    rng = np.random.default_rng(width * height)
    image = random_image(rng, width, height)
    for max_pixels in (128 * 28 * 28, 1280 * 28 * 28, 16384 * 28 * 28):
        h, w = smart_resize(height, width, 28, 56 * 56, max_pixels)
        _same(image, (w, h), Image.Resampling.BICUBIC)


@pytest.mark.parametrize(
    ("mode", "size", "resample", "target"),
    [
        ("RGBA", (600, 500), Image.Resampling.BICUBIC, (300, 200)),  # premultiplied by Pillow
        ("LA", (600, 500), Image.Resampling.BILINEAR, (300, 200)),
        ("P", (600, 500), Image.Resampling.BICUBIC, (300, 200)),  # Pillow: NEAREST
        ("I;16", (600, 500), Image.Resampling.BICUBIC, (300, 200)),
        ("RGB", (600, 500), Image.Resampling.NEAREST, (300, 200)),
        ("RGB", (600, 500), Image.Resampling.BICUBIC, (600, 200)),  # one pass only
        ("RGB", (600, 500), Image.Resampling.BICUBIC, (600, 500)),  # a copy
        ("RGB", (100, 80), Image.Resampling.BICUBIC, (50, 30)),  # small: not split
        ("RGB", (1000, 800), Image.Resampling.BICUBIC, (2, 1)),  # thinner than the bands
    ],
)
def test_unsplit_cases_are_pillows(
    mode: str, size: tuple[int, int], resample: int, target: tuple[int, int]
) -> None:
    rng = np.random.default_rng(7)
    _same(random_image(rng, *size, mode), target, resample)


def test_bands_queued_behind_a_busy_pool_run_on_the_caller() -> None:
    """A full band pool cannot stall a resize: the bands it has not started are run on the
    calling thread."""
    pool = ThreadPoolExecutor(1)
    release = threading.Event()
    blocker = pool.submit(release.wait)
    original = band_resize._pool
    band_resize._pool = pool
    try:
        rng = np.random.default_rng(3)
        _same(random_image(rng, 1024, 768), (364, 280), Image.Resampling.BICUBIC)
    finally:
        band_resize._pool = original
        release.set()
        blocker.result()
        pool.shutdown()


def test_no_split_while_the_cores_are_busy_resizing(monkeypatch: pytest.MonkeyPatch) -> None:
    """With as many resizes under way as bands, a resize is Pillow's whole one (no band
    submitted), and the count of resizes under way comes back to where it was."""
    gate = band_resize._Gate()
    gate.resizing = band_resize._BANDS
    monkeypatch.setattr(band_resize, "_gate", gate)
    submitted: list[object] = []
    monkeypatch.setattr(band_resize, "_run_all", lambda jobs: submitted.append(jobs))
    rng = np.random.default_rng(5)
    _same(random_image(rng, 1024, 768), (364, 280), Image.Resampling.BICUBIC)
    assert submitted == []
    assert gate.resizing == band_resize._BANDS


def test_splits_that_found_no_free_core_back_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """After a split whose helpers did no band, the next resize is whole; after the back-off,
    a split the helpers shared resets it."""
    monkeypatch.setattr(band_resize, "_gate", band_resize._Gate())
    calls: list[int] = []
    share = {"here": 1.0}

    def run_all(jobs: list) -> tuple[list, int]:
        calls.append(len(jobs))
        return [job() for job in jobs], round(share["here"] * len(jobs))

    monkeypatch.setattr(band_resize, "_run_all", run_all)
    rng = np.random.default_rng(6)
    image = random_image(rng, 1024, 768)
    _same(image, (364, 280), Image.Resampling.BICUBIC)  # split; the helpers did nothing
    assert len(calls) == 2 and band_resize._gate.skip == 1
    _same(image, (364, 280), Image.Resampling.BICUBIC)  # whole
    assert len(calls) == 2 and band_resize._gate.skip == 0
    share["here"] = 0.5
    _same(image, (364, 280), Image.Resampling.BICUBIC)  # split, shared
    assert len(calls) == 4 and band_resize._gate.backoff == 1

"""Our Qwen2-VL video processor against transformers' ``Qwen2VLVideoProcessor`` (the torchvision
backed one vLLM runs), over random videos of many sizes, frame counts and settings: grids
exact, pixel values bit-exact. Torchvision's wheels do not load here, so the reference runs in a
subprocess on tests/fixtures/torchvision_stub, which does what torchvision does for these tensors
(the resize is torch's own ``interpolate`` on ``uint8``); our resize is checked against that
``interpolate`` directly too."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from tests.support.fixtures import FIXTURES
from vllm_frontend.multimodal.processors.qwen2_vl_video import Qwen2VLVideoProcessor
from vllm_frontend.multimodal.processors.torch_resize import resize_bicubic_u8

pytestmark = pytest.mark.oracle

ROOT = pathlib.Path(__file__).resolve().parents[2]

SETTINGS = [
    {"min_pixels": 56 * 56, "max_pixels": 128 * 28 * 28, "cap_pixels_per_frame": False},
    {"cap_pixels_per_frame": False},
    {"min_pixels": 56 * 56, "max_pixels": 64 * 28 * 28, "do_normalize": False,
     "cap_pixels_per_frame": False},
    {"min_pixels": 56 * 56, "max_pixels": 128 * 28 * 28, "do_rescale": False,
     "do_normalize": False, "cap_pixels_per_frame": False},
    {"min_pixels": 56 * 56, "max_pixels": 96 * 28 * 28, "do_rescale": False,
     "image_mean": [127.0, 120.5, 100.25], "image_std": [60.0, 61.5, 70.0],
     "cap_pixels_per_frame": False},
    {"min_pixels": 56 * 56, "max_pixels": 256 * 28 * 28, "cap_pixels_per_frame": True,
     "max_video_tokens": 300},
]  # fmt: skip


def _videos(seed: int, count: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        frames = int(rng.integers(1, 9))
        h, w = int(rng.integers(12, 360)), int(rng.integers(12, 360))
        if i % 3 == 0:  # smooth frames: resampling rounds differently from noise
            y, x = np.mgrid[0:h, 0:w]
            base = np.stack([x * 255 // w, y * 255 // h, (x + y) % 256], -1)
            video = np.clip(base + rng.integers(0, 30, (frames, h, w, 3)), 0, 255)
        else:
            video = rng.integers(0, 256, (frames, h, w, 3))
        out.append(video.astype(np.uint8))
    return out


def _reference(tmp_path: pathlib.Path, videos: list[list[np.ndarray]]) -> dict:
    """transformers' outputs for ``videos[n]`` under ``SETTINGS[n]`` (one subprocess)."""
    source, target = tmp_path / "in.npz", tmp_path / "out.npz"
    arrays = {f"video_{n}_{i:03d}": v for n, vs in enumerate(videos) for i, v in enumerate(vs)}
    np.savez(source, settings=np.array(json.dumps(SETTINGS)), **arrays)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(FIXTURES / "torchvision_stub"), str(ROOT)])
    subprocess.run(
        [sys.executable, "-m", "tests.multimodal.qwen2_vl_video_reference", source, target],
        check=True,
        env=env,
        cwd=ROOT,
    )
    return dict(np.load(target))


def test_matches_transformers(tmp_path: pathlib.Path) -> None:
    checked = 0
    videos = [_videos(n, 10) for n in range(len(SETTINGS))]
    expected = _reference(tmp_path, videos)
    for n, settings in enumerate(SETTINGS):
        ours = Qwen2VLVideoProcessor.from_config(settings)
        for i, video in enumerate(videos[n]):
            what = (settings, video.shape)
            if f"error_{n}_{i:03d}" in expected:
                with pytest.raises(ValueError):
                    ours.preprocess_video(video)
                continue
            got = ours.preprocess_video(video)
            grid = expected[f"video_grid_thw_{n}_{i:03d}"].tolist()
            assert grid == [list(got.grid_thw)], what
            assert ours.grid_thw(*video.shape[:3]) == got.grid_thw
            want = expected[f"pixel_values_videos_{n}_{i:03d}"]
            raw = not settings.get("do_rescale", True) and not settings.get("do_normalize", True)
            assert want.dtype == got.pixel_values.dtype == (np.uint8 if raw else np.float32), what
            assert want.shape == got.pixel_values.shape, what
            assert want.tobytes() == got.pixel_values.tobytes(), what
            checked += 1
    assert checked > 40


def test_resize_matches_torch_interpolate() -> None:
    import torch

    rng = np.random.default_rng(11)
    for _ in range(60):
        h, w = int(rng.integers(3, 400)), int(rng.integers(3, 400))
        nh = h if rng.random() < 0.2 else int(rng.integers(3, 400))
        nw = w if rng.random() < 0.2 else int(rng.integers(3, 400))
        frames = rng.integers(0, 256, (2, h, w, 3), dtype=np.uint8)
        tensor = torch.from_numpy(frames).permute(0, 3, 1, 2).contiguous()
        want = torch.nn.functional.interpolate(
            tensor, size=[nh, nw], mode="bicubic", align_corners=False, antialias=True
        )
        got = resize_bicubic_u8(frames, nh, nw)
        assert np.array_equal(got, want.permute(0, 2, 3, 1).numpy()), ((h, w), (nh, nw))

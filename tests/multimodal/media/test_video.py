"""Videos: frames sampled and decoded as vLLM's loaders do, JPEG-sequence data URLs, errors."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import numpy as np
import pytest

from tests.multimodal.media.images import data_url, encode, noise
from tests.multimodal.media.videos import index_of, make_video
from vllm_frontend.multimodal.media import MediaError, MediaLoader, MediaPolicy
from vllm_frontend.multimodal.media.video import Source, Target, qwen2_vl_indices, uniform_indices

VIDEO = make_video(frames=30, fps=10.0)


def load(url: str, kwargs: dict[str, Any] | None = None, **extra: Any) -> tuple[np.ndarray, dict]:
    async def run() -> tuple[np.ndarray, dict]:
        loader = MediaLoader(MediaPolicy(**extra.pop("policy", {})))
        try:
            return await loader.load_video(url, kwargs, **extra)
        finally:
            await loader.aclose()

    return asyncio.run(run())


def error(url: str, kwargs: dict[str, Any] | None = None, **extra: Any) -> MediaError:
    with pytest.raises(MediaError) as caught:
        load(url, kwargs, **extra)
    return caught.value


def test_the_default_takes_up_to_32_frames_spread_evenly() -> None:
    frames, meta = load(data_url(VIDEO, "video/x-msvideo"))
    assert frames.dtype == np.uint8
    assert frames.shape == (30, 48, 64, 3)  # 30 frames < 32: all of them
    assert [index_of(f) for f in frames] == list(range(30))
    assert meta == {
        "total_num_frames": 30,
        "fps": 10.0,
        "duration": 3.0,
        "video_backend": "opencv",
        "frames_indices": list(range(30)),
        "do_sample_frames": True,
    }


def test_num_frames_and_fps_limit_the_sample() -> None:
    frames, meta = load(data_url(VIDEO), {"video": {"num_frames": 4}})
    assert meta["frames_indices"] == [0, 9, 19, 29]
    assert [index_of(f) for f in frames] == [0, 9, 19, 29]
    assert meta["do_sample_frames"] is False
    _, meta = load(data_url(VIDEO), {"video": {"num_frames": -1, "fps": 1}})
    assert meta["frames_indices"] == [0, 14, 29]  # 3 s at 1 fps


def test_uniform_sampling_rule() -> None:
    assert uniform_indices(Source(10, 5.0, 2.0), Target(-1, -1)) == list(range(10))
    assert uniform_indices(Source(10, 5.0, 2.0), Target(3, -1)) == [0, 4, 9]
    assert uniform_indices(Source(10, 5.0, 2.0), Target(-1, 0.1)) == [0]  # at least one


def test_qwen2_vl_sampling_takes_an_even_count_at_two_fps() -> None:
    _, meta = load(data_url(VIDEO), None, video_processor="Qwen2VLVideoProcessor")
    assert meta["frames_indices"] == [0, 5, 10, 15, 20, 25]  # 3 s x 2 fps
    assert qwen2_vl_indices(Source(451, 30.0, 451 / 30), Target(-1, 2))[-1] <= 450
    with pytest.raises(ValueError, match="known source fps"):
        qwen2_vl_indices(Source(10, 0.0, 0.0), Target(-1, 2))


def test_a_jpeg_sequence_data_url_is_decoded_frame_by_frame() -> None:
    images = [noise("RGB", (8, 6), seed) for seed in range(5)]
    payload = ",".join(base64.b64encode(encode(i, "PNG")).decode() for i in images)
    frames, meta = load(f"data:video/jpeg;base64,{payload}", {"video": {"num_frames": 3}})
    assert frames.shape == (3, 6, 8, 3)
    assert np.array_equal(frames[2], np.asarray(images[2]))
    assert meta == {
        "total_num_frames": 3,
        "fps": 1.0,
        "duration": 3.0,
        "video_backend": "jpeg_sequence",
        "frames_indices": [0, 1, 2],
        "do_sample_frames": False,
    }
    err = error(f"data:video/jpeg;base64,{payload}", {"video": {"total_num_frames": 2}})
    assert err.status == 400
    assert err.message == "total_num_frames (2) must be >= number of frames sent (5)"


def test_bytes_that_are_no_video_are_a_400() -> None:
    err = error(data_url(b"not a video at all" * 10, "video/mp4"))
    assert (err.status, err.err_type, err.message) == (
        400,
        "BadRequestError",
        "Could not open video stream",
    )


def test_frames_over_the_pixel_limit_are_a_400() -> None:
    err = error(data_url(VIDEO), policy={"max_image_pixels": 100})
    assert err.status == 400
    assert err.message.startswith("Video frame dimensions 64x48 (3072 pixels) exceed")


def test_loaders_vllm_has_and_we_lack_are_a_501_unknown_ones_a_400() -> None:
    err = error(data_url(VIDEO), {"video": {"video_backend": "molmo2"}})
    assert (err.status, err.err_type) == (501, "NotImplementedError")
    err = error(data_url(VIDEO), {"video": {"video_backend": "nope"}})
    assert (err.status, err.message) == (400, "Extension class nope not found")
    err = error(data_url(VIDEO), {"video": {"backend": "nope"}})
    assert err.status == 400
    assert err.message.startswith("Unknown video codec backend 'nope'")


def test_frame_recovery_reads_the_same_frames_from_a_sound_video() -> None:
    plain, meta = load(data_url(VIDEO), {"video": {"num_frames": 5}})
    recovered, recovered_meta = load(
        data_url(VIDEO), {"video": {"num_frames": 5, "frame_recovery": True}}
    )
    assert np.array_equal(plain, recovered)
    assert meta == recovered_meta

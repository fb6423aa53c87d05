"""Videos decoded exactly as vLLM 0.32's video loaders decode them (same frames, metadata and
hashing bytes) and bad ones answered with its status and message."""

from __future__ import annotations

import asyncio
import base64
import random
from typing import Any

import numpy as np
import pytest

from tests.multimodal.media.images import data_url, encode, noise
from tests.multimodal.media.videos import make_video
from tests.multimodal.media.vllm_reference import our_error, vllm_connector, vllm_outcome
from vllm_frontend.multimodal.media import MediaError, MediaLoader, MediaPolicy
from vllm_frontend.multimodal.media.video import (
    Source,
    Target,
    qwen2_vl_indices,
    qwen3_vl_indices,
    uniform_indices,
)

pytestmark = pytest.mark.oracle  # imports vLLM as the reference

VIDEOS = {
    "mjpg": make_video(frames=30, fps=10.0),
    "mp4v": make_video(frames=47, fps=24.0, size=(80, 64), fourcc="mp4v"),
    "short": make_video(frames=3, fps=5.0),
}
KWARGS: list[dict[str, Any] | None] = [
    None,
    {"video": {"num_frames": 4}},
    {"video": {"num_frames": -1, "fps": 3}},
    {"video": {"num_frames": 7, "frame_recovery": True}},
    {"video": {"video_backend": "qwen3_vl"}},
    {"video": {"video_backend": "qwen2_vl", "fps": 4}},
    {"video": {"video_backend": "qwen3_vl", "min_frames": 2, "max_frames": 5}},
    {"video": {"backend": "nope"}},
    {"video": {"video_backend": "nope"}},
    {"video": {"num_ffmpeg_threads": 2}},
]


def ours(url: str, kwargs: dict[str, Any] | None, processor: str | None = None) -> Any:
    async def run() -> Any:
        loader = MediaLoader(MediaPolicy())
        try:
            return await loader.load_video_item(url, kwargs, video_processor=processor)
        finally:
            await loader.aclose()

    try:
        return "ok", asyncio.run(run())
    except MediaError as exc:
        return "error", our_error(exc)


def theirs(url: str, kwargs: dict[str, Any] | None, processor: str | None = None) -> Any:
    connector = vllm_connector(media_io_kwargs=kwargs)
    return vllm_outcome(connector.fetch_video_async(url, video_processor=processor))


def same(url: str, kwargs: dict[str, Any] | None, processor: str | None = None) -> None:
    mine, reference = ours(url, kwargs, processor), theirs(url, kwargs, processor)
    assert mine[0] == reference[0], (mine, reference)
    if mine[0] == "error":
        assert mine == reference
        return
    frames, metadata = reference[1].media
    assert np.array_equal(mine[1].frames, np.asarray(frames))
    assert mine[1].frames.dtype == np.uint8
    assert mine[1].metadata == metadata
    assert mine[1].original_bytes == reference[1].original_bytes


@pytest.mark.parametrize("kwargs", KWARGS, ids=str)
@pytest.mark.parametrize("name", list(VIDEOS))
def test_videos_decode_to_vllms_frames(name: str, kwargs: dict[str, Any] | None) -> None:
    same(data_url(VIDEOS[name], "video/mp4"), kwargs)


@pytest.mark.parametrize("processor", ["Qwen2VLVideoProcessor", "Qwen3VLVideoProcessor"])
def test_the_processor_picks_the_loader_as_in_vllm(processor: str) -> None:
    same(data_url(VIDEOS["mp4v"], "video/mp4"), None, processor)
    same(data_url(VIDEOS["mjpg"], "video/mp4"), {"video": {"num_frames": 5}}, processor)


def test_jpeg_sequences_and_bad_videos() -> None:
    images = [encode(noise("RGBA", (8, 6), seed), "PNG") for seed in range(4)]
    payload = ",".join(base64.b64encode(i).decode() for i in images)
    url = f"data:video/jpeg;base64,{payload}"
    for kwargs in [
        None,
        {"video": {"num_frames": 2, "fps": 4}},
        {"video": {"num_frames": -1, "frames_indices": [3, 5, 7, 9], "total_num_frames": 12}},
        {"video": {"frames_indices": [1]}},
        {"video": {"num_frames": 0}},
        {"video": {"duration": -1}},
        {"video": {"backend": "torchcodec"}},
        {"image": {"rgba_background_color": [0, 0, 255]}},
    ]:
        same(url, kwargs)
    same(data_url(b"no video here" * 20, "video/mp4"), None)
    same(data_url(VIDEOS["mjpg"][:3000], "video/mp4"), None)


@pytest.mark.parametrize("processor", [None, "Qwen2VLVideoProcessor", "Qwen3VLVideoProcessor"])
@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "BMP", "GIF"])
def test_a_still_image_sent_as_a_video_gets_vllms_answer(fmt: str, processor: str | None) -> None:
    # OpenCV opens a still image as a "video" whose frame count it reports as INT64_MIN (one
    # frame for a GIF): each loader refuses it (or samples nothing) as vLLM's does.
    image = encode(noise("RGB", (40, 30), 3).convert("P" if fmt == "GIF" else "RGB"), fmt)
    same(data_url(image, "video/mp4"), None, processor)


def test_the_sampling_rules_match_vllms_on_many_clips() -> None:
    from vllm.multimodal.video import Qwen2VLVideoBackend, Qwen3VLVideoBackend, VideoBackend
    from vllm.multimodal.video_decoders import VideoSourceMetadata, VideoTargetMetadata

    rng = random.Random(5)
    for _ in range(3000):
        total = rng.randint(1, 3000)
        fps = rng.choice([0.0, 1.0, 12.5, 23.976, 24.0, 25.0, 29.97, 30.0, 59.94, 60.0])
        fps = fps or rng.uniform(0.5, 120)
        target_fps = rng.choice([-1, 0.5, 1, 2, 3, 4.5, 30, 60])
        num_frames = rng.choice([-1, 1, 4, 16, 32, 100])
        extra = rng.choice([{}, {"min_frames": 2, "max_frames": 64}, {"temporal_patch_size": 1}])
        source = Source(total, fps, total / fps)
        vsource = VideoSourceMetadata(total, fps, total / fps)
        target = Target(num_frames, target_fps)
        vtarget = VideoTargetMetadata(num_frames, target_fps, 300)
        assert uniform_indices(source, target) == VideoBackend.compute_frames_index_to_sample(
            vsource, vtarget
        )
        if target_fps > 0:
            assert qwen3_vl_indices(
                source, target, **extra
            ) == Qwen3VLVideoBackend.compute_frames_index_to_sample(vsource, vtarget, **extra)
            try:
                theirs_q2 = Qwen2VLVideoBackend.compute_frames_index_to_sample(
                    vsource, vtarget, **extra
                )
            except ZeroDivisionError:
                with pytest.raises(ZeroDivisionError):
                    qwen2_vl_indices(source, target, **extra)
                continue
            assert qwen2_vl_indices(source, target, **extra) == theirs_q2, (total, fps, extra)

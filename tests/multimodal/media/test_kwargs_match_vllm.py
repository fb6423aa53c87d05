"""A request's media_io_kwargs merged over the server's as vLLM 0.32 merges them."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from vllm_frontend.multimodal.media.kwargs import merge_media_io_kwargs

pytestmark = pytest.mark.oracle  # imports vLLM as the reference

SIDES: list[dict[str, Any] | None] = [
    None,
    {},
    {"image": {"image_mode": "L"}},
    {"video": {"num_frames": 8}},
    {"video": {"fps": 2, "num_frames": 16, "backend": "torchcodec", "seek_mode": "exact"}},
    {"video": {"fps": 4}},
    {"video": {"backend": "opencv", "device": "cuda", "hw_decoders": 3, "pool_size": 2}},
    {"video": {"video_backend": "pynvvideocodec", "backend": "deepstream"}},
    {"video": {"video_backend": "qwen3_vl"}, "audio": {"audio_backend": "pyav"}},
    {"audio": {"audio_backend": "soundfile"}, "image": {"rgba_background_color": [1, 2, 3]}},
]


def test_every_pair_merges_as_in_vllm() -> None:
    from vllm.multimodal.media.connector import merge_media_io_kwargs as vllm_merge

    for defaults, request in itertools.product(SIDES, SIDES):
        assert merge_media_io_kwargs(defaults, request) == vllm_merge(defaults, request), (
            defaults,
            request,
        )

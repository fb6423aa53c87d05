"""Engine-request differential for Qwen2.5-VL: vLLM 0.32's Python frontend and ours, each in
front of a recording mock engine, get the same image and video chat requests (those of
test_engine_requests); the engine requests must be equal, ``second_per_grid_ts`` of every
video included, and a repeated item goes without its data from both."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.multimodal.recorded import Side, compare_requests, recorded_sides
from tests.multimodal.test_engine_requests import LIMITS, REQUESTS, _post
from tests.support.tiny_qwen25_vl import tiny_qwen25_vl_dir
from tests.support.tiny_vlm import VLM_PYTHONPATH

pytestmark = pytest.mark.engine

CASES = ["one image", "sizes and interleaved text", "video", "videos and images", "jpeg frames"]


@pytest.fixture(scope="module")
def sides(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Side]]:
    tmp = tmp_path_factory.mktemp("records-qwen25")
    args = ["--limit-mm-per-prompt", LIMITS]
    yield from recorded_sides(tiny_qwen25_vl_dir(), tmp, args, {"PYTHONPATH": VLM_PYTHONPATH})


_SENT: dict[str, Any] = {}


@pytest.mark.parametrize("name", CASES)
def test_engine_requests_equal(sides: dict[str, Side], name: str) -> None:
    for _ in range(2):  # the second time, the items are held by the engine
        responses = {k: _post(side, REQUESTS[name]) for k, side in sides.items()}
        assert responses["ours"].status_code == responses["vllm"].status_code == 200
        [vllm] = sides["vllm"].new_requests()
        [ours] = sides["ours"].new_requests()
        compare_requests(vllm, ours, _SENT)
        videos = [f for f in ours.mm_features or [] if f.modality == "video" and f.data]
        assert all("second_per_grid_ts" in f.data for f in videos)

"""Engine-request differential for Qwen2.5-VL and Qwen3-VL: vLLM 0.32's Python frontend and
ours, each in front of a recording mock engine, get the same image and video chat requests
(those of test_engine_requests); the engine requests must be equal (Qwen2.5-VL's
``second_per_grid_ts``, Qwen3-VL's timestamped frames and ``timestamps`` field included), and a
repeated item goes without its data from both."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest

from tests.multimodal.recorded import Side, compare_requests, recorded_sides
from tests.multimodal.test_engine_requests import BAD, LIMITS, REQUESTS, _post
from tests.support.tiny_qwen3_vl import tiny_qwen3_vl_dir
from tests.support.tiny_qwen25_vl import tiny_qwen25_vl_dir
from tests.support.tiny_vlm import VLM_PYTHONPATH

pytestmark = pytest.mark.engine

CASES = ["one image", "sizes and interleaved text", "video", "videos and images", "jpeg frames"]


MODELS = {"qwen2_5_vl": tiny_qwen25_vl_dir, "qwen3_vl": tiny_qwen3_vl_dir}


def recorded(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[dict[str, Side]]:
    """Model ``name``'s recorded stack, its directory and model made now (started by the
    session's ``recorded_qwen_vl`` beside test_engine_requests')."""
    tmp = tmp_path_factory.mktemp(f"records-{name}")
    args = ["--limit-mm-per-prompt", LIMITS]
    return recorded_sides(MODELS[name](), tmp, args, {"PYTHONPATH": VLM_PYTHONPATH})


@pytest.fixture(scope="module", params=list(MODELS))
def sides(
    request: pytest.FixtureRequest, recorded_qwen_vl: dict[str, Future[dict[str, Side]]]
) -> dict[str, Side]:
    return recorded_qwen_vl[request.param].result()


_SENT: dict[str, Any] = {}


@pytest.mark.parametrize("name", CASES)
def test_engine_requests_equal(
    sides: dict[str, Side], name: str, request: pytest.FixtureRequest
) -> None:
    qwen3 = request.node.callspec.params["sides"] == "qwen3_vl"
    for _ in range(2):  # the second time, the items are held by the engine
        responses = {k: _post(side, REQUESTS[name]) for k, side in sides.items()}
        assert responses["ours"].status_code == responses["vllm"].status_code == 200
        [vllm] = sides["vllm"].new_requests()
        [ours] = sides["ours"].new_requests()
        compare_requests(vllm, ours, _SENT)
        videos = [f for f in ours.mm_features or [] if f.modality == "video" and f.data]
        extra = "timestamps" if qwen3 else "second_per_grid_ts"
        assert all(extra in f.data for f in videos)


@pytest.mark.parametrize("name", ["4000x1", "1x4000 after a good image"])
def test_an_aspect_ratio_the_processor_refuses_answers_as_vllm(
    sides: dict[str, Side], name: str
) -> None:
    # vLLM names its Hugging Face processor (Qwen2_5_VLProcessor, Qwen3VLProcessor) and the
    # request's images in its message.
    responses = {k: _post(side, BAD[name]) for k, side in sides.items()}
    assert responses["ours"].status_code == responses["vllm"].status_code == 400
    assert responses["ours"].json() == responses["vllm"].json()
    for side in sides.values():
        assert side.new_requests() == []

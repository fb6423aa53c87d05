"""Engine-request differential: vLLM 0.32's Python frontend and ours, each in front of a mock
engine that records every ADD request, get the same image chat requests; the engine requests
must be equal (prompt ids, placeholder ranges, hashes and identifiers, field factories, tensor
dtypes, shapes and values). Bad input gets vLLM's status and error body.

Both frontends mirror the engine's multimodal cache: an item the engine already holds goes as
``data=None`` from both, on the same requests.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
from PIL import Image

from tests.multimodal.media.videos import make_video
from tests.multimodal.recorded import Side, compare_requests, recorded_sides
from tests.support.tiny_vlm import VLM_PYTHONPATH, tiny_vlm_dir

pytestmark = pytest.mark.engine


LIMITS = '{"image": 3, "video": 2}'


@pytest.fixture(scope="module")
def sides(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Side]]:
    tmp = tmp_path_factory.mktemp("records")
    args = ["--limit-mm-per-prompt", LIMITS]
    yield from recorded_sides(tiny_vlm_dir(), tmp, args, {"PYTHONPATH": VLM_PYTHONPATH})


def _png(width: int, height: int, seed: int, mode: str = "RGB") -> str:
    rng = np.random.default_rng(seed)
    image = Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))
    buf = io.BytesIO()
    image.convert(mode).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _jpeg(width: int, height: int, seed: int) -> str:
    rng = np.random.default_rng(seed)
    image = Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))
    buf = io.BytesIO()
    image.save(buf, "JPEG", quality=90)
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode()


def _video(frames: int, fps: float, size: tuple[int, int], fourcc: str = "mp4v") -> dict:
    data = make_video(frames, fps, size, fourcc)
    url = "data:video/mp4;base64," + base64.b64encode(data).decode()
    return {"type": "video_url", "video_url": {"url": url}}


def _jpeg_frames(count: int, seed: int) -> dict:
    frames = [_jpeg(56, 84, seed + i).split(",", 1)[1] for i in range(count)]
    return {"type": "video_url", "video_url": {"url": "data:video/jpeg;base64," + ",".join(frames)}}


def _truncated_png() -> str:
    data = base64.b64decode(_png(64, 48, 1).split(",", 1)[1])
    return "data:image/png;base64," + base64.b64encode(data[: len(data) // 2]).decode()


def _image(url: str, **extra: Any) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}, **extra}


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _post(side: Side, messages: list[Any], **extra: Any) -> httpx.Response:
    body = {"messages": messages, "max_tokens": 3, **extra}
    return httpx.post(side.url + "/v1/chat/completions", json=body, timeout=120)


REQUESTS = {
    "one image": [{"role": "user", "content": [_image(_png(64, 48, 1)), _text("What is it?")]}],
    "sizes and interleaved text": [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                _text("First:"),
                _image(_png(300, 200, 2)),
                _text("then"),
                _image(_jpeg(97, 431, 3)),
                _text("and"),
                _image(_png(20, 20, 4, "L")),
            ],
        },
    ],
    "repeated image": [
        {"role": "user", "content": [_image(_png(64, 48, 1)), _image(_png(64, 48, 1))]},
        {"role": "assistant", "content": "Two."},
        {"role": "user", "content": [_text("Again"), _image(_png(300, 200, 2))]},
    ],
    "uuid": [{"role": "user", "content": [_image(_png(50, 90, 5), uuid="my-image")]}],
    "transparent": [{"role": "user", "content": [_image(_png(70, 30, 6, "RGBA"))]}],
    "string content": [{"role": "user", "content": "No image here."}],
    "video": [{"role": "user", "content": [_video(24, 8.0, (96, 64)), _text("What happens?")]}],
    "videos and images": [
        {
            "role": "user",
            "content": [
                _image(_png(64, 48, 1)),
                _video(10, 5.0, (160, 90), "MJPG"),
                _text("and"),
                _video(7, 30.0, (50, 70)),
                _image(_jpeg(97, 431, 3)),
            ],
        }
    ],
    "jpeg frames": [{"role": "user", "content": [_jpeg_frames(5, 40), _text("Frames.")]}],
    "video uuid": [
        {"role": "user", "content": [{**_video(12, 6.0, (64, 64)), "uuid": "my-video"}]}
    ],
}


# What vLLM sent for each item hash (its later requests send data=None for them).
_SENT: dict[str, Any] = {}


@pytest.mark.parametrize("name", list(REQUESTS))
def test_engine_requests_equal(sides: dict[str, Side], name: str) -> None:
    cached = _SENT
    for _ in range(2):  # the second time, vLLM's sender cache has the items
        responses = {k: _post(side, REQUESTS[name]) for k, side in sides.items()}
        assert responses["ours"].status_code == responses["vllm"].status_code == 200
        [vllm] = sides["vllm"].new_requests()
        [ours] = sides["ours"].new_requests()
        compare_requests(vllm, ours, cached)


def test_reset_mm_cache_clears_the_mirror_as_vllm(sides: dict[str, Side]) -> None:
    # After /reset_mm_cache (VLLM_SERVER_DEV_MODE), both frontends send held items with their
    # data again: vLLM clears its sender cache before the engine's.
    messages = [{"role": "user", "content": [_image(_png(40, 30, 77)), _video(6, 3.0, (48, 40))]}]
    for reset in (False, True):
        if reset:
            for side in sides.values():
                response = httpx.post(side.url + "/reset_mm_cache", timeout=60)
                assert response.status_code == 200, response.text
        for _ in range(2):
            responses = {k: _post(side, messages) for k, side in sides.items()}
            assert responses["ours"].status_code == responses["vllm"].status_code == 200
        vllm = sides["vllm"].new_requests()
        ours = sides["ours"].new_requests()
        assert len(vllm) == len(ours) == 2
        for theirs, mine in zip(vllm, ours, strict=True):
            compare_requests(theirs, mine, _SENT)
        # The first of the two carries every item's data, the second none.
        assert all(f.data is not None for f in ours[0].mm_features)
        assert all(f.data is None for f in ours[1].mm_features)


@pytest.mark.parametrize("key", ["mm_processor_kwargs", "media_io_kwargs"])
def test_request_mm_kwargs_refused_as_vllm(sides: dict[str, Side], key: str) -> None:
    # Without --trust-request-mm-kwargs (not taken by this frontend yet).
    value = {"max_pixels": 20000} if key == "mm_processor_kwargs" else {"image": {"x": 1}}
    messages = REQUESTS["one image"]
    responses = {k: _post(side, messages, **{key: value}) for k, side in sides.items()}
    assert responses["ours"].status_code == responses["vllm"].status_code == 400
    assert responses["ours"].json() == responses["vllm"].json()


BAD = {
    "truncated png": [{"role": "user", "content": [_image(_truncated_png())]}],
    "bad base64": [{"role": "user", "content": [_image("data:image/png;base64,aGVsbG8gd29ybGQ")]}],
    "not an image": [
        {"role": "user", "content": [_image("data:image/png;base64," + "aGVsbG8gd29ybGQ=")]}
    ],
    "too many images": [{"role": "user", "content": [_image(_png(8 + i, 8, i)) for i in range(4)]}],
    "video": [{"role": "user", "content": [{"type": "video_url", "video_url": {"url": "x"}}]}],
    "too many videos": [
        {"role": "user", "content": [_video(4, 4.0, (32, 32 + 2 * i)) for i in range(3)]}
    ],
    "image embeds": [
        {"role": "user", "content": [{"type": "image_embeds", "image_embeds": "AAAA"}]}
    ],
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_input_answers_as_vllm(sides: dict[str, Side], name: str) -> None:
    responses = {k: _post(side, BAD[name]) for k, side in sides.items()}
    assert responses["ours"].status_code == responses["vllm"].status_code
    assert responses["ours"].json() == responses["vllm"].json()
    for side in sides.values():
        assert side.new_requests() == []


def test_output_budget_counts_the_placeholders(sides: dict[str, Side]) -> None:
    # 2048-token context: the expanded prompt (~150 tokens) leaves less than 2000 for output,
    # and a max_tokens beyond the context is refused.
    messages = REQUESTS["one image"]
    for max_tokens in (2000, 1900, 4096):
        responses = {k: _post(side, messages, max_tokens=max_tokens) for k, side in sides.items()}
        assert responses["ours"].status_code == responses["vllm"].status_code
        if responses["vllm"].status_code != 200:
            assert responses["ours"].json() == responses["vllm"].json()
            continue
        [vllm] = sides["vllm"].new_requests()
        [ours] = sides["ours"].new_requests()
        assert ours.sampling_params.max_tokens == vllm.sampling_params.max_tokens
        compare_requests(vllm, ours, _SENT)


def test_memory_stays_flat_over_many_image_requests(sides: dict[str, Side]) -> None:
    import psutil

    side = sides["ours"]
    process = psutil.Process(side.processes[0].pid)

    def burst(first_seed: int, count: int) -> None:
        for seed in range(first_seed, first_seed + count):
            content = [_image(_jpeg(640, 480, seed * 3 + k)) for k in range(3)]
            response = _post(side, [{"role": "user", "content": content}])
            assert response.status_code == 200

    burst(1000, 20)  # warm-up: pools, caches, allocator arenas
    side.new_requests()
    before = process.memory_info().rss
    burst(2000, 60)  # ~110 MB of pixel tensors: kept, they would show
    side.new_requests()
    growth = process.memory_info().rss - before
    assert growth < 40 * 2**20, growth


@pytest.mark.parametrize("keep", [5, 40, 120, 200, 400, -1])
@pytest.mark.parametrize("side", [None, "right"])
def test_truncation_keeps_items_whole_as_vllm(
    sides: dict[str, Side], keep: int, side: str | None
) -> None:
    # truncate_prompt_tokens cuts the text before placeholders expand; once expanded, a bound
    # that would cut or drop an item is refused, and one that keeps them all cuts text only.
    # Fresh images per case: vLLM's sender cache records the items of a request it then
    # refuses (a later request would send them without data, though the engine never got them).
    seed = 1000 + 10 * keep + (side is None)
    messages = [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                _text("First:"),
                _image(_png(300, 200, seed)),
                _text("then"),
                _image(_jpeg(97, 431, seed + 1)),
            ],
        },
    ]
    extra: dict[str, Any] = {"truncate_prompt_tokens": keep}
    if side is not None:
        extra["truncation_side"] = side
    responses = {k: _post(side_, messages, **extra) for k, side_ in sides.items()}
    theirs, ours = responses["vllm"], responses["ours"]
    if theirs.status_code == 500:
        # The text cut before expansion dropped a placeholder: vLLM's processor fails an
        # assertion (500); ours answers the same message as the client's error it is.
        assert ours.status_code == 400
        assert ours.json()["error"]["message"] == theirs.json()["error"]["message"]
    else:
        assert (ours.status_code, ours.json() if ours.status_code != 200 else None) == (
            theirs.status_code,
            theirs.json() if theirs.status_code != 200 else None,
        )
    if theirs.status_code != 200:
        assert sides["ours"].new_requests() == sides["vllm"].new_requests() == []
        return
    [vllm] = sides["vllm"].new_requests()
    [mine] = sides["ours"].new_requests()
    compare_requests(vllm, mine, _SENT)

"""Engine-request differential for Idefics3: vLLM 0.32's Python frontend and ours, each in front
of a mock engine that records every ADD request (tests/multimodal/recorded.py), serve the tiny
Idefics3 (tests/support/tiny_idefics3.py) and get the same image chat requests; the engine
requests must be equal: prompt ids with every ``<image>`` replaced by the image's tile grid,
placeholder ranges with their ``is_embed`` masks, hashes, the ``pixel_values`` /
``pixel_attention_mask`` / ``num_patches`` fields (factories, dtypes, shapes, values), and
``data=None`` for the items the engine holds, on the same requests."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import httpx
import numpy as np
import pytest
from PIL import Image

from tests.multimodal.recorded import Side, compare_requests, recorded_sides
from tests.support.tiny_idefics3 import tiny_idefics3_dir

pytestmark = pytest.mark.engine

LIMITS = '{"image": 4}'
# The server's image loading options (vLLM's default mode: the same pixels); vLLM hashes a chat
# request's images with them (and a uuid with them, in place of the uuid alone).
MEDIA_IO_KWARGS = '{"image": {"image_mode": "RGB"}}'


def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Side]]:
    """This module's recorded stack, its directory and model made now (started by the
    session's ``recorded_idefics3_qwen2_audio`` beside test_qwen2_audio_requests')."""
    tmp = tmp_path_factory.mktemp("records")
    args = ["--limit-mm-per-prompt", LIMITS, "--media-io-kwargs", MEDIA_IO_KWARGS]
    return recorded_sides(tiny_idefics3_dir(), tmp, args)


@pytest.fixture(scope="module")
def sides(recorded_idefics3_qwen2_audio: dict[str, Future[dict[str, Side]]]) -> dict[str, Side]:
    return recorded_idefics3_qwen2_audio["idefics3"].result()


def _png(width: int, height: int, seed: int, mode: str = "RGB") -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    image = Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))
    buf = io.BytesIO()
    image.convert(mode).save(buf, "PNG")
    url = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    return {"type": "image_url", "image_url": {"url": url}}


def _jpeg(width: int, height: int, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    image = Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))
    buf = io.BytesIO()
    image.save(buf, "JPEG", quality=90)
    url = "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode()
    return {"type": "image_url", "image_url": {"url": url}}


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


REQUESTS = {
    # Every image is resized to a longest edge of 192 pixels first: 64x48 is 3 x 3 tiles.
    "one image": [{"role": "user", "content": [_png(64, 48, 1), _text("What is it?")]}],
    "text first": [{"role": "user", "content": [_text("Look:"), _png(130, 70, 2)]}],
    "sizes and interleaved text": [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                _text("First:"),
                _png(300, 200, 3),
                _text("then"),
                _jpeg(97, 431, 4),
                _text("and"),
                _png(20, 20, 5, "L"),
                _png(1000, 90, 6),
            ],
        },
    ],
    "repeated image": [
        {"role": "user", "content": [_png(64, 48, 1), _png(64, 48, 1)]},
        {"role": "assistant", "content": "Two."},
        {"role": "user", "content": [_text("Again"), _png(300, 200, 3)]},
    ],
    "uuid": [{"role": "user", "content": [{**_png(50, 190, 7), "uuid": "my-image"}]}],
    "transparent": [{"role": "user", "content": [_png(70, 30, 8, "RGBA")]}],
    "string content": [{"role": "user", "content": "No image here."}],
}

# What vLLM sent for each item hash (its later requests send data=None for them).
_SENT: dict[str, Any] = {}


def _post(side: Side, messages: list[Any], **extra: Any) -> httpx.Response:
    body = {"messages": messages, "max_tokens": 3, **extra}
    return httpx.post(side.url + "/v1/chat/completions", json=body, timeout=120)


@pytest.mark.parametrize("name", list(REQUESTS))
def test_engine_requests_equal(sides: dict[str, Side], name: str) -> None:
    for _ in range(2):  # the second time, vLLM's sender cache has the items
        responses = {k: _post(side, REQUESTS[name]) for k, side in sides.items()}
        assert responses["ours"].status_code == responses["vllm"].status_code == 200
        [vllm] = sides["vllm"].new_requests()
        [ours] = sides["ours"].new_requests()
        compare_requests(vllm, ours, _SENT)


def test_engine_requests_have_the_tile_grid(sides: dict[str, Side]) -> None:
    # Not vacuous: a 300x200 image is split (2 rows x 3 columns of 64-pixel tiles, and the
    # global image), and only its <image> positions take embeddings.
    messages = [{"role": "user", "content": [_png(300, 200, 30)]}]
    assert _post(sides["ours"], messages).status_code == 200
    [ours] = sides["ours"].new_requests()
    [feature] = ours.mm_features
    assert int(feature.data["num_patches"].data.numpy()) == 7
    assert feature.data["pixel_values"].data.shape == (7, 3, 64, 64)
    is_embed = np.asarray(feature.mm_position.is_embed.numpy())
    assert is_embed.sum() == 7 * 4 and not is_embed.all()


def test_reset_mm_cache_clears_the_mirror_as_vllm(sides: dict[str, Side]) -> None:
    messages = [{"role": "user", "content": [_png(40, 30, 77), _png(200, 100, 78)]}]
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
        assert all(f.data is not None for f in ours[0].mm_features)
        assert all(f.data is None for f in ours[1].mm_features)


BAD = {
    "too many images": [{"role": "user", "content": [_png(8 + i, 8, i) for i in range(5)]}],
    "video": [{"role": "user", "content": [{"type": "video_url", "video_url": {"url": "x"}}]}],
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_input_answers_as_vllm(sides: dict[str, Side], name: str) -> None:
    responses = {k: _post(side, BAD[name]) for k, side in sides.items()}
    assert responses["ours"].status_code == responses["vllm"].status_code
    assert responses["ours"].json() == responses["vllm"].json()
    for side in sides.values():
        assert side.new_requests() == []


def test_output_budget_counts_the_placeholders(sides: dict[str, Side]) -> None:
    messages = [{"role": "user", "content": [_png(300, 200, 3), _text("Describe.")]}]
    for max_tokens in (2000, 1990, 4096):
        responses = {k: _post(side, messages, max_tokens=max_tokens) for k, side in sides.items()}
        assert responses["ours"].status_code == responses["vllm"].status_code
        if responses["vllm"].status_code != 200:
            assert responses["ours"].json() == responses["vllm"].json()
            continue
        [vllm] = sides["vllm"].new_requests()
        [ours] = sides["ours"].new_requests()
        assert ours.sampling_params.max_tokens == vllm.sampling_params.max_tokens
        compare_requests(vllm, ours, _SENT)


def test_prompt_over_the_context_once_expanded_answers_as_vllm(sides: dict[str, Side]) -> None:
    # The text alone fits the 2048-token context; with the image's tile grid it does not:
    # vLLM's get_max_tokens refuses it on the expanded prompt (its message, not its input
    # processor's).
    messages = [{"role": "user", "content": [_text("word " * 2000), _png(300, 200, 3)]}]
    responses = {k: _post(side, messages) for k, side in sides.items()}
    assert responses["vllm"].status_code == 400
    assert responses["vllm"].json()["error"]["message"].startswith("Input length (")
    assert responses["ours"].status_code == 400
    assert responses["ours"].json() == responses["vllm"].json()
    for side in sides.values():
        assert side.new_requests() == []

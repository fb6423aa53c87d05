"""Image and video chat end to end on the real CPU engine: the tiny Qwen2-VL behind vLLM 0.32's
own server and behind ours (each with its own engine of the same build and arguments) gives the
same greedy output, streaming and not, for one image, several images of different sizes,
interleaved text, repeated images (vLLM's sender cache sends them as cached), more distinct
images than the small processor cache holds (evictions), videos (vLLM's side processes them
on the test-only torchvision stand-in, tests/fixtures/torchvision_stub), and image embeddings
(``--enable-mm-embeds``) made by the tiny model's own vision tower in transformers.

The same images in the agent APIs: Responses ``input_image`` parts (official ``openai`` SDK)
and Anthropic ``image`` blocks (official ``anthropic`` SDK), as data URLs and as URLs of a
local HTTP server, and ``/v1/responses/render`` with an image."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
from PIL import Image

from tests.multimodal.agent_apis import assert_same_messages, assert_same_responses
from tests.multimodal.engine_pair import assert_same, chat, engine_pair, jpeg_part
from tests.multimodal.media.http_server import MediaServer
from tests.multimodal.media.videos import make_video
from tests.support.tiny_vlm import VLM_PYTHONPATH, tiny_vlm_dir

pytestmark = pytest.mark.engine

# Both engines get exactly these arguments (vLLM's server applies them to its frontend too; ours
# gets the cache size as well, to mirror it). A processor cache of ~1 MB holds a few of these
# images' items, so the tests evict, within a request too.
LIMITS = '{"image": 3, "video": 1}'
# --enable-scale-out: the render routes (tests/multimodal's render comparisons below).
# --enable-prompt-tokens-details: usage counts each modality's placeholder tokens (compared).
ENGINE_ARGS = ("--max-model-len", "2048", "--gpu-memory-utilization", "0.2",
               "--limit-mm-per-prompt", LIMITS, "--mm-processor-cache-gb", "0.001",
               "--enable-mm-embeds", "--enable-scale-out",
               "--enable-prompt-tokens-details")  # fmt: skip


@pytest.fixture(scope="module")
def urls() -> Iterator[dict[str, str]]:
    frontend_args = ["--limit-mm-per-prompt", LIMITS, "--mm-processor-cache-gb", "0.001",
                     "--enable-mm-embeds", "--enable-scale-out",
                     "--enable-prompt-tokens-details"]  # fmt: skip
    env = {"PYTHONPATH": VLM_PYTHONPATH}
    # the agent API tests fetch images from a server on 127.0.0.1 (vLLM fetches from anywhere)
    ours_env = {"VLLM_FRONTEND_ALLOW_PRIVATE_MEDIA_ADDRESSES": "1"}
    yield from engine_pair(tiny_vlm_dir(), ENGINE_ARGS, frontend_args, env, ours_env)


def _image(width: int, height: int, seed: int) -> dict[str, Any]:
    return jpeg_part(width, height, seed)


def _same(urls: dict[str, str], messages: list[Any]) -> None:
    assert_same(urls, messages)


def test_one_image(urls: dict[str, str]) -> None:
    _same(
        urls,
        [{"role": "user", "content": [_image(640, 480, 1), {"type": "text", "text": "Describe."}]}],
    )


def test_usage_counts_each_modalitys_placeholder_tokens(urls: dict[str, str]) -> None:
    # vLLM's chat reports multimodal_tokens in prompt_tokens_details (compared by every test
    # here); this one checks that the count is there at all, streamed and not.
    content = [_image(64, 48, 11), _image(300, 200, 12), {"type": "text", "text": "Two."}]
    for stream in (False, True):
        got = {name: chat(url, [{"role": "user", "content": content}], stream)
               for name, url in urls.items()}  # fmt: skip
        assert got["ours"] == got["vllm"]
        details = got["ours"]["usage"]["prompt_tokens_details"]
        assert list(details["multimodal_tokens"]) == ["image"]
        assert 0 < details["multimodal_tokens"]["image"] < got["ours"]["usage"]["prompt_tokens"]


def test_images_of_different_sizes_interleaved(urls: dict[str, str]) -> None:
    content = [
        {"type": "text", "text": "Compare"},
        _image(64, 48, 2),
        {"type": "text", "text": "with"},
        _image(300, 700, 3),
        _image(1000, 90, 4),
    ]
    _same(urls, [{"role": "user", "content": content}])  # fmt: skip


def test_repeated_images(urls: dict[str, str]) -> None:
    image = _image(320, 240, 5)
    _same(urls, [{"role": "user", "content": [image, image]}])
    _same(urls, [{"role": "user", "content": [{"type": "text", "text": "Again:"}, image]}])


def test_distinct_images_beyond_the_cache(urls: dict[str, str]) -> None:
    first = _image(400, 400, 100)
    for seed in range(101, 107):
        _same(urls, [{"role": "user", "content": [_image(400, 400, seed)]}])
    _same(urls, [{"role": "user", "content": [first, _image(400, 400, 101)]}])


def _video(frames: int, fps: float, size: tuple[int, int], fourcc: str = "mp4v") -> dict[str, Any]:
    data = make_video(frames, fps, size, fourcc)
    url = "data:video/mp4;base64," + base64.b64encode(data).decode()
    return {"type": "video_url", "video_url": {"url": url}}


def test_video(urls: dict[str, str]) -> None:
    video = _video(24, 8.0, (160, 120))
    _same(urls, [{"role": "user", "content": [video, {"type": "text", "text": "What happens?"}]}])
    # Again (the engine holds it), with an image beside it.
    _same(urls, [{"role": "user", "content": [_image(200, 150, 9), video]}])


def _render(url: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    r = httpx.post(url + path, json=body, headers={"X-Request-Id": "render-mm"}, timeout=300)
    return r.status_code, r.json()


RENDER_CASES: dict[str, dict[str, Any]] = {
    "one image": {
        "messages": [
            {"role": "user", "content": [_image(640, 480, 1), {"type": "text", "text": "Hi"}]}
        ]
    },
    "images interleaved, no tensors, offsets": {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Compare"},
                    _image(64, 48, 2),
                    {"type": "text", "text": "with"},
                    _image(300, 700, 3),
                ],
            }
        ],
        "mm_payload": "none",
        "return_token_offsets": True,
    },
    "image and video": {
        "messages": [{"role": "user", "content": [_image(200, 150, 9), _video(8, 4.0, (64, 48))]}],
        "max_tokens": 3,
    },
}


@pytest.mark.parametrize("case", list(RENDER_CASES))
def test_chat_render_with_media_is_vllms(urls: dict[str, str], case: str) -> None:
    body = RENDER_CASES[case]
    path = "/v1/chat/completions/render"
    ours, theirs = _render(urls["ours"], path, body), _render(urls["vllm"], path, body)
    assert theirs[0] == 200 and theirs[1]["features"] is not None, theirs
    assert ours[0] == 200, ours
    mine, want = dict(ours[1]), dict(theirs[1])
    assert list(mine) == list(want)
    features, expected = mine.pop("features"), want.pop("features")
    assert mine == want
    assert list(features) == list(expected)
    for key in ("mm_hashes", "mm_placeholders"):
        assert features[key] == expected[key], key
    for key in ("kwargs_data", "mm_metadata"):
        assert _items(features[key]) == _items(expected[key]), key


def _items(serialized: dict[str, list[str | None]] | None) -> Any:
    """Serialized items as ``{key: (field, encoded data)}``: vLLM's key order within an item
    is a set's (``MultiModalKwargsItems.from_hf_inputs``), which differs between its processes."""
    import msgspec

    if serialized is None:
        return None
    out: dict[str, list[Any]] = {}
    for modality, items in serialized.items():
        out[modality] = []
        for item in items:
            if item is None:
                out[modality].append(None)
                continue
            decoded = msgspec.msgpack.decode(base64.b64decode(item))
            out[modality].append(
                {k: (v["field"], msgspec.msgpack.encode(v["data"])) for k, v in decoded.items()}
            )
    return out


@pytest.mark.parametrize("metadata_only", [False, True])
def test_generate_with_a_renders_features_is_vllms(
    urls: dict[str, str], metadata_only: bool
) -> None:
    """vLLM's render of an image chat, run by both /inference/v1/generate: the same tokens and
    placeholder ranges (and the same refusal of metadata-only items without EC transfer)."""
    body = {**RENDER_CASES["one image"], "max_tokens": 6, "temperature": 0}
    status, rendered = _render(urls["vllm"], "/v1/chat/completions/render", body)
    assert status == 200, rendered
    rendered["return_token_ids"] = True
    if metadata_only:
        rendered["features"]["kwargs_data"] = None
    answers = {}
    for name, url in urls.items():
        r = httpx.post(url + "/inference/v1/generate", json=rendered, timeout=300)
        answer = r.json()
        answer.pop("created", None)
        answers[name] = (r.status_code, answer)
    assert answers["ours"] == answers["vllm"]
    if not metadata_only:
        status, answer = answers["vllm"]
        assert status == 200 and answer["mm_placeholders"]["image"], answer


@pytest.fixture(scope="module")
def media_server() -> Iterator[MediaServer]:
    with MediaServer().running() as server:
        yield server


def _served_jpeg(server: MediaServer, name: str, width: int, height: int, seed: int) -> str:
    data_url = _image(width, height, seed)["image_url"]["url"]
    server.files[name] = base64.b64decode(data_url.split(",", 1)[1])
    return server.url(f"files/{name}")


# Small images: a request's new item must not evict the request's own held item from the 1 MB
# cache (both frontends would send the held one without data; the engine then misses it).
def test_responses_input_images(urls: dict[str, str], media_server: MediaServer) -> None:
    data_url = _image(140, 112, 21)["image_url"]["url"]
    served = _served_jpeg(media_server, "responses.jpg", 112, 140, 22)
    text = {"type": "input_text", "text": "Describe."}
    assert_same_responses(
        urls, [{"role": "user", "content": [{"type": "input_image", "image_url": data_url}, text]}]
    )
    two = [
        text,
        {"type": "input_image", "image_url": served, "detail": "low"},
        {"type": "input_image", "image_url": data_url},
    ]
    assert_same_responses(urls, [{"role": "user", "content": two}])


def test_anthropic_image_blocks(urls: dict[str, str], media_server: MediaServer) -> None:
    data = _image(140, 112, 23)["image_url"]["url"].split(",", 1)[1]
    base64_block = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/jpeg", "data": data},
    }
    served = _served_jpeg(media_server, "messages.jpg", 112, 112, 24)
    url_block = {"type": "image", "source": {"type": "url", "url": served}}
    assert_same_messages(urls, [base64_block, {"type": "text", "text": "Describe."}])
    assert_same_messages(urls, [{"type": "text", "text": "Compare"}, url_block, base64_block])


def test_responses_render_with_an_image_is_vllms(urls: dict[str, str]) -> None:
    image = {"type": "input_image", "image_url": _image(200, 150, 25)["image_url"]["url"]}
    content = [image, {"type": "input_text", "text": "Hi"}]
    body = {"input": [{"role": "user", "content": content}], "request_id": "resp-mm"}
    ours = _render(urls["ours"], "/v1/responses/render", body)
    theirs = _render(urls["vllm"], "/v1/responses/render", body)
    assert theirs[0] == 200 and theirs[1]["features"] is not None, theirs
    assert ours[0] == 200, ours
    mine, want = dict(ours[1]), dict(theirs[1])
    features, expected = mine.pop("features"), want.pop("features")
    assert mine == want
    for key in ("mm_hashes", "mm_placeholders"):
        assert features[key] == expected[key], key
    assert _items(features["kwargs_data"]) == _items(expected["kwargs_data"])


def test_image_embeds(urls: dict[str, str]) -> None:
    # transformers' Qwen2-VL vision tower makes the embeddings (an engine module: the test
    # process may import it). Last in the module: vLLM's sender cache does not record the
    # items of a request with embeddings though its engine stores them, so its later requests
    # could miss.
    import torch
    from transformers import Qwen2VLForConditionalGeneration

    from vllm_frontend.multimodal.processors.qwen2_vl import Qwen2VLImageProcessor

    model_dir = tiny_vlm_dir()
    config = json.loads((model_dir / "preprocessor_config.json").read_text())
    processor = Qwen2VLImageProcessor.from_config(config)
    rng = np.random.default_rng(11)
    image = Image.fromarray(rng.integers(0, 256, (150, 200, 3), dtype=np.uint8))
    out = processor.preprocess(image, "float32")  # transformers' pixel values, bit for bit
    model = Qwen2VLForConditionalGeneration.from_pretrained(model_dir, dtype=torch.bfloat16)
    with torch.no_grad():
        embeds = model.model.visual(
            torch.from_numpy(np.asarray(out.pixel_values)).bfloat16(),
            grid_thw=torch.tensor([out.grid_thw]),
        ).pooler_output
    t, h, w = out.grid_thw
    assert embeds.shape == (t * h * w // 4, 128)
    buf = io.BytesIO()
    torch.save(embeds, buf)
    part = {
        "type": "image_embeds",
        "image_embeds": {
            "image_embeds": base64.b64encode(buf.getvalue()).decode(),
            "image_grid_thw": list(out.grid_thw),
        },
    }
    _same(urls, [{"role": "user", "content": [part, {"type": "text", "text": "Describe."}]}])

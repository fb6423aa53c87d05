"""Image and video chat end to end on the real CPU engine: the tiny Qwen2-VL behind vLLM 0.32's
own server and behind ours (each with its own engine of the same build and arguments) gives the
same greedy output, streaming and not, for one image, several images of different sizes,
interleaved text, repeated images (vLLM's sender cache sends them as cached), more distinct
images than the small processor cache holds (evictions), and videos (vLLM's side processes them
on the test-only torchvision stand-in, tests/fixtures/torchvision_stub)."""

from __future__ import annotations

import base64
import io
import json
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
from PIL import Image

from tests.multimodal.media.videos import make_video
from tests.support.engines import (
    free_port,
    http_status,
    start_headless_engines,
    start_vllm,
    start_vllm_server,
)
from tests.support.tiny_vlm import VLM_PYTHONPATH, tiny_vlm_dir

pytestmark = pytest.mark.engine

# Both engines get exactly these arguments (vLLM's server applies them to its frontend too; ours
# gets the cache size as well, to mirror it). A processor cache of ~1 MB holds a few of these
# images' items, so the tests evict, within a request too.
LIMITS = '{"image": 3, "video": 1}'
ENGINE_ARGS = ("--max-model-len", "2048", "--gpu-memory-utilization", "0.2",
               "--limit-mm-per-prompt", LIMITS, "--mm-processor-cache-gb", "0.001")  # fmt: skip


@pytest.fixture(scope="module")
def urls() -> Iterator[dict[str, str]]:
    model = tiny_vlm_dir()
    env = {"PYTHONPATH": VLM_PYTHONPATH}
    started: list[Any] = []
    try:
        rpc, port = free_port(), free_port()
        engines = start_headless_engines(rpc, 1, model=model, extra_args=ENGINE_ARGS, env=env)
        started.append(engines)
        reference = start_vllm_server(model=model, extra_args=ENGINE_ARGS, env=env)
        started.append(reference)
        ours = start_vllm(
            "ours-vlm",
            ["-m", "vllm_frontend", "serve", str(model), "--port", str(port),
             "--data-parallel-size-local", "0", "--data-parallel-rpc-port", str(rpc),
             "--limit-mm-per-prompt", LIMITS, "--mm-processor-cache-gb", "0.001"],
            program=sys.executable,
        )  # fmt: skip
        started.append(ours)
        reference.wait_ready(900)
        import time

        deadline = time.monotonic() + 900
        while http_status(port, timeout=2) != 200:
            ours.check_running()
            engines.check_running()
            assert time.monotonic() < deadline
            time.sleep(1)
        yield {"ours": f"http://127.0.0.1:{port}", "vllm": reference.base_url}
    finally:
        for p in reversed(started):
            p.stop()


def _image(width: int, height: int, seed: int) -> dict[str, Any]:
    # Smooth images (a gradient plus noise): JPEG keeps them recognisable.
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([x * 255 // max(width, 1), y * 255 // max(height, 1), (x + y) % 256], -1)
    noise = rng.integers(0, 40, (height, width, 3))
    pixels = np.clip(base + noise, 0, 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "JPEG", quality=85)
    url = "data:image/jpeg;base64," + base64.b64encode(out.getvalue()).decode()
    return {"type": "image_url", "image_url": {"url": url}}


def _chat(url: str, messages: list[Any], stream: bool) -> tuple[str, dict[str, Any] | None]:
    body = {"messages": messages, "max_tokens": 16, "temperature": 0, "stream": stream}
    if not stream:
        r = httpx.post(url + "/v1/chat/completions", json=body, timeout=300)
        assert r.status_code == 200, r.text
        data = r.json()
        return data["choices"][0]["message"]["content"], data["usage"]
    body["stream_options"] = {"include_usage": True}
    text, usage = "", None
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=300) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for choice in chunk.get("choices", []):
                text += choice["delta"].get("content") or ""
            usage = chunk.get("usage") or usage
    return text, usage


def _same(urls: dict[str, str], messages: list[Any]) -> None:
    for stream in (False, True):
        results = {name: _chat(url, messages, stream) for name, url in urls.items()}
        assert results["ours"] == results["vllm"], stream


def test_one_image(urls: dict[str, str]) -> None:
    _same(
        urls,
        [{"role": "user", "content": [_image(640, 480, 1), {"type": "text", "text": "Describe."}]}],
    )


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

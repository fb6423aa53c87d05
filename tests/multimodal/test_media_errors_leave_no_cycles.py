"""A request refused for its media leaves no cyclic garbage: the payload it carried (megabytes
of base64, bytes, decoded pixels) is freed when its answer is sent, not at the cyclic GC's next
run, which the serving process runs rarely (see ``vllm_frontend.cmd.runner``). Otherwise a client
sending bad images piles their payloads up in memory. Ours in-process, as
tests/server/test_no_reference_cycles.py runs it, serving the tiny Qwen2-VL in front of the
mock engine."""

from __future__ import annotations

import base64
import types
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.ours import OurServer
from tests.multimodal.media.http_server import MediaServer
from tests.multimodal.media.images import data_url, encode, noise, png_declaring
from tests.support.cyclic_garbage import cyclic_garbage, ours_on_mock_engine, post
from tests.support.tiny_vlm import tiny_vlm_dir

MODEL = "m"
_PNG = encode(noise("RGB", (40, 30), 1), "PNG")


@pytest.fixture(scope="module")
def media() -> Iterator[MediaServer]:
    server = MediaServer()
    server.files["a.png"] = _PNG
    server.files["junk"] = bytes(range(256)) * 64
    with server.running() as running:
        yield running


@pytest.fixture(scope="module")
def server() -> Iterator[OurServer]:
    with ours_on_mock_engine(
        tiny_vlm_dir(),
        max_model_len=2048,
        args={
            "served_model_name": [MODEL],
            "allow_private_media_addresses": True,
            "limit_mm_per_prompt": {"image": 2},
        },
        env={"VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB": "1", "VLLM_MEDIA_FETCH_MAX_RETRIES": "1"},
    ) as ours:
        yield ours


def _post(server: OurServer, content: list[Any]) -> bytes:
    body = {"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": 2}
    return post(server, "/v1/chat/completions", body)


def _image(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def _cases(media: MediaServer) -> dict[str, tuple[list[Any], int]]:
    truncated = _PNG[: len(_PNG) // 2]
    wide = noise("RGB", (4000, 1), 2)
    return {
        "an image": ([_image(data_url(_PNG))], 200),
        "not an image": ([_image(data_url(b"hello" * 1000))], 400),
        "truncated png": ([_image(data_url(truncated))], 400),
        "bad base64": ([_image("data:image/png;base64,abc")], 400),
        "decompression bomb": ([_image(data_url(png_declaring(30000, 30000)))], 400),
        "too many images": ([_image(data_url(_PNG))] * 3, 400),
        "404": ([_image(media.url("status/404"))], 422),
        "not an image over http": ([_image(media.url("files/junk"))], 400),
        "endless body": ([_image(media.url("forever"))], 422),
        "4000x1 (the processor refuses it)": ([_image(data_url(encode(wide, "PNG")))], 400),
        "not a video": (
            [{"type": "video_url", "video_url": {"url": data_url(b"hello" * 100, "video/mp4")}}],
            400,
        ),
        "audio to an image-only model": (
            [{"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}],
            400,
        ),
        "a good image and a bad one": (
            [_image(data_url(_PNG)), _image(_junk_png_url())],
            400,
        ),
        # the second fails first; the first one's error is the answer (vLLM's order)
        "two bad images": ([_image(data_url(truncated)), _image(_junk_png_url())], 400),
        "an empty url and a bad image": ([_image(""), _image(_junk_png_url())], 400),
    }


def _junk_png_url() -> str:
    return "data:image/png;base64," + base64.b64encode(b"\x89PNG junk").decode()


CASES = [
    "an image", "not an image", "truncated png", "bad base64", "decompression bomb",
    "too many images", "404", "not an image over http", "endless body",
    "4000x1 (the processor refuses it)", "not a video", "audio to an image-only model",
    "a good image and a bad one", "two bad images", "an empty url and a bad image",
]  # fmt: skip


@pytest.mark.parametrize("name", CASES)
def test_a_media_request_leaves_no_cyclic_garbage(
    server: OurServer, media: MediaServer, name: str
) -> None:
    content, status = _cases(media)[name]
    reply = _post(server, content)  # warm-up: lazily built caches and sessions
    assert reply.startswith(f"HTTP/1.1 {status} ".encode()), reply[:300]
    garbage = cyclic_garbage(lambda: _post(server, content), _ours)
    assert garbage == []


def _ours(garbage: object) -> str | None:
    # The frontend's objects and frames (the test's media server shares the process: aiohttp
    # leaves a cycle when its endless body's reader goes away, not ours to judge).
    if isinstance(garbage, types.FrameType):
        code = garbage.f_code
        return f"{code.co_filename}:{code.co_name}" if "vllm_frontend" in code.co_filename else None
    name = f"{type(garbage).__module__}.{type(garbage).__qualname__}"
    return name if name.startswith("vllm_frontend") else None

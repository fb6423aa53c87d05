"""A served frontend (in front of the mock engine) while the media a request names is slow,
endless or abandoned: other requests go on being answered, an endless body is cut at the
download limit, and a request whose client left while its image was fetched never reaches
the engine. (Ours alone: vLLM's frontend behaves the same in these respects but starting it
costs a minute; the statuses and bodies are compared with vLLM's in test_engine_requests and
media/test_fetch_matches_vllm.)"""

from __future__ import annotations

import json
import os
import pathlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.multimodal.media.http_server import MediaServer
from tests.multimodal.media.images import encode, noise
from tests.support.mock_serve import MockServe, mock_serve
from tests.support.tiny_vlm import tiny_vlm_dir
from vllm_frontend.mock.recording import read_requests


@pytest.fixture(scope="module")
def media() -> Iterator[MediaServer]:
    server = MediaServer()
    server.files["a.png"] = encode(noise("RGB", (40, 30), 1), "PNG")
    server.files["big.png"] = encode(noise("RGB", (200, 100), 2), "PNG", compress_level=0)
    with server.running() as running:
        yield running


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MockServe, pathlib.Path]]:
    tmp = tmp_path_factory.mktemp("slow-media")
    record = tmp / "requests.bin"
    saved = os.environ.get("VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB")
    os.environ["VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB"] = "4"  # read by the served process
    try:
        with mock_serve(
            tiny_vlm_dir(),
            tmp / "frontend.log",
            serve_args=["--allow-private-media-addresses", "--max-model-len", "2048"],
            engine_args=["--max-model-len", "2048", "--record-requests", str(record)],
        ) as serve:
            yield serve, record
    finally:
        if saved is None:
            os.environ.pop("VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB", None)
        else:
            os.environ["VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB"] = saved


def _body(*urls: str) -> dict[str, Any]:
    content: list[Any] = [{"type": "image_url", "image_url": {"url": url}} for url in urls]
    content.append({"type": "text", "text": "What is it?"})
    return {"messages": [{"role": "user", "content": content}], "max_tokens": 2}


def _chat(serve: MockServe, *urls: str) -> httpx.Response:
    base = f"http://127.0.0.1:{serve.port}"
    return httpx.post(base + "/v1/chat/completions", json=_body(*urls), timeout=60)


def test_text_requests_are_answered_while_an_image_is_slow(
    served: tuple[MockServe, pathlib.Path], media: MediaServer
) -> None:
    serve, _ = served
    slow: dict[str, Any] = {}

    def fetch_slowly() -> None:
        slow["response"] = _chat(serve, media.url("faulty/slow/a.png?delay=3"))
        slow["done"] = time.monotonic()

    thread = threading.Thread(target=fetch_slowly)
    thread.start()
    time.sleep(0.3)  # the slow request is waiting on its image by now
    started = time.monotonic()
    for _ in range(3):
        assert _chat(serve).status_code == 200
    text_done = time.monotonic()
    thread.join(30)
    assert slow["response"].status_code == 200, slow["response"].text
    assert slow["done"] > text_done  # not queued behind the image (3 s to arrive)
    assert text_done - started < 2.5


def test_an_endless_body_is_cut_at_the_download_limit(
    served: tuple[MockServe, pathlib.Path], media: MediaServer
) -> None:
    import psutil

    serve, _ = served
    process = psutil.Process(serve.process.pid)
    before = process.memory_info().rss
    media.sent_forever = 0
    response = _chat(serve, media.url("forever"))
    assert response.status_code == 422, response.text
    assert "VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB=4" in response.json()["error"]["message"]
    time.sleep(0.3)
    sent = media.sent_forever
    time.sleep(0.3)
    assert media.sent_forever == sent  # the connection was dropped: the server stopped
    assert process.memory_info().rss - before < 64 * 2**20


def test_a_request_abandoned_during_its_fetch_never_reaches_the_engine(
    served: tuple[MockServe, pathlib.Path], media: MediaServer
) -> None:
    serve, record = served
    assert _chat(serve).status_code == 200
    seen = len(read_requests(record))
    body = json.dumps(_body(media.url("faulty/slow/a.png?delay=1.5"))).encode()
    with socket.create_connection(("127.0.0.1", serve.port)) as client:
        client.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        time.sleep(0.3)  # the image is being fetched
    time.sleep(2.5)  # past the image's arrival
    assert _chat(serve).status_code == 200
    requests = read_requests(record)[seen:]
    assert [r.mm_features for r in requests] == [None]  # only the text request


def test_a_failed_image_stops_the_requests_other_fetches(
    served: tuple[MockServe, pathlib.Path], media: MediaServer
) -> None:
    # One image cannot be decoded while a later one is still arriving: the answer is the
    # first one's 400, at once, and the other fetch is dropped rather than read on for nobody.
    # (A load before the failed one is waited for: vLLM answers the first failure in order.)
    media.sent_dripping = 0
    slow = media.url("drip/big.png?delay=0.1&pieces=40")  # 4 s to arrive
    started = time.monotonic()
    response = _chat(serve := served[0], "data:image/png;base64,aGVsbG8=", slow)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["message"].startswith("Failed to load image")
    assert time.monotonic() - started < 3  # before the slow image's 4 s
    time.sleep(0.4)
    sent = media.sent_dripping
    time.sleep(0.5)
    assert media.sent_dripping == sent < len(media.files["big.png"])
    assert _chat(serve).status_code == 200

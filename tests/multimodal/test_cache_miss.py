"""An engine multimodal cache miss (the frontend's mirror says the engine holds an item it does
not): vLLM 0.32's engine finishes the request with ERROR and the items in
``mm_cache_miss_hashes``; vLLM's frontend drops them from its sender cache and fails the request
as any ERROR finish (``GenerationError``: 500 "Internal server error", or an error event in a
stream), so the client's retry carries the data. Ours, in front of a mock engine that misses
every item sent without data, must do the same."""

from __future__ import annotations

import base64
import io
import json
import pathlib
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
from PIL import Image

from tests.support.engines import free_port, http_status, start_vllm, stop_all
from tests.support.tiny_vlm import tiny_vlm_dir
from vllm_frontend.mock.recording import read_requests

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, pathlib.Path]]:
    record = tmp_path_factory.mktemp("miss") / "requests.bin"
    rpc, port = free_port(), free_port()
    started: list[Any] = []
    try:
        started.append(
            start_vllm(
                "mock-mm-miss",
                ["-m", "vllm_frontend", "mock-engine", "--handshake-address",
                 f"tcp://127.0.0.1:{rpc}", "--max-model-len", "2048", "--vocab-size", "1000",
                 "--mm-cache-misses", "--record-requests", str(record)],
                program=sys.executable,
            )
        )  # fmt: skip
        ours = start_vllm(
            "ours-mm-miss",
            ["-m", "vllm_frontend", "serve", str(tiny_vlm_dir()), "--port", str(port),
             "--data-parallel-size-local", "0", "--data-parallel-rpc-port", str(rpc)],
            program=sys.executable,
        )  # fmt: skip
        started.append(ours)
        deadline = time.monotonic() + 300
        while http_status(port, timeout=2) != 200:
            ours.check_running()
            assert time.monotonic() < deadline, "frontend not ready"
            time.sleep(0.5)
        yield f"http://127.0.0.1:{port}", record
    finally:
        stop_all(started)


def _image(seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    out = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)).save(out, "PNG")
    url = "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()
    return {"type": "image_url", "image_url": {"url": url}}


def _body(seed: int, stream: bool) -> dict[str, Any]:
    content = [_image(seed), {"type": "text", "text": "What is it?"}]
    return {"messages": [{"role": "user", "content": content}], "max_tokens": 3, "stream": stream}


def _data_sent(record: pathlib.Path) -> list[bool]:
    """Whether the last request's items carried their data."""
    return [f.data is not None for f in read_requests(record)[-1].mm_features]


def test_a_miss_fails_the_request_as_vllm_and_the_retry_sends_the_data(
    server: tuple[str, pathlib.Path],
) -> None:
    url, record = server
    first = httpx.post(url + "/v1/chat/completions", json=_body(1, False), timeout=60)
    assert first.status_code == 200, first.text
    assert _data_sent(record) == [True]
    # The mirror says the engine holds the image; this mock engine does not.
    missed = httpx.post(url + "/v1/chat/completions", json=_body(1, False), timeout=60)
    assert _data_sent(record) == [False]
    assert missed.status_code == 500
    assert missed.json() == {
        "error": {
            "message": "Internal server error",
            "type": "InternalServerError",
            "param": None,
            "code": 500,
        }
    }
    # The miss dropped the item from the mirror: the retry carries the data.
    retry = httpx.post(url + "/v1/chat/completions", json=_body(1, False), timeout=60)
    assert retry.status_code == 200, retry.text
    assert _data_sent(record) == [True]


def test_a_miss_in_a_stream_ends_it_with_vllms_error_event(
    server: tuple[str, pathlib.Path],
) -> None:
    url, record = server
    assert httpx.post(url + "/v1/chat/completions", json=_body(2, False), timeout=60).is_success
    with httpx.stream("POST", url + "/v1/chat/completions", json=_body(2, True), timeout=60) as r:
        assert r.status_code == 200
        events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert _data_sent(record) == [False]
    assert events[-1] == "[DONE]"
    errors = [json.loads(e)["error"] for e in events[:-1] if "error" in json.loads(e)]
    assert errors == [
        {"message": "Internal server error", "type": "InternalServerError", "param": None,
         "code": 500}
    ]  # fmt: skip
    retry = httpx.post(url + "/v1/chat/completions", json=_body(2, False), timeout=60)
    assert retry.status_code == 200, retry.text
    assert _data_sent(record) == [True]

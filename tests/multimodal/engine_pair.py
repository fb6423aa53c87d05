"""Image chat on the real CPU engine, ours against vLLM's: a model served by vLLM 0.32's own
server and by ours, each in front of its own engine of the same build and arguments, and the
helpers that send both the same chat request and compare what comes back."""

from __future__ import annotations

import base64
import io
import json
import pathlib
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import httpx
import numpy as np
from PIL import Image

from tests.support.engines import (
    free_port,
    http_status,
    start_headless_engines,
    start_vllm,
    start_vllm_server,
    stop_all,
)

READY_TIMEOUT = 900


def engine_pair(
    model: pathlib.Path,
    engine_args: Sequence[str],
    frontend_args: Sequence[str],
    env: Mapping[str, str] | None = None,
    frontend_env: Mapping[str, str] | None = None,
) -> Iterator[dict[str, str]]:
    """Base URLs of ours ("ours", in front of a headless engine) and vLLM's server ("vllm",
    with its own engine), both with ``engine_args`` (which vLLM's server applies to its frontend
    too); ``frontend_args`` go to ours alone; ``env`` to vLLM's processes, ``frontend_env`` to
    ours. Stopped when the generator is closed."""
    started: list[Any] = []
    try:
        rpc, port = free_port(), free_port()
        engines = start_headless_engines(rpc, 1, model=model, extra_args=engine_args, env=env)
        started.append(engines)
        reference = start_vllm_server(model=model, extra_args=engine_args, env=env)
        started.append(reference)
        ours = start_vllm(
            f"ours-{model.name}",
            ["-m", "vllm_frontend", "serve", str(model), "--port", str(port),
             "--data-parallel-size-local", "0", "--data-parallel-rpc-port", str(rpc),
             *frontend_args],
            frontend_env,
            program=sys.executable,
        )  # fmt: skip
        started.append(ours)
        reference.wait_ready(READY_TIMEOUT)
        deadline = time.monotonic() + READY_TIMEOUT
        while http_status(port, timeout=2) != 200:
            ours.check_running()
            engines.check_running()
            assert time.monotonic() < deadline
            time.sleep(1)
        yield {"ours": f"http://127.0.0.1:{port}", "vllm": reference.base_url}
    finally:
        stop_all(started)


def jpeg_part(width: int, height: int, seed: int) -> dict[str, Any]:
    """An ``image_url`` part: a smooth JPEG (a gradient plus noise, recognisable after JPEG)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([x * 255 // max(width, 1), y * 255 // max(height, 1), (x + y) % 256], -1)
    noise = rng.integers(0, 40, (height, width, 3))
    pixels = np.clip(base + noise, 0, 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "JPEG", quality=85)
    url = "data:image/jpeg;base64," + base64.b64encode(out.getvalue()).decode()
    return {"type": "image_url", "image_url": {"url": url}}


def chat(url: str, messages: list[Any], stream: bool, **extra: Any) -> dict[str, Any]:
    """A greedy chat completion's content and usage (and, when ``extra`` asks for them, its
    logprobs and token ids), streamed or not."""
    body = {"messages": messages, "max_tokens": 16, "temperature": 0, "stream": stream, **extra}
    if not stream:
        r = httpx.post(url + "/v1/chat/completions", json=body, timeout=300)
        assert r.status_code == 200, r.text
        data = r.json()
        [choice] = data["choices"]
        out = {"content": choice["message"]["content"], "usage": data["usage"]}
        for key in ("logprobs", "token_ids"):
            if choice.get(key) is not None:
                out[key] = choice[key]
        if data.get("prompt_token_ids") is not None:
            out["prompt_token_ids"] = data["prompt_token_ids"]
        return out
    body["stream_options"] = {"include_usage": True}
    text, usage, logprobs, token_ids = "", None, [], []
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=300) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for choice in chunk.get("choices", []):
                text += choice["delta"].get("content") or ""
                logprobs += (choice.get("logprobs") or {}).get("content") or []
                token_ids += choice.get("token_ids") or []
            usage = chunk.get("usage") or usage
    out = {"content": text, "usage": usage}
    if logprobs:
        out["logprobs"] = {"content": logprobs}
    if token_ids:
        out["token_ids"] = token_ids
    return out


def assert_same(urls: Mapping[str, str], messages: list[Any], **extra: Any) -> None:
    """Ours and vLLM's answer ``messages`` alike, streamed and not."""
    for stream in (False, True):
        results = {name: chat(url, messages, stream, **extra) for name, url in urls.items()}
        assert results["ours"] == results["vllm"], stream

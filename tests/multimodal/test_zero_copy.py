"""The processed tensors reach the socket without a copy, and nothing keeps them once sent.

A 1024x768 JPEG is lowered to an engine request by the multimodal facade and sent through a
stand-in engine client that encodes it with the real codec and keeps the frames, as ZMQ does
until it has sent them. The ``pixel_values`` frame is a view of the processor's own array;
encoding and sending allocate nothing near its size (tracemalloc); once the frames are gone,
so is the array (no second reference in the request, the prompt or the stream).
"""

from __future__ import annotations

import asyncio
import base64
import gc
import io
import tracemalloc
import weakref
from typing import Any

import numpy as np
from PIL import Image

from tests.support.tiny_model import tiny_model_dir
from vllm_frontend.engine import codec
from vllm_frontend.engine.protocol import EngineCoreRequest
from vllm_frontend.llm import LLM
from vllm_frontend.multimodal.llm import MultimodalLlm
from vllm_frontend.multimodal.media import MediaLoader, MediaPolicy
from vllm_frontend.multimodal.parts import MediaPart
from vllm_frontend.multimodal.qwen2_vl import Qwen2VLFamily
from vllm_frontend.text.llm import TextLlm, TextRequest
from vllm_frontend.text.sampling import ModelSamplingInfo, SamplingRequest
from vllm_frontend.text.tokenizer import Tokenizer

# Llama 3 reserved special tokens stand in for Qwen2-VL's placeholders.
PAD_TOKEN, VIDEO_TOKEN = "<|reserved_special_token_5|>", "<|reserved_special_token_6|>"


class _Stream:
    def take(self) -> list[Any]:
        return []

    def on_ready(self, callback: Any) -> None:
        pass


class _Client:
    """Encodes each request as the engine client does and keeps its frames (ZMQ's part)."""

    def __init__(self) -> None:
        self.frames: list[list[Any]] = []

    def add_request(self, request: EngineCoreRequest) -> _Stream:
        self.frames.append(codec.encode_request(request))
        return _Stream()

    def abort_requests(self, ids: Any) -> None:
        pass


def _facade(client: _Client) -> MultimodalLlm:
    tokenizer = Tokenizer.from_dir(tiny_model_dir())
    sampling = ModelSamplingInfo(max_model_len=8192, eos_token_id=tokenizer.eos_token_id)
    text = TextLlm(LLM(client, EngineCoreRequest), tokenizer, 8192, sampling)
    ids = {"<|image_pad|>": tokenizer.token_to_id(PAD_TOKEN), "<|video_pad|>": 1}
    family = Qwen2VLFamily(
        {"model_type": "qwen2_vl"}, {"max_pixels": 1280 * 28 * 28}, ids.get, {}, True
    )
    loader = MediaLoader(MediaPolicy())
    return MultimodalLlm(text, family, loader, model_id="m", config={"vision_config": {}})


def _jpeg(width: int = 1024, height: int = 768) -> str:
    rng = np.random.default_rng(0)
    image = Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))
    out = io.BytesIO()
    image.save(out, "JPEG", quality=90)
    return "data:image/jpeg;base64," + base64.b64encode(out.getvalue()).decode()


def _generation(media: MultimodalLlm, url: str, request_id: str) -> Any:
    parts = media.new_parts()
    parts.add(MediaPart("image", url))
    request = TextRequest(request_id=request_id, max_tokens=4, sampling=SamplingRequest())
    return asyncio.run(media.generate(request, f"Look: {PAD_TOKEN} now", parts))


def test_tensors_go_to_the_socket_without_copies() -> None:
    client = _Client()
    media = _facade(client)
    _generation(media, _jpeg(64, 64), "warm-up").source(0).start()  # one-off tokenizer tables
    client.frames.clear()
    generation = _generation(media, _jpeg(), "r")
    [prompt] = generation.prompts
    [feature] = prompt.mm_features
    pixels = feature.data["pixel_values"].data.data  # the processor's own array
    assert pixels.nbytes > 8_000_000
    alive = weakref.ref(pixels)
    del feature, pixels

    gc.collect()
    tracemalloc.start()
    source = generation.source(0)
    source.start()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 1_000_000, peak  # encoding and sending copied nothing large

    [frames] = client.frames
    [sent] = [f for f in frames if isinstance(f, memoryview) and f.nbytes > 8_000_000]
    assert np.shares_memory(np.frombuffer(sent, np.uint8), alive())
    assert prompt.mm_features is None
    del sent, frames
    client.frames.clear()
    gc.collect()
    assert alive() is None, gc.get_referrers(alive())  # the frames held the last reference

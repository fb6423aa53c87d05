"""Items the engine's cache holds are not processed again (vLLM's processor skips them too):
their placeholder length comes from the image size, they go as ``data=None``, and should one
leave the mirror before the request is sent, it is processed then and goes with its data."""

from __future__ import annotations

import asyncio
import base64
import io
from typing import Any

import numpy as np
import pytest
from PIL import Image

from tests.support.tiny_model import tiny_model_dir
from vllm_frontend.engine.protocol import EngineCoreRequest
from vllm_frontend.llm import LLM
from vllm_frontend.multimodal.llm import MultimodalLlm
from vllm_frontend.multimodal.media import MediaLoader, MediaPolicy
from vllm_frontend.multimodal.parts import MediaPart
from vllm_frontend.multimodal.processors.qwen2_vl import Qwen2VLImageProcessor
from vllm_frontend.multimodal.qwen2_vl import Qwen2VLFamily
from vllm_frontend.text.llm import TextLlm, TextRequest
from vllm_frontend.text.sampling import ModelSamplingInfo, SamplingRequest
from vllm_frontend.text.tokenizer import Tokenizer

PAD_TOKEN = "<|reserved_special_token_5|>"  # stands in for <|image_pad|>


class _Stream:
    def take(self) -> list[Any]:
        return []

    def on_ready(self, callback: Any) -> None:
        pass


class _Client:
    """Keeps each request's features as they were when sent."""

    def __init__(self) -> None:
        self.sent: list[list[Any]] = []

    def add_request(self, request: EngineCoreRequest) -> _Stream:
        self.sent.append([f.data for f in request.mm_features or []])
        return _Stream()

    def abort_requests(self, ids: Any) -> None:
        pass


def _facade(client: _Client) -> MultimodalLlm:
    tokenizer = Tokenizer.from_dir(tiny_model_dir())
    sampling = ModelSamplingInfo(max_model_len=8192, eos_token_id=tokenizer.eos_token_id)
    text = TextLlm(LLM(client, EngineCoreRequest), tokenizer, 8192, sampling)
    ids = {"<|image_pad|>": tokenizer.token_to_id(PAD_TOKEN), "<|video_pad|>": 1}
    family = Qwen2VLFamily({"model_type": "qwen2_vl"}, {"max_pixels": 128 * 28 * 28}, ids.get, {})
    loader = MediaLoader(MediaPolicy())
    return MultimodalLlm(
        text, family, loader, model_id="m", config={"vision_config": {}}, mirror_engine_cache=True
    )


def _jpeg(width: int, height: int, seed: int) -> str:
    rng = np.random.default_rng(seed)
    image = Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))
    out = io.BytesIO()
    image.save(out, "JPEG", quality=90)
    return "data:image/jpeg;base64," + base64.b64encode(out.getvalue()).decode()


def _generation(media: MultimodalLlm, urls: list[str], request_id: str) -> Any:
    parts = media.new_parts()
    for url in urls:
        parts.add(MediaPart("image", url))
    request = TextRequest(request_id=request_id, max_tokens=4, sampling=SamplingRequest())
    prompt = "Look: " + " and ".join([PAD_TOKEN] * len(urls))
    return asyncio.run(media.generate(request, prompt, parts))


def _pixels(data: Any) -> np.ndarray:
    return np.array(data["pixel_values"].data.data)


@pytest.mark.parametrize("size", [(1024, 768), (97, 431), (56, 56), (300, 200)])
def test_held_item_is_not_processed_again(
    size: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    client = _Client()
    media = _facade(client)
    url = _jpeg(*size, seed=1)
    first = _generation(media, [url], "a")
    [[processed]] = [p.mm_features for p in first.prompts]
    processed_run = (processed.mm_position.offset, processed.mm_position.length)
    first.source(0).start()

    calls: list[Any] = []
    original = Qwen2VLImageProcessor.preprocess
    monkeypatch.setattr(
        Qwen2VLImageProcessor,
        "preprocess",
        lambda self, *a, **k: calls.append(a) or original(self, *a, **k),
    )
    second = _generation(media, [url, _jpeg(64, 64, seed=2)], "b")
    [prompt] = second.prompts
    held, new = prompt.mm_features
    assert len(calls) == 1  # only the new image
    assert held.data is None and new.data is not None
    # the same placeholder run as when it was processed
    assert (held.mm_position.offset, held.mm_position.length) == processed_run
    second.source(0).start()
    assert client.sent[1][0] is None


def test_item_evicted_before_sending_goes_with_its_data() -> None:
    client = _Client()
    media = _facade(client)
    url = _jpeg(300, 200, seed=3)
    first = _generation(media, [url], "a")
    first.source(0).start()
    [[want]] = client.sent
    want_pixels = _pixels(want)

    second = _generation(media, [url], "b")
    [feature] = second.prompts[0].mm_features
    assert feature.data is None  # held when lowered
    assert media.sender_cache is not None
    media.sender_cache.clear()  # e.g. other requests evicted it, or /reset_mm_cache
    second.source(0).start()
    [got] = client.sent[1]
    assert got is not None
    assert np.array_equal(_pixels(got), want_pixels)
    assert feature.mm_hash in media.sender_cache  # and the mirror has it again


def test_closing_the_facade_closes_its_media_session_and_threads() -> None:
    media = _facade(_Client())

    async def run() -> tuple[bool, bool]:
        session = media.loader._http._client()  # made on first fetch
        media.loader._executor()
        await media.aclose()
        return session.closed, media.loader._pool is None

    assert asyncio.run(run()) == (True, True)


def test_held_item_the_request_s_new_image_evicts_goes_with_its_data() -> None:
    # [new, held] with room for one of them: the engine stores the new image first, evicting
    # the held one before it reads it, so the held image must go with its data.
    client = _Client()
    media = _facade(client)
    held_url = _jpeg(300, 200, seed=4)
    first = _generation(media, [held_url], "a")
    first.source(0).start()
    [[want]] = client.sent
    assert media.sender_cache is not None
    [size] = media.sender_cache._entries.values()
    media.sender_cache.capacity = size * 3 // 2

    second = _generation(media, [_jpeg(300, 200, seed=5), held_url], "b")
    new, held = second.prompts[0].mm_features
    assert held.data is None and new.data is not None  # held when lowered
    second.source(0).start()
    sent_new, sent_held = client.sent[1]
    assert sent_new is not None and sent_held is not None
    assert np.array_equal(_pixels(sent_held), _pixels(want))
    assert list(media.sender_cache._entries) == [held.mm_hash]

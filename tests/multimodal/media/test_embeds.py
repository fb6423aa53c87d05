"""Embedding payloads (``.npy``) read without torch."""

from __future__ import annotations

import asyncio
import base64
import io
from typing import Any

import numpy as np
import pytest

from vllm_frontend.multimodal.media import Embeds, MediaError, MediaLoader, MediaPolicy


def npy(array: np.ndarray) -> str:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return base64.b64encode(buffer.getvalue()).decode()


def run(coro_factory: Any) -> Any:
    async def go() -> Any:
        loader = MediaLoader(MediaPolicy())
        try:
            return await coro_factory(loader)
        finally:
            await loader.aclose()

    return asyncio.run(go())


def test_an_npy_payload_comes_back_as_it_was() -> None:
    array = np.arange(24, dtype=np.float16).reshape(2, 3, 4)
    embeds = run(lambda loader: loader.load_embeds(npy(array)))
    assert embeds.dtype == "float16"
    assert np.array_equal(embeds.array, array)


def test_a_mapping_decodes_its_strings_and_keeps_the_rest() -> None:
    array = np.ones((2, 2), np.float32)
    data = {"image_embeds": npy(array), "image_grid_thw": [1, 2, 2]}
    out = run(lambda loader: loader.load_image_embeds(data))
    assert isinstance(out["image_embeds"], Embeds)
    assert np.array_equal(out["image_embeds"].array, array)
    assert out["image_grid_thw"] == [1, 2, 2]


def test_pickled_npy_objects_are_refused() -> None:
    buffer = io.BytesIO()
    np.save(buffer, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    payload = base64.b64encode(buffer.getvalue()).decode()
    with pytest.raises(MediaError) as caught:
        run(lambda loader: loader.load_embeds(payload))
    assert caught.value.status == 400  # numpy's ValueError: allow_pickle=False


def test_bad_base64_is_a_400() -> None:
    with pytest.raises(MediaError) as caught:
        run(lambda loader: loader.load_embeds("**"))
    assert caught.value.status == 400

"""A media request that decodes (logprobs, prompt logprobs, echo) has a let-go ``tokenizers``
object loaded on a worker thread before it is processed, as a text request has (the first
decode would otherwise hold the event loop for the load, 0.2-0.5 s)."""

from __future__ import annotations

import asyncio
import base64
import io
import threading
from typing import Any

import numpy as np
import pytest
from PIL import Image

from tests.support.tiny_model import tiny_model_dir
from tests.support.tokenizer_reloads import record_reloads
from vllm_frontend.engine.protocol import EngineCoreRequest
from vllm_frontend.llm import LLM
from vllm_frontend.multimodal.llm import MultimodalLlm
from vllm_frontend.multimodal.media import MediaLoader, MediaPolicy
from vllm_frontend.multimodal.parts import MediaPart
from vllm_frontend.multimodal.qwen2_vl import Qwen2VLFamily
from vllm_frontend.text.llm import TextLlm, TextRequest
from vllm_frontend.text.sampling import ModelSamplingInfo, SamplingRequest
from vllm_frontend.text.tokenizer import Tokenizer

pytest.importorskip("fastokens")

PAD_TOKEN = "<|reserved_special_token_5|>"  # stands in for <|image_pad|>


def _media(tokenizer: Tokenizer) -> MultimodalLlm:
    sampling = ModelSamplingInfo(max_model_len=8192, eos_token_id=tokenizer.eos_token_id)
    text = TextLlm(LLM(None, EngineCoreRequest), tokenizer, 8192, sampling)  # type: ignore[arg-type]
    ids = {"<|image_pad|>": tokenizer.token_to_id(PAD_TOKEN), "<|video_pad|>": 1}
    family = Qwen2VLFamily({"model_type": "qwen2_vl"}, {"max_pixels": 128 * 28 * 28}, ids.get, {})
    return MultimodalLlm(text, family, MediaLoader(MediaPolicy()), model_id="m", config={})


def _png() -> str:
    image = Image.fromarray(np.zeros((56, 56, 3), dtype=np.uint8))
    out = io.BytesIO()
    image.save(out, "PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


@pytest.mark.parametrize(
    ("fields", "sampling", "expected"),
    [({}, {}, False), ({}, {"logprobs": 1}, True), ({"echo": True}, {}, True)],
)
def test_media_request_that_decodes_loads_it_off_the_loop(
    fields: dict[str, Any], sampling: dict[str, Any], expected: bool
) -> None:
    tokenizer = Tokenizer.from_dir(tiny_model_dir(), use_fastokens=True)
    assert tokenizer.wait_for_fast_encoder(300)
    if tokenizer.holds_backend:
        pytest.skip("fastokens did not take over this tokenizer")
    loaded_on = record_reloads(tokenizer)
    media = _media(tokenizer)
    parts = media.new_parts()
    parts.add(MediaPart("image", _png()))
    request = TextRequest(
        request_id="r", max_tokens=4, sampling=SamplingRequest(**sampling), **fields
    )
    asyncio.run(media.generate(request, f"Look: {PAD_TOKEN}", parts))
    assert tokenizer.holds_backend is expected
    assert all(thread != threading.get_ident() for thread in loaded_on)
    assert bool(loaded_on) is expected

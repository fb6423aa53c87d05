"""``/inference/v1/generate`` with ``content_parts`` on a text-only model: a media part is
refused with the error vLLM 0.32's multimodal registry raises when asked for the model's
processor (a 400); parts of other types are skipped, as vLLM's ``ServingTokens`` skips them,
and the token prompt runs as it is."""

from __future__ import annotations

import asyncio
import json
import pathlib
from typing import Any

import pytest

from tests.server.test_generate_scores import ScoringClient
from tests.support.generation_app import generation_context
from tests.support.responses import body as body_of
from vllm_frontend.server import errors
from vllm_frontend.server.generate import GenerateHandler
from vllm_frontend.server.transport import Request

pytestmark = pytest.mark.oracle


def _call(handler: GenerateHandler, body: dict[str, Any]) -> Any:
    async def run() -> Any:
        headers = {b"content-type": b"application/json"}
        request = Request("POST", "/inference/v1/generate", b"", headers, json.dumps(body).encode())
        return json.loads(await body_of(await handler(request)))

    return asyncio.run(run())


def test_media_parts_on_a_text_model_are_vllms_400(tiny_model: pathlib.Path) -> None:
    from vllm.multimodal import MULTIMODAL_REGISTRY

    client = ScoringClient()
    ctx = generation_context(tiny_model, client, max_model_len=64)
    handler = GenerateHandler(ctx)
    name = ctx.served_model_names[0]
    config = type("ModelConfig", (), {"is_multimodal_model": False, "served_model_name": name})
    with pytest.raises(ValueError) as theirs:
        MULTIMODAL_REGISTRY.create_processor(config())  # type: ignore[arg-type]
    body = {
        "token_ids": [1, 5, 6],
        "sampling_params": {"max_tokens": 2},
        "content_parts": [{"type": "image_url", "url": "data:image/png;base64,AAAA"}],
    }
    with pytest.raises(errors.BadRequest) as ours:
        _call(handler, body)
    assert ours.value.message == str(theirs.value)
    assert client.added == []
    body["content_parts"] = [{"type": "text", "text": "skipped"}]
    answer = _call(handler, body)
    assert answer["choices"][0]["token_ids"] == [11, 12]
    assert client.added[0].prompt_token_ids == [1, 5, 6]

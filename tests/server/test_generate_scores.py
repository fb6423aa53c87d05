"""``/inference/v1/generate`` with ``prompt_logprob_token_ids`` on an engine that scores them
(vLLM's V2 model runner): the rows go to the engine as vLLM's ``SamplingParams`` holds them,
and the engine's scores come back as ``prompt_token_id_logprobs``, vLLM's ``numpy2base64`` of
them; a stream is refused as vLLM refuses it. A scripted engine plays the V2 runner, which puts
the scores on a request's first output (with its prefill stats)."""

from __future__ import annotations

import asyncio
import json
import pathlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import msgspec
import numpy as np
import pytest

from tests.support.generation_app import generation_context
from tests.support.responses import body as body_of
from vllm_frontend.engine.protocol import (
    EngineCoreOutput,
    EngineCoreRequest,
    FinishReason,
    PrefillStats,
)
from vllm_frontend.engine.tensors import Tensor
from vllm_frontend.server import errors
from vllm_frontend.server.generate import GenerateHandler
from vllm_frontend.server.transport import Request

pytestmark = pytest.mark.oracle

PROMPT = [1, 5, 6, 7]
ROWS = [[5, 9], [6], [7, 8]]
SCORES = np.array([[-0.5, -2.25], [-1.0, -np.inf], [-0.125, -3.0]], dtype=np.float32)


class ScoringClient:
    """Two tokens per request; the first output carries the prefill stats and, when the
    request has rows to score, the scores."""

    def __init__(self) -> None:
        self.added: list[EngineCoreRequest] = []

    async def _outputs(self) -> AsyncIterator[Any]:
        await asyncio.sleep(0)
        scored = self.added[-1].sampling_params.prompt_logprob_token_ids is not None
        yield EngineCoreOutput(
            self.added[-1].request_id,
            [11],
            prompt_token_id_logprobs=Tensor.from_numpy(SCORES) if scored else None,
            prefill_stats=PrefillStats(num_cached_tokens=0),
        )
        await asyncio.sleep(0)
        yield EngineCoreOutput(self.added[-1].request_id, [12], finish_reason=FinishReason.LENGTH)

    def add_request(self, request: EngineCoreRequest) -> Any:
        self.added.append(request)
        return self._outputs()

    def abort_requests(self, request_ids: Sequence[str]) -> int:
        return len(request_ids)


def _handler(model: pathlib.Path) -> tuple[GenerateHandler, ScoringClient]:
    client = ScoringClient()
    ctx = generation_context(model, client, max_model_len=64)
    ctx.text.sampling = msgspec.structs.replace(ctx.text.sampling, v2_model_runner=True)
    return GenerateHandler(ctx), client


def _call(handler: GenerateHandler, body: dict[str, Any]) -> Any:
    async def run() -> Any:
        headers = {b"content-type": b"application/json"}
        request = Request("POST", "/inference/v1/generate", b"", headers, json.dumps(body).encode())
        response = await handler(request)
        return json.loads(await body_of(response))

    return asyncio.run(run())


BODY = {"token_ids": PROMPT, "sampling_params": {"max_tokens": 2, "prompt_logprob_token_ids": ROWS}}


def test_the_scores_come_back_as_vllms_npy_base64(tiny_model: pathlib.Path) -> None:
    from vllm.sampling_params import SamplingParams
    from vllm.utils.serial_utils import numpy2base64

    handler, client = _handler(tiny_model)
    answer = _call(handler, BODY)
    assert answer["prompt_token_id_logprobs"] == numpy2base64(SCORES)
    assert answer["choices"][0]["token_ids"] == [11, 12]

    ref = SamplingParams(max_tokens=2, prompt_logprob_token_ids=ROWS)
    model_config = type("M", (), {"max_logprobs": 20, "max_model_len": 64})()
    model_config.get_vocab_size = lambda: 128256  # type: ignore[attr-defined]
    ref._validate_logprobs(model_config)  # converts the rows to vLLM's array
    sent = client.added[0].sampling_params
    array = sent.prompt_logprob_token_ids.numpy()
    assert array.dtype == ref.prompt_logprob_token_ids.dtype
    assert np.array_equal(array, ref.prompt_logprob_token_ids)
    assert sent.skip_reading_prefix_cache is ref.skip_reading_prefix_cache is True


def test_without_rows_there_are_no_scores(tiny_model: pathlib.Path) -> None:
    handler, client = _handler(tiny_model)
    answer = _call(handler, {"token_ids": PROMPT, "sampling_params": {"max_tokens": 2}})
    assert answer["prompt_token_id_logprobs"] is None
    assert client.added[0].sampling_params.prompt_logprob_token_ids is None


def test_a_stream_cannot_carry_the_scores(tiny_model: pathlib.Path) -> None:
    handler, client = _handler(tiny_model)
    with pytest.raises(errors.ApiError) as caught:
        _call(handler, {**BODY, "stream": True})
    status, _, message, _ = errors.classify(caught.value)
    # ServingTokens.serve_tokens' refusal, before anything reaches the engine
    assert status == 400
    assert message == "prompt_logprob_token_ids are not available when stream=true."
    assert not client.added

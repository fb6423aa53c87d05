"""A stream that falls behind the engine: the outputs of several engine steps found queued at
once become one update, as vLLM's frontend merges what a slow consumer has not collected yet.

The client sees fewer chunks, never different content: the same text, token ids, logprobs,
stop-string trimming, finish reason and usage as when every engine output is its own update.
A scripted engine client delivers the same outputs both ways (a real engine's step timing
cannot be controlled).
"""

from __future__ import annotations

import asyncio
import json
import pathlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import numpy as np
import pytest

from tests.support.generation_app import generation_app
from tests.support.responses import body as body_of
from tests.support.shared_tokenizer import shared_tokenizer
from vllm_frontend.engine.protocol import (
    EngineCoreOutput,
    EngineCoreRequest,
    FinishReason,
    LogprobsLists,
    LogprobsTensors,
)
from vllm_frontend.server.app import App
from vllm_frontend.server.transport import PushedStreamingResponse, Request
from vllm_frontend.text.tokenizer import Tokenizer

TEXT = " The quick brown fox jumps over the lazy dog. It was 2 o'clock; café time!"


class _Batches:
    """An engine stream that hands over all its outputs in one batch."""

    def __init__(self, outputs: list[EngineCoreOutput]) -> None:
        self._outputs = outputs
        self.engine_index = 0

    async def next_batch(self) -> list[EngineCoreOutput]:
        batch, self._outputs = self._outputs, []
        return batch

    async def aclose(self) -> None:
        pass


class ScriptedClient:
    """Generates ``TEXT``'s tokens with logprobs, one per output, one by one or all at once."""

    def __init__(self, tokenizer: Tokenizer, batched: bool) -> None:
        self.ids = tokenizer.encode(TEXT, add_special_tokens=False)
        self.batched = batched
        self.aborted: list[str] = []

    def _outputs(self, req: EngineCoreRequest) -> list[EngineCoreOutput]:
        outs = []
        rng = np.random.default_rng(len(req.request_id))
        limit = min(len(self.ids), req.sampling_params.max_tokens or len(self.ids))
        for i in range(limit):
            tok = self.ids[i]
            alternatives = [tok, (tok + 1) % 1000, (tok + 2) % 1000]
            logprobs = LogprobsLists(
                np.array([alternatives], dtype=np.int32),
                np.sort(rng.uniform(-5, 0, size=(1, 3)).astype(np.float32))[:, ::-1].copy(),
                np.array([1], dtype=np.int32),
            )
            finish = FinishReason.LENGTH if i == limit - 1 else None
            outs.append(EngineCoreOutput(req.request_id, [tok], new_logprobs=logprobs,
                                         finish_reason=finish))  # fmt: skip
        k = req.sampling_params.prompt_logprobs
        if k is not None:  # echo with logprobs: the prompt's rows come with the first output
            prompt = req.prompt_token_ids[1:]
            outs[0].new_prompt_logprobs_tensors = LogprobsTensors(
                np.array([[t] + [(t + j) % 1000 for j in range(1, k + 1)] for t in prompt]),
                -np.arange(1, len(prompt) * (k + 1) + 1, dtype=np.float32).reshape(-1, k + 1),
                np.ones(len(prompt), dtype=np.int32),
            )
        return outs

    async def _one_by_one(self, outputs: list[EngineCoreOutput]) -> AsyncIterator[EngineCoreOutput]:
        for out in outputs:
            yield out
            await asyncio.sleep(0)

    def add_request(self, request: Any) -> Any:
        outputs = self._outputs(request)
        return _Batches(outputs) if self.batched else self._one_by_one(outputs)

    def abort_requests(self, request_ids: Sequence[str]) -> int:
        self.aborted.extend(request_ids)
        return len(request_ids)


def _app(
    model: pathlib.Path, batched: bool, stream_interval: int = 1, keep_alive: float = 0.0
) -> App:
    tokenizer = shared_tokenizer(model)
    return generation_app(
        model,
        ScriptedClient(tokenizer, batched),
        max_model_len=128,
        tokenizer=tokenizer,
        stream_interval=stream_interval,
        sse_keep_alive_interval=keep_alive,
    )


async def _events(app: App, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    request = Request("POST", path, b"", {b"content-type": b"application/json"},
                      json.dumps(body).encode())  # fmt: skip
    response = await app(request)
    assert isinstance(response, PushedStreamingResponse), getattr(response, "body", response)
    raw = (await body_of(response)).decode()
    events = [line[6:] for line in raw.split("\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def _content(events: list[dict[str, Any]]) -> dict[str, Any]:
    text, ids, finish, usage = "", [], None, None
    tokens: list[Any] = []
    for event in events:
        assert "error" not in event, event
        usage = event.get("usage") or usage
        for choice in event["choices"]:
            delta = choice.get("delta")
            text += (delta or {}).get("content") or choice.get("text") or ""
            ids += choice.get("token_ids") or []
            lp = choice.get("logprobs")
            if lp and "content" in lp:
                tokens += [(t["token"], t["logprob"], t["top_logprobs"]) for t in lp["content"]]
            elif lp:
                tokens += list(zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"],
                                   strict=True))  # fmt: skip
            finish = choice.get("finish_reason") or finish
    return {"text": text, "ids": ids, "logprobs": tokens, "finish": finish, "usage": usage}


BODIES = [
    ("/v1/completions", {"prompt": "hi", "max_tokens": 40, "logprobs": 2,
                         "return_token_ids": True}),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 40, "stop": ["lazy"], "logprobs": 1}),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 40, "echo": True, "logprobs": 0}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 40,
                              "logprobs": True, "top_logprobs": 2}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 9,
                              "stop": "o'clock"}),
]  # fmt: skip


@pytest.mark.parametrize("path,body", BODIES)
def test_merged_engine_steps_change_chunking_not_content(
    tiny_model: pathlib.Path, path: str, body: dict[str, Any]
) -> None:
    body = {**body, "model": "m", "stream": True, "stream_options": {"include_usage": True}}
    one_by_one = asyncio.run(_events(_app(tiny_model, batched=False), path, body))
    merged = asyncio.run(_events(_app(tiny_model, batched=True), path, body))
    assert _content(merged) == _content(one_by_one)
    assert _content(merged)["text"]
    assert len(merged) < len(one_by_one)


@pytest.mark.parametrize("path,body", [BODIES[0], BODIES[3]])
def test_server_stream_interval_streams_like_the_same_request_interval(
    tiny_model: pathlib.Path, path: str, body: dict[str, Any]
) -> None:
    """--stream-interval N chunks a stream as a request's own ``stream_interval`` N does (vLLM
    takes the larger of the two; the request-level behaviour is checked against vLLM's output
    processor in tests/text)."""
    body = {**body, "model": "m", "stream": True}
    server_level = asyncio.run(_events(_app(tiny_model, False, stream_interval=4), path, body))
    request_level = asyncio.run(
        _events(_app(tiny_model, False), path, {**body, "stream_interval": 4})
    )
    every_token = asyncio.run(_events(_app(tiny_model, False), path, body))

    def chunks(events: list[dict[str, Any]]) -> list[Any]:
        return [(e["choices"], e.get("usage")) for e in events]

    assert chunks(server_level) == chunks(request_level)
    assert _content(server_level) == _content(every_token)
    assert len(server_level) < len(every_token)


@pytest.mark.parametrize("path,body", [BODIES[0], BODIES[3]])
def test_sse_keep_alive_interval_reaches_both_streaming_routes(
    tiny_model: pathlib.Path, path: str, body: dict[str, Any]
) -> None:
    """The HTTP layer sends the comments (tests/server/test_http.py); the handlers must ask."""

    async def main() -> float:
        request = Request("POST", path, b"", {b"content-type": b"application/json"},
                          json.dumps({**body, "model": "m", "stream": True}).encode())  # fmt: skip
        response = await _app(tiny_model, False, keep_alive=7.5)(request)
        assert isinstance(response, PushedStreamingResponse)
        await body_of(response)
        return response.keep_alive_interval

    assert asyncio.run(main()) == 7.5

"""The render routes of the full server (``--enable-scale-out`` on both sides) answer as vLLM's:
the ``GenerateRequest`` of a chat, completion, Messages or Responses request against the engines'
context length, and the errors; and a disaggregated round trip (render, generate the rendered
request's token ids, derender the answer, whole and chunk by chunk) ends in the same chat
completion on both servers."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Frontends

pytestmark = pytest.mark.engine

HEADERS = {"X-Request-Id": "render-e2e"}

CASES: list[tuple[str, dict[str, Any]]] = [
    ("/v1/chat/completions/render", {"messages": [{"role": "user", "content": "Hi there"}]}),
    (
        "/v1/chat/completions/render",
        {
            "messages": [{"role": "user", "content": "Hi"}],
            "stream": True,
            "n": 2,
            "seed": 1,
            "max_completion_tokens": 9,
            "temperature": 0,
            "stop_token_ids": [7],
            "logprobs": True,
            "top_logprobs": 3,
        },
    ),
    ("/v1/completions/render", {"prompt": ["Hello", [1, 2, 3]], "max_tokens": 4, "echo": True}),
    ("/v1/completions/render", {"prompt": "The capital of France is", "logprobs": 50}),
    # errors
    ("/v1/chat/completions/render", {"messages": [{"role": "user", "content": "x " * 400}]}),
    ("/v1/completions/render", {"prompt": "Hi", "max_tokens": 1000}),
    ("/v1/completions/render", {"prompt": "Hi", "model": "nope"}),
    ("/v1/chat/completions/render", {"messages": [], "use_beam_search": True}),
    ("/v1/messages/render", {"max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}]}),
    ("/v1/messages/render", {"max_tokens": 5000, "messages": [{"role": "user", "content": "Hi"}]}),
    ("/v1/responses/render", {"input": "Hi", "request_id": "resp-e2e", "max_output_tokens": 3}),
]


@pytest.mark.parametrize(("path", "body"), CASES)
def test_render_is_vllms(frontends: Frontends, path: str, body: dict[str, Any]) -> None:
    body = {"model": frontends.model, **body}
    ours = httpx.post(frontends.ours + path, json=body, headers=HEADERS, timeout=60)
    ref = httpx.post(frontends.vllm + path, json=body, headers=HEADERS, timeout=60)
    assert (ours.status_code, ours.json()) == (ref.status_code, ref.json())


def _round_trip(url: str, model: str) -> tuple[Any, list[Any]]:
    """Render a chat request, run it through generate, derender the answer (whole, and its
    stream one chunk per call, carrying the stream state)."""
    chat = {"model": model, "messages": [{"role": "user", "content": "Tell me a story"}],
            "max_tokens": 12, "temperature": 0, "logprobs": True, "top_logprobs": 2}  # fmt: skip
    with httpx.Client(base_url=url, timeout=120, headers=HEADERS) as client:
        rendered = client.post("/v1/chat/completions/render", json=chat).json()
        full = client.post("/inference/v1/generate", json=rendered).json()
        derendered = client.post(
            "/v1/chat/completions/derender",
            json={"generate_response": full, "prompt_token_ids": rendered["token_ids"],
                  "prompt_tokens": len(rendered["token_ids"]), "chat_request": chat},
        ).json()  # fmt: skip
        streamed = client.post("/inference/v1/generate", json=rendered | {"stream": True})
        state = None
        chunks = []
        for block in streamed.text.split("\n\n"):
            if not block or block == "data: [DONE]":
                continue
            body = {"stream": True, "generate_chunk": json.loads(block[6:]),
                    "stream_state": state, "prompt_token_ids": rendered["token_ids"],
                    "chat_request": chat}  # fmt: skip
            reply = client.post("/v1/chat/completions/derender", json=body).json()
            state = reply["stream_state"]
            chunks.append(reply["chunk"]["choices"])
    derendered.pop("created")
    return derendered, chunks


def test_render_generate_derender_round_trip_is_vllms(frontends: Frontends) -> None:
    ours = _round_trip(frontends.ours, frontends.model)
    ref = _round_trip(frontends.vllm, frontends.model)
    assert ours[0] == ref[0]
    assert ours[0]["choices"][0]["message"]["content"]

    # streamed: the same deltas in order (chunking by engine steps may differ: compare joined)
    def joined(chunks: list[Any]) -> tuple[str, list[Any], Any]:
        choices = [c for cs in chunks for c in cs]
        text = "".join(c["delta"].get("content") or "" for c in choices)
        logprobs = [e for c in choices if c["logprobs"] for e in c["logprobs"]["content"]]
        return text, logprobs, choices[-1]["finish_reason"]

    assert joined(ours[1]) == joined(ref[1])
    assert joined(ours[1])[0] == ours[0]["choices"][0]["message"]["content"]

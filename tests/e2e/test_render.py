"""The render routes of the full server (``--enable-scale-out`` on both sides) answer as vLLM's:
the ``GenerateRequest`` of a chat or completion request against the engines' context length,
and the errors."""

from __future__ import annotations

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
]


@pytest.mark.parametrize(("path", "body"), CASES)
def test_render_is_vllms(frontends: Frontends, path: str, body: dict[str, Any]) -> None:
    body = {"model": frontends.model, **body}
    ours = httpx.post(frontends.ours + path, json=body, headers=HEADERS, timeout=60)
    ref = httpx.post(frontends.vllm + path, json=body, headers=HEADERS, timeout=60)
    assert (ours.status_code, ours.json()) == (ref.status_code, ref.json())

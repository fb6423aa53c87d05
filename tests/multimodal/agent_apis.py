"""Images through the agent APIs, ours against vLLM's on the real engine: the same Responses
request (official ``openai`` SDK) or Anthropic Messages request (official ``anthropic`` SDK)
sent to both servers, and what a user of each SDK reads back, streamed and not."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx


def model_name(url: str) -> str:
    """The one model a server serves."""
    [model] = httpx.get(url + "/v1/models", timeout=30).json()["data"]
    return str(model["id"])


def responses_answer(url: str, request_input: list[Any], stream: bool) -> dict[str, Any]:
    """A greedy Responses answer read through ``client.responses.create``: its output text
    (from the deltas too when streamed), status and usage."""
    from openai import OpenAI

    client = OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=300)
    args: dict[str, Any] = {
        "model": model_name(url),
        "input": request_input,
        "max_output_tokens": 16,
        "temperature": 0,
    }
    if not stream:
        response = client.responses.create(**args)
        return _response_fields(response)
    deltas = ""
    completed = None
    for event in client.responses.create(**args, stream=True):
        if event.type == "response.output_text.delta":
            deltas += event.delta
        elif event.type == "response.completed":
            completed = event.response
    assert completed is not None
    out = _response_fields(completed)
    assert deltas == out["text"]
    return out


def _response_fields(response: Any) -> dict[str, Any]:
    usage = response.usage
    return {
        "text": response.output_text,
        "status": response.status,
        "usage": (usage.input_tokens, usage.output_tokens) if usage else None,
    }


def messages_answer(url: str, content: list[Any], stream: bool) -> dict[str, Any]:
    """A greedy Anthropic Messages answer read through ``client.messages``: its text blocks,
    stop reason and usage."""
    from anthropic import Anthropic

    client = Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=300)
    args: dict[str, Any] = {
        "model": model_name(url),
        "max_tokens": 16,
        "messages": [{"role": "user", "content": content}],
        "extra_body": {"temperature": 0},  # this SDK version no longer takes it as an argument
    }
    if not stream:
        message = client.messages.create(**args)
    else:
        with client.messages.stream(**args) as events:
            streamed = "".join(events.text_stream)
            message = events.get_final_message()
        assert streamed == "".join(b.text for b in message.content if b.type == "text")
    return {
        "text": [b.text for b in message.content if b.type == "text"],
        "stop_reason": message.stop_reason,
        "usage": (message.usage.input_tokens, message.usage.output_tokens),
    }


def assert_same_responses(urls: Mapping[str, str], request_input: list[Any]) -> None:
    """Ours and vLLM's answer the Responses ``input`` alike, streamed and not."""
    for stream in (False, True):
        answers = {name: responses_answer(url, request_input, stream) for name, url in urls.items()}
        assert answers["ours"] == answers["vllm"], stream
        assert answers["ours"]["usage"][0] > 30  # the image's placeholders are in the prompt


def assert_same_messages(urls: Mapping[str, str], content: list[Any]) -> None:
    """Ours and vLLM's answer the Anthropic user ``content`` alike, streamed and not."""
    for stream in (False, True):
        answers = {name: messages_answer(url, content, stream) for name, url in urls.items()}
        assert answers["ours"] == answers["vllm"], stream
        assert answers["ours"]["usage"][0] > 30

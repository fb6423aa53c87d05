"""A streamed chat with a tool parser, served in front of the mock engine replaying a scripted
output (``mock-engine --script-tokens``): the chunks of the content before the calls are the
ones vLLM 0.32's chat stream writes for them (its ``ChatCompletionStreamResponse`` as
``model_dump_json(exclude_unset=True)``), and the calls arrive parsed."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from tests.support.mock_serve import mock_serve

pytestmark = pytest.mark.oracle

CONTENT = 'Let me check that for you, café "quoted" \\ and more.\n'
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


def _vllm_content_chunk(chunk: dict[str, Any], content: str) -> dict[str, Any]:
    from vllm.entrypoints.generate.base.protocol import DeltaMessage
    from vllm.entrypoints.openai.chat_completion.protocol import (
        ChatCompletionResponseStreamChoice,
        ChatCompletionStreamResponse,
    )

    # As vLLM's chat_completion_stream_generator writes a running choice's delta.
    choice = ChatCompletionResponseStreamChoice(
        index=0, delta=DeltaMessage(content=content), logprobs=None, finish_reason=None,
        token_ids=None,
    )  # fmt: skip
    theirs = ChatCompletionStreamResponse(
        id=chunk["id"], object="chat.completion.chunk", created=chunk["created"],
        choices=[choice], model=chunk["model"],
    )  # fmt: skip
    out: dict[str, Any] = json.loads(theirs.model_dump_json(exclude_unset=True))
    return out


def test_content_before_a_call_streams_as_vllms_chunks(
    tiny_model: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tiny_model / "tokenizer.json"))
    ids = tok.encode(CONTENT + CALL, add_special_tokens=False).ids
    eos = tok.token_to_id("<|eot_id|>")
    script = tmp_path / "script.json"
    script.write_text(json.dumps([*ids, eos]))
    engine = ["--script-tokens", str(script), "--vocab-size", "128256", "--max-model-len", "4096"]
    serve_args = ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
    with mock_serve(tiny_model, tmp_path / "serve.log", serve_args=serve_args,
                    engine_args=engine) as serve:  # fmt: skip
        body = {
            "model": str(tiny_model),
            "messages": [{"role": "user", "content": "Weather in Paris?"}],
            "tools": TOOLS,
            "stream": True,
            "max_tokens": 200,
        }
        status, raw = serve.request("POST", "/v1/chat/completions", json.dumps(body))
    assert status == 200, raw
    chunks = [
        json.loads(line[6:]) for line in raw.decode().split("\n\n") if line.startswith("data: {")
    ]
    content = ""
    calls: list[dict[str, Any]] = []
    for chunk in chunks[1:]:  # after the role chunk
        delta = chunk["choices"][0]["delta"]
        if delta.get("tool_calls"):
            calls.extend(delta["tool_calls"])
        elif delta.get("content") and chunk["choices"][0]["finish_reason"] is None:
            assert chunk == _vllm_content_chunk(chunk, delta["content"])
            content += delta["content"]
    assert content == CONTENT
    assert calls[0]["function"]["name"] == "get_weather"
    args = "".join(c["function"].get("arguments") or "" for c in calls)
    assert json.loads(args) == {"city": "Paris"}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_granite_reasoning_chunks_write_content_null_like_vllm(
    tiny_model: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """vLLM's granite reasoning parser returns ``DeltaMessage(reasoning=..., content=None)``
    (and ``reasoning=None`` beside content), and its stream dumps with ``exclude_unset``: every
    running chunk writes both keys, one of them null. Per-update parity with vLLM's parser is
    pinned in tests/chat/test_reasoning_families.py; this pins the chunk bytes."""
    from tokenizers import Tokenizer
    from vllm.entrypoints.generate.base.protocol import DeltaMessage

    text = "Here is my thought process: hmm, weather. Here is my response: Sure."
    tok = Tokenizer.from_file(str(tiny_model / "tokenizer.json"))
    ids = tok.encode(text, add_special_tokens=False).ids
    script = tmp_path / "script.json"
    script.write_text(json.dumps([*ids, tok.token_to_id("<|eot_id|>")]))
    engine = ["--script-tokens", str(script), "--vocab-size", "128256", "--max-model-len", "4096"]
    with mock_serve(tiny_model, tmp_path / "serve.log", serve_args=["--reasoning-parser",
                    "granite"], engine_args=engine) as serve:  # fmt: skip
        body = {
            "model": str(tiny_model),
            "messages": [{"role": "user", "content": "Weather?"}],
            "stream": True,
            "max_tokens": 200,
        }
        status, raw = serve.request("POST", "/v1/chat/completions", json.dumps(body))
    assert status == 200, raw
    deltas = [
        (json.loads(line[6:])["choices"] or [{}])[0].get("delta")
        for line in raw.decode().split("\n\n")
        if line.startswith("data: {")
    ]
    running = [d for d in deltas[1:] if d and ("content" in d or "reasoning" in d)]
    reasoning = "".join(d.get("reasoning") or "" for d in running)
    content = "".join(d.get("content") or "" for d in running)
    assert (reasoning.strip(), content.strip()) == ("hmm, weather.", "Sure.")
    for delta in running:
        theirs = DeltaMessage(reasoning=delta.get("reasoning"), content=delta.get("content"))
        assert delta == json.loads(theirs.model_dump_json(exclude_unset=True))
        assert list(delta) == ["content", "reasoning"]

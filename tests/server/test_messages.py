"""The Messages routes over a scripted engine (fast; vLLM's own code is the reference in
test_messages_match_vllm.py and test_messages_engine.py): Anthropic's response and event
shapes, stop reasons, token counts agreeing with the chat route, errors in Anthropic's shape,
image blocks going the way the chat route's image parts go, and the template probes."""

from __future__ import annotations

import asyncio
import functools
import json
import pathlib
from typing import Any

import pytest

from tests.server.messages_support import ScriptedClient, messages_app, post, sse_events
from vllm_frontend.chat import ChatRenderer, ModelChatTemplates
from vllm_frontend.chat.llm import ChatLlm
from vllm_frontend.engine.protocol import EngineCoreOutput, FinishReason
from vllm_frontend.server.messages import (
    _rejects_inline_system,
    needs_system_first,
    probe_disabled_thinking_effort,
)
from vllm_frontend.text.tokenizer import Tokenizer

TEXT = "The weather in Paris is sunny today, ünïcödé ✓."
USER = [{"role": "user", "content": "Weather?"}]


@functools.cache
def _tokenizer(model: pathlib.Path) -> Tokenizer:
    return Tokenizer.from_dir(model, start_fast_encoder=False)


def _app(model: pathlib.Path, text: str = TEXT, client: Any = None) -> Any:
    tokenizer = _tokenizer(model)
    return messages_app(model, client or ScriptedClient(tokenizer, text), tokenizer=tokenizer)


def _run(app: Any, path: str, body: Any) -> tuple[int, bytes]:
    return asyncio.run(post(app, path, body))


def _body(**kw: Any) -> dict[str, Any]:
    return {"model": "m", "messages": USER, "max_tokens": 64, **kw}


def test_full_response_has_anthropics_shape(tiny_model: pathlib.Path) -> None:
    status, raw = _run(_app(tiny_model), "/v1/messages", _body())
    assert status == 200
    body = json.loads(raw)
    assert list(body) == ["id", "type", "role", "content", "model", "stop_reason", "usage"]
    assert body["id"].startswith("chatcmpl-")
    assert (body["type"], body["role"], body["model"]) == ("message", "assistant", "m")
    assert body["content"] == [{"type": "text", "text": TEXT}]
    assert body["stop_reason"] == "end_turn"
    output_tokens = len(_tokenizer(tiny_model).encode(TEXT, add_special_tokens=False)) + 1
    assert body["usage"]["output_tokens"] == output_tokens  # the text and EOS


def test_max_tokens_and_stop_sequences_set_the_stop_reason(tiny_model: pathlib.Path) -> None:
    app = _app(tiny_model)
    body = json.loads(_run(app, "/v1/messages", _body(max_tokens=3))[1])
    assert (body["stop_reason"], body["usage"]["output_tokens"]) == ("max_tokens", 3)
    assert "stop_sequence" not in body  # null fields are left out
    body = json.loads(_run(app, "/v1/messages", _body(stop_sequences=["zzz", "sunny"]))[1])
    assert (body["stop_reason"], body["stop_sequence"]) == ("stop_sequence", "sunny")
    assert body["content"] == [{"type": "text", "text": "The weather in Paris is "}]


def test_an_empty_answer_is_one_empty_text_block(tiny_model: pathlib.Path) -> None:
    body = json.loads(_run(_app(tiny_model, ""), "/v1/messages", _body())[1])
    assert body["content"] == [{"type": "text", "text": ""}]


def test_stream_events_come_in_anthropics_order_and_shape(tiny_model: pathlib.Path) -> None:
    status, raw = _run(_app(tiny_model), "/v1/messages", _body(stream=True))
    assert status == 200
    events = sse_events(raw)
    names = [name for name, _ in events]
    assert names[:2] == ["message_start", "content_block_start"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(names[2:-3]) == {"content_block_delta"}
    assert all(data["type"] == name for name, data in events)
    start = events[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    assert start["usage"]["output_tokens"] == 0
    assert events[1][1] == {
        "type": "content_block_start",
        "content_block": {"type": "text", "text": ""},
        "index": 0,
    }
    text = "".join(data["delta"]["text"] for name, data in events if name == "content_block_delta")
    assert text == TEXT
    delta = events[-2][1]
    assert delta["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert delta["usage"]["input_tokens"] == start["usage"]["input_tokens"]
    assert events[-1][1] == {"type": "message_stop"}
    assert raw.endswith(b'event: message_stop\ndata: {"type":"message_stop"}\n\n')


def test_count_tokens_is_the_chat_routes_prompt_length(tiny_model: pathlib.Path) -> None:
    app = _app(tiny_model)
    system = "Be brief."
    status, raw = _run(
        app, "/v1/messages/count_tokens", {"model": "m", "messages": USER, "system": system}
    )
    assert status == 200
    body = json.loads(raw)
    chat = {"model": "m", "messages": [{"role": "system", "content": system}, *USER]}
    prompt_tokens = json.loads(_run(app, "/v1/chat/completions", chat)[1])["usage"]["prompt_tokens"]
    assert body == {
        "input_tokens": prompt_tokens,
        "context_management": {"original_input_tokens": prompt_tokens},
    }


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
def test_handler_errors_have_anthropics_shape(tiny_model: pathlib.Path, path: str) -> None:
    app = _app(tiny_model)
    status, raw = _run(app, path, _body(model="other"))
    assert status == 404
    assert json.loads(raw) == {
        "type": "error",
        "error": {
            "type": "NotFoundError",
            "message": "The model `other` does not exist. Valid aliases: m.",
        },
    }
    status, raw = _run(app, path, _body(tools=[], tool_choice={"type": "auto"}))
    assert status == 400
    body = json.loads(raw)
    assert body["type"] == "error" and body["error"]["type"] == "BadRequestError"
    assert "--enable-auto-tool-choice" in body["error"]["message"]


def test_a_cache_salt_the_chat_request_refuses_is_refused(tiny_model: pathlib.Path) -> None:
    status, raw = _run(_app(tiny_model), "/v1/messages", _body(cache_salt="a/b"))
    assert status == 400
    message = json.loads(raw)["error"]["message"]
    assert message.startswith("Parameter 'cache_salt' must be at most 128 characters")


def test_body_errors_keep_vllms_openai_shape(tiny_model: pathlib.Path) -> None:
    status, raw = _run(_app(tiny_model), "/v1/messages", {"model": "m", "messages": USER})
    assert status == 400
    assert json.loads(raw)["error"]["param"] == "body.max_tokens"


def test_image_blocks_go_where_the_chat_routes_image_parts_go(tiny_model: pathlib.Path) -> None:
    """Image blocks become the chat layer's ``image_url`` parts: whatever it answers for those
    (a text-only model refuses them) is the Messages answer too, in Anthropic's shape."""
    app = _app(tiny_model)
    source = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}
    image = {"type": "image", "source": source}
    messages = [{"role": "user", "content": [{"type": "text", "text": "What is it?"}, image]}]
    status, raw = _run(app, "/v1/messages", _body(messages=messages))
    url = "data:image/png;base64,iVBORw0KGgo="
    parts = [
        {"type": "text", "text": "What is it?"},
        {"type": "image_url", "image_url": {"url": url}},
    ]
    chat_status, chat_raw = _run(
        app,
        "/v1/chat/completions",
        {"model": "m", "messages": [{"role": "user", "content": parts}]},
    )
    assert status == chat_status
    if status != 200:
        chat_error = json.loads(chat_raw)["error"]
        assert json.loads(raw)["error"] == {
            "type": chat_error["type"],
            "message": chat_error["message"],
        }


class _FailingClient(ScriptedClient):
    """Fails every request after its first two tokens."""

    def add_request(self, request: Any) -> Any:
        ids = self.ids[:2]

        async def outputs() -> Any:
            for i, tok in enumerate(ids):
                last = i == len(ids) - 1
                yield EngineCoreOutput(
                    request.request_id, [tok], finish_reason=FinishReason.ERROR if last else None
                )

        return outputs()


def test_engine_failures(tiny_model: pathlib.Path) -> None:
    app = _app(tiny_model, client=_FailingClient(_tokenizer(tiny_model), TEXT))
    status, raw = _run(app, "/v1/messages", _body())
    assert status == 500
    assert json.loads(raw) == {
        "type": "error",
        "error": {"type": "InternalServerError", "message": "Internal server error"},
    }
    status, raw = _run(app, "/v1/messages", _body(stream=True))
    assert status == 200
    events = sse_events(raw)
    assert events[0][0] == "message_start"
    assert events[-1] == (
        "error",
        {"type": "error", "error": {"type": "internal_error", "message": "Internal server error"}},
    )
    assert "message_stop" not in [name for name, _ in events]


def _chat(template: str) -> ChatLlm:
    renderer = ChatRenderer(ModelChatTemplates(tokenizer=template), {})
    return ChatLlm(None, renderer)  # type: ignore[arg-type]


SYSTEM_FIRST = (
    "{% for m in messages %}{% if m.role == 'system' and not loop.first %}"
    "{{ raise_exception('System message must be first') }}{% endif %}{{ m.content }}{% endfor %}"
)
ANY_ORDER = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"


def test_inline_system_messages_are_merged_only_for_system_first_templates() -> None:
    assert _rejects_inline_system(SYSTEM_FIRST)
    assert not _rejects_inline_system(ANY_ORDER)
    assert _rejects_inline_system(None)
    assert needs_system_first(_chat(SYSTEM_FIRST))
    assert not needs_system_first(_chat(ANY_ORDER))


def test_disabled_thinking_asks_for_no_effort_only_where_the_template_tells_them_apart() -> None:
    honours = (
        "{% for m in messages %}{{ m.content }}{% endfor %}"
        "{% if enable_thinking is defined and not enable_thinking %}<no-think>{% endif %}"
        "{{ reasoning_effort }}"
    )
    assert probe_disabled_thinking_effort(_chat(honours)) == "none"
    assert probe_disabled_thinking_effort(_chat(ANY_ORDER)) == "low"
    fails = "{{ raise_exception('no') if reasoning_effort == 'none' else '' }}"
    assert probe_disabled_thinking_effort(_chat(fails)) == "low"

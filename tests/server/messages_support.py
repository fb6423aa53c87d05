"""An App serving the chat and Messages routes over a scripted engine client whose every request
generates a given text, for in-process tests of the Messages mapping (no engine process)."""

from __future__ import annotations

import asyncio
import json
import pathlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

from tests.support.responses import body as body_of
from tests.support.shared_tokenizer import shared_tokenizer
from vllm_frontend.chat import ChatRenderer, ModelChatTemplates, special_tokens_map
from vllm_frontend.chat.output_parser import OutputParsers
from vllm_frontend.engine.protocol import EngineCoreOutput, EngineCoreRequest, FinishReason
from vllm_frontend.llm import LLM
from vllm_frontend.server.app import App, ServerSettings
from vllm_frontend.server.chat import ChatHandler
from vllm_frontend.server.generation import ServingContext
from vllm_frontend.server.messages import MessagesHandler
from vllm_frontend.server.protocol import parse_chat_request
from vllm_frontend.server.transport import Request, Response
from vllm_frontend.text.sampling import ModelSamplingInfo
from vllm_frontend.text.tokenizer import Tokenizer


class ScriptedClient:
    """Answers every request with ``text``'s tokens, one output each, then EOS (a stop), or
    stops at ``max_tokens`` (a length finish); stop strings are the frontend's to find."""

    def __init__(self, tokenizer: Tokenizer, text: str) -> None:
        self.tokenizer = tokenizer
        self.requests: list[EngineCoreRequest] = []
        self.script(text)

    def script(self, text: str) -> None:
        """Answer later requests with ``text``."""
        tokenizer = self.tokenizer
        self.ids = [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]

    def add_request(self, request: EngineCoreRequest) -> Any:
        self.requests.append(request)
        limit = min(len(self.ids), request.sampling_params.max_tokens or len(self.ids))
        finish = FinishReason.LENGTH if limit < len(self.ids) else FinishReason.STOP
        outs = [
            EngineCoreOutput(
                request.request_id, [tok], finish_reason=finish if i == limit - 1 else None
            )
            for i, tok in enumerate(self.ids[:limit])
        ]
        return self._one_by_one(outs)

    async def _one_by_one(self, outputs: list[EngineCoreOutput]) -> AsyncIterator[EngineCoreOutput]:
        for out in outputs:
            yield out
            await asyncio.sleep(0)

    def abort_requests(self, request_ids: Sequence[str]) -> int:
        return len(request_ids)


def messages_app(
    model: pathlib.Path,
    client: Any,
    *,
    tool_call_parser: str | None = None,
    reasoning_parser: str | None = None,
    max_model_len: int = 256,
    tokenizer: Tokenizer | None = None,
    thinking_budget: bool = True,
    **context: Any,
) -> App:
    """``/v1/chat/completions`` and the Messages routes serving model ``"m"`` from ``client``
    (``thinking_budget``: whether vLLM's reasoning config would take a thinking budget)."""
    tokenizer = tokenizer or shared_tokenizer(model)
    cfg = json.loads((model / "tokenizer_config.json").read_text())
    ctx = ServingContext(
        llm=LLM(client, EngineCoreRequest),
        tokenizer=tokenizer,
        served_model_names=["m"],
        max_model_len=max_model_len,
        sampling=ModelSamplingInfo(
            max_model_len=max_model_len,
            eos_token_id=tokenizer.eos_token_id,
            thinking_budget=thinking_budget,
        ),
        chat_renderer=ChatRenderer(
            ModelChatTemplates.from_model_dir(model, cfg), special_tokens_map(cfg)
        ),
        **context,
    )
    parsers = OutputParsers.for_tokenizer(
        tokenizer.token_to_id,
        tool_call_parser=tool_call_parser,
        reasoning_parser=reasoning_parser,
        enable_auto_tool_choice=tool_call_parser is not None,
    )
    chat = ChatHandler(ctx, parse_chat_request, parsers)
    messages = MessagesHandler(ctx, chat.chat)
    app = App(ServerSettings(served_model_names=["m"], max_model_len=max_model_len))
    app.route("POST", "/v1/chat/completions", chat, json_body=True)
    app.route("POST", "/v1/messages", messages.messages, json_body=True)
    app.route("POST", "/v1/messages/count_tokens", messages.count_tokens, json_body=True)
    return app


async def post(app: App, path: str, body: Any) -> tuple[int, bytes]:
    """(status, body bytes) of one JSON POST."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = Request("POST", path, b"", {b"content-type": b"application/json"}, raw)
    response = await app(request)
    data = await body_of(response)
    return response.status, data


def sse_events(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    """``(event name, data)`` of an Anthropic SSE body."""
    out = []
    for block in raw.decode().split("\n\n"):
        if not block:
            continue
        name, data = block.split("\n")
        assert name.startswith("event: ") and data.startswith("data: "), block
        out.append((name[7:], json.loads(data[6:])))
    return out


def plain(response: Response) -> Any:
    """A plain response's JSON."""
    return json.loads(response.body)

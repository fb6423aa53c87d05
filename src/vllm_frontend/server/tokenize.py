"""``POST /tokenize`` and ``/detokenize``, as vLLM 0.32 serves them (serve/tokenize/)."""

from __future__ import annotations

from typing import Any

import msgspec

from vllm_frontend.llm.ids import public_request_id
from vllm_frontend.text.llm import refuse_request_mm_kwargs
from vllm_frontend.text.prompts import encode_prompt

from . import errors
from .app import Handler, ServerSettings
from .message_schema import tool_call_errors, unread_parts_error
from .protocol import TokenizeCompletionRequest, parse_detokenize_request, parse_tokenize_request
from .services import Services, check_model
from .transport import Request, Response, json_response
from .validation import pydantic_report

__all__ = ["tokenize_handlers"]


class _TokenizeResponse(msgspec.Struct):
    count: int
    max_model_len: int | None
    tokens: list[int]
    token_strs: list[str | None] | None


class _DetokenizeResponse(msgspec.Struct):
    prompt: str


def _log_id(request: Request) -> str:
    # vLLM's tokenize serving: "tokenize-" and the X-Request-Id header, else a random id
    return public_request_id("tokenize", request.header(b"x-request-id"), None)


def _lora(services: Services, req: Any) -> Any:
    return services.adapters.get(req.model) if services.adapters is not None else None


def tokenize_handlers(settings: ServerSettings, services: Services) -> tuple[Handler, Handler]:
    """The ``/tokenize`` and ``/detokenize`` handlers."""

    async def tokenize(request: Request) -> Response:
        req = parse_tokenize_request(request.body)
        check_model(
            settings.served_model_names, req.model, services.adapters,
            services.runtime_lora_updating,
        )  # fmt: skip
        tokenizer = services.tokenizer
        if tokenizer is None:
            raise errors.NotImplementedFeature("Tokenization is not available.")
        if isinstance(req, TokenizeCompletionRequest):
            ids = await encode_prompt(tokenizer, req.prompt, req.add_special_tokens)
        else:
            if services.chat_tokenizer is None:
                raise errors.NotImplementedFeature("Chat tokenization is not available.")
            if (report := unread_parts_error(req.messages)) is not None:
                raise errors.BadRequest(report)
            if calls_refused := tool_call_errors(req.messages):
                raise errors.BadRequest(pydantic_report("ValidatorIterator", calls_refused))
            # vLLM's preprocess_chat, before rendering
            refuse_request_mm_kwargs(req.mm_processor_kwargs, req.media_io_kwargs)
            result = services.chat_tokenizer(req)
            ids = result if isinstance(result, list) else await result
        if (log := services.request_log) is not None:
            # as vLLM logs the engine input (for messages its rendered text: not kept here)
            text = req.prompt if isinstance(req, TokenizeCompletionRequest) else None
            log.log_inputs(_log_id(request), text, ids, None, _lora(services, req))
        strs = tokenizer.convert_ids_to_tokens(ids) if req.return_token_strs else None
        return json_response(_TokenizeResponse(len(ids), settings.max_model_len, ids, strs))

    async def detokenize(request: Request) -> Response:
        req = parse_detokenize_request(request.body)
        check_model(
            settings.served_model_names, req.model, services.adapters,
            services.runtime_lora_updating,
        )  # fmt: skip
        tokenizer = services.tokenizer
        if tokenizer is None:
            raise errors.NotImplementedFeature("Detokenization is not available.")
        if (log := services.request_log) is not None:
            log.log_inputs(_log_id(request), None, req.tokens, None, _lora(services, req))
        await tokenizer.ensure_backend()  # a let-go `tokenizers` object comes back off the loop
        return json_response(_DetokenizeResponse(tokenizer.decode(req.tokens)))

    return tokenize, detokenize

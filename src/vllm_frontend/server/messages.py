"""``POST /v1/messages`` and ``POST /v1/messages/count_tokens`` (Anthropic Messages) with vLLM
0.32's behaviour (vllm/entrypoints/anthropic/).

vLLM serves them by turning the request into a chat completion request, running it, and turning
the chat response (or each chat stream chunk) back into Anthropic's shapes. Here the request is
mapped (``messages_convert``) onto one call of the chat layer's facade, and its results become
the Anthropic response directly, with what the chat route would have said in between (content,
reasoning and tool calls from the output parsers, the finish reason) applied as vLLM applies it.

A body that does not validate is answered as vLLM's FastAPI handler answers it (OpenAI-shaped);
every later error in Anthropic's shape, ``{"type": "error", "error": {"type", "message"}}``,
with the status and ``type`` vLLM's ``create_error_response`` gives the exception. vLLM reads no
Anthropic header (``anthropic-version``, ``x-api-key``): ``--api-key`` is checked on
``Authorization: Bearer`` as for every route.
"""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

import msgspec

from vllm_frontend.chat.llm import ChatGeneration, ChatLlm, ChatRequest
from vllm_frontend.chat.parsed import OutputDelta, ToolCallDelta
from vllm_frontend.text.llm import TextRequest

from . import errors
from .generation import (
    GenerationFailed,
    ServingContext,
    data_parallel_rank,
    request_id_for,
    sampling_request,
    trace_headers,
)
from .messages_convert import ChatFields, to_chat_fields
from .messages_protocol import (
    CountTokensRequest,
    MessagesRequest,
    parse_count_tokens_request,
    parse_messages_request,
)
from .protocol import ChatCompletionRequest, StreamOptions
from .protocol import _check_cache_salt as check_cache_salt
from .transport import AnyResponse, Request, Response, StreamingResponse

__all__ = ["MessagesHandler", "anthropic_error_response"]

logger = logging.getLogger(__name__)

_encode = msgspec.json.Encoder().encode

DISABLED_THINKING_EFFORTS = ("auto", "none", "low", "medium", "high", "xhigh", "max")
"""``--anthropic-disabled-thinking-effort`` choices ("auto": probe the chat template)."""
_EFFORTS = ("low", "medium", "high", "xhigh", "max")


def anthropic_error_response(exc: BaseException) -> Response:
    """vLLM's ``translate_error_response``: the status and ``type`` vLLM gives ``exc``, in
    Anthropic's error body."""
    status, err_type, message, _ = errors.classify(exc)
    body = {
        "type": "error",
        "error": {"type": err_type, "message": errors.sanitize_message(message)},
    }
    return Response(_encode(body), status)


class MessagesHandler:
    """The two Messages routes over the chat layer's facade."""

    def __init__(
        self, ctx: ServingContext, chat: ChatLlm, disabled_thinking_effort: str = "auto"
    ) -> None:
        """``chat`` is the chat layer's facade (with the server's output parsers);
        ``disabled_thinking_effort``: ``--anthropic-disabled-thinking-effort``."""
        self.ctx = ctx
        self.chat = chat
        self._disabled_effort = (
            None if disabled_thinking_effort == "auto" else disabled_thinking_effort
        )
        self._merge_inline_system: bool | None = None

    # -- request mapping ------------------------------------------------------------------

    def _merge_system(self) -> bool:
        if self._merge_inline_system is None:
            self._merge_inline_system = needs_system_first(self.chat)
            if self._merge_inline_system:
                logger.warning(
                    "The chat template requires system-first ordering, so inline system "
                    "messages in /v1/messages requests are merged into the leading system "
                    "prompt (which changes the prompt prefix and misses the prefix cache)."
                )
        return self._merge_inline_system

    def _disabled_thinking_effort(self, request: MessagesRequest | CountTokensRequest) -> str:
        thinking = request.thinking
        if thinking is None or type(thinking).__struct_config__.tag != "disabled":
            return "none"
        if self._disabled_effort is None:
            self._disabled_effort = probe_disabled_thinking_effort(self.chat)
            logger.info(
                "Anthropic thinking.type=disabled maps to reasoning_effort=%r",
                self._disabled_effort,
            )
        return self._disabled_effort

    def _fields(self, request: MessagesRequest | CountTokensRequest) -> ChatFields:
        effort = self._disabled_thinking_effort(request)
        fields = to_chat_fields(
            request, merge_inline_system=self._merge_system(), disabled_thinking_effort=effort
        )
        if isinstance(request, MessagesRequest) and request.cache_salt is not None:
            # the chat request's own validator, run when vLLM builds it
            check_cache_salt({"cache_salt": request.cache_salt})
        return fields

    async def _generate(
        self,
        http: Request,
        request: MessagesRequest | CountTokensRequest,
        fields: ChatFields,
    ) -> tuple[ChatGeneration, str]:
        self.ctx.check_model(request.model)
        chat, _ = self._chat_request(http, request, fields)
        gen = await self.chat.generate(chat)
        return gen, chat.text.request_id

    def render_request(
        self, http: Request, request: MessagesRequest
    ) -> tuple[ChatRequest, ChatCompletionRequest]:
        """``request`` as ``/v1/messages/render`` maps it (vLLM's
        ``to_chat_completion_request`` with its default ``thinking.type=disabled`` effort,
        ``"none"``): the chat layer's request and the chat completion request it stands for."""
        fields = to_chat_fields(
            request, merge_inline_system=self._merge_system(), disabled_thinking_effort="none"
        )
        if request.cache_salt is not None:
            check_cache_salt({"cache_salt": request.cache_salt})
        return self._chat_request(http, request, fields)

    def _chat_request(
        self,
        http: Request,
        request: MessagesRequest | CountTokensRequest,
        fields: ChatFields,
    ) -> tuple[ChatRequest, ChatCompletionRequest]:
        ctx = self.ctx
        cache_salt = None
        traced = None
        if isinstance(request, MessagesRequest):
            chat_req = ChatCompletionRequest(
                messages=fields.messages,
                model=request.model,
                max_tokens=request.max_tokens,
                max_completion_tokens=request.max_tokens,
                stop=request.stop_sequences,
                stream=bool(request.stream),
                temperature=request.temperature,
                top_p=request.top_p,
                top_k=request.top_k,
                watermarking=request.watermarking,
                kv_transfer_params=request.kv_transfer_params,
                ec_transfer_params=request.ec_transfer_params,
                vllm_xargs=request.vllm_xargs,
                thinking_token_budget=fields.thinking_token_budget,
            )
            if request.stream:
                chat_req.stream_options = StreamOptions(
                    include_usage=True, continuous_usage_stats=True
                )
            cache_salt = request.cache_salt
            chat_req.cache_salt = cache_salt
            traced = trace_headers(ctx, http)
        else:
            chat_req = ChatCompletionRequest(messages=fields.messages, model=request.model)
        request_id = request_id_for("chatcmpl", http, None)
        chat = ChatRequest(
            messages=fields.messages,
            text=TextRequest(
                request_id=request_id,
                sampling=sampling_request(chat_req, chat=True),
                max_tokens=chat_req.max_completion_tokens,
                max_tokens_param="max_completion_tokens",
                add_special_tokens=False,  # the chat request's default
                response_format=fields.response_format,
                data_parallel_rank=data_parallel_rank(http),
                cache_salt=cache_salt,
                model=request.model,
                trace_headers=traced,
                # (an engine-side refusal is the stream's error event, as vLLM's chat stream
                # meets it on its first output)
                defer_engine_checks=bool(chat_req.stream),
            ),
            tools=fields.tools,
            tool_choice=fields.tool_choice,
            chat_template_kwargs=request.chat_template_kwargs,
            reasoning_effort=fields.reasoning_effort,
            parallel_tool_calls=fields.parallel_tool_calls,
        )
        return chat, chat_req

    # -- routes ---------------------------------------------------------------------------

    async def messages(self, http: Request) -> AnyResponse:
        """``POST /v1/messages``."""
        request = parse_messages_request(http.body)
        try:
            fields = self._fields(request)
            gen, request_id = await self._generate(http, request, fields)
        except Exception as exc:
            return anthropic_error_response(exc)
        named = isinstance(fields.tool_choice, dict)
        if request.stream:
            stream = _MessageStream(self.ctx, gen, request_id, named, fields.parallel_tool_calls)
            return StreamingResponse(stream.events())
        try:
            body = await self._full(gen, request_id, fields.parallel_tool_calls)
        except Exception as exc:
            return anthropic_error_response(exc)
        return Response(body)

    async def count_tokens(self, http: Request) -> AnyResponse:
        """``POST /v1/messages/count_tokens``: the rendered prompt's length."""
        request = parse_count_tokens_request(http.body)
        try:
            gen, _ = await self._generate(http, request, self._fields(request))
        except Exception as exc:
            return anthropic_error_response(exc)
        count = sum(len(p.token_ids) for p in gen.text.prompts)
        body = {"input_tokens": count, "context_management": {"original_input_tokens": count}}
        return Response(_encode(body))

    async def _full(self, gen: ChatGeneration, request_id: str, parallel: bool) -> bytes:
        ctx = self.ctx
        [prompt] = gen.text.prompts
        final = None
        cached: int | None = None
        async with contextlib.aclosing(gen.text.source(0)) as outputs:
            async for _, seq, num_cached in outputs:
                if num_cached is not None:
                    cached = num_cached
                if seq.finished:
                    final = seq
            kv_transfer_params = outputs.kv_transfer_params
            ec_transfer_params = outputs.ec_transfer_params
            written = outputs.num_cache_creation_tokens
        assert final is not None
        if final.finish_reason == "error":
            raise GenerationFailed()
        finish_reason = final.finish_reason or "stop"
        content: str | None = final.text
        reasoning: str | None = None
        calls: list[Any] = []
        if (parser := gen.new_parser()) is not None:
            parsed = parser.parse(final.text, final.token_ids)
            content = parsed.content
            if parser.forced_choice is not None:
                content = parsed.content or ""
                if parser.forced_choice.required and final.finish_reason == "stop":
                    finish_reason = "tool_calls"
            reasoning = parsed.reasoning
            calls = parsed.tool_calls if parallel else parsed.tool_calls[:1]
            if parsed.tools_called:
                finish_reason = "tool_calls"
        stop_reason, stop_sequence = anthropic_stop_reason(
            finish_reason, final.stop_reason, bool(calls), bool(calls)
        )
        blocks: list[dict[str, Any]] = []
        if reasoning:
            blocks.append(
                {"type": "thinking", "thinking": reasoning, "signature": uuid.uuid4().hex}
            )
        if content:
            blocks.append({"type": "text", "text": content})
        for call in calls:
            arguments = json.loads(call.arguments)
            if not isinstance(arguments, dict):
                raise errors.BadRequest("tool_use input should be a valid dictionary")
            blocks.append(
                {"type": "tool_use", "id": call.id, "name": call.name, "input": arguments}
            )
        if not blocks:
            blocks.append({"type": "text", "text": ""})  # vLLM: never an empty content list
        body: dict[str, Any] = {
            "id": request_id,
            "type": "message",
            "role": "assistant",
            "content": blocks,
            "model": ctx.model_name_for(
                lora.lora_name if (lora := gen.text.lora_request) else None
            ),
            "stop_reason": stop_reason,
        }
        if stop_sequence is not None:
            body["stop_sequence"] = stop_sequence
        body["usage"] = (
            anthropic_usage(len(prompt.token_ids), final.num_output_tokens, cached, written)
            if ctx.enable_prompt_tokens_details
            else anthropic_usage(len(prompt.token_ids), final.num_output_tokens)
        )
        if kv_transfer_params is not None:  # the KV connector's, as vLLM's chat response has them
            body["kv_transfer_params"] = kv_transfer_params
        if ec_transfer_params is not None:  # the encoder-cache connector's, likewise
            body["ec_transfer_params"] = ec_transfer_params
        if body["stop_reason"] is None:
            del body["stop_reason"]
        return _encode(body)


def anthropic_usage(
    prompt_tokens: int,
    output_tokens: int,
    cached: int | None = None,
    written: int | None = None,
) -> dict[str, int]:
    """vLLM's ``_build_anthropic_usage``: ``input_tokens`` excludes the prompt tokens read
    from the prefix cache and those written to it, each reported apart when given (with
    ``--enable-prompt-tokens-details``)."""
    usage = {"input_tokens": prompt_tokens, "output_tokens": output_tokens}
    if written is not None:
        usage["cache_creation_input_tokens"] = written
        usage["input_tokens"] -= written
    if cached is not None:
        usage["cache_read_input_tokens"] = cached
        usage["input_tokens"] -= cached
    usage["input_tokens"] = max(0, usage["input_tokens"])
    return usage


def anthropic_stop_reason(
    finish_reason: str | None, stop_reason: int | str | None, tool_used: bool, tool_complete: bool
) -> tuple[str | None, str | None]:
    """vLLM's ``_to_anthropic_stop_reason``: ``(stop_reason, stop_sequence)`` of a chat finish
    reason. ``max_tokens`` wins; then complete tool calls; then a matched stop string; then
    any tool call; else ``end_turn``."""
    if finish_reason == "length":
        return "max_tokens", None
    if finish_reason not in ("stop", "tool_calls"):
        return None, None
    if tool_complete:
        return "tool_use", None
    if isinstance(stop_reason, str):
        return "stop_sequence", stop_reason
    if finish_reason == "tool_calls" or tool_used:
        return "tool_use", None
    return "end_turn", None


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return False
    return True


def _event(name: bytes, data: bytes) -> bytes:
    return b"event: " + name + b"\ndata: " + data + b"\n\n"


_DELTA_HEAD = b'event: content_block_delta\ndata: {"type":"content_block_delta","delta":{"type":'
_TEXT_DELTA = _DELTA_HEAD + b'"text_delta","text":'
_THINKING_DELTA = _DELTA_HEAD + b'"thinking_delta","thinking":'
_JSON_DELTA = _DELTA_HEAD + b'"input_json_delta","partial_json":'
_MESSAGE_STOP = b'event: message_stop\ndata: {"type":"message_stop"}\n\n'


def _delta_event(head: bytes, value: str, index: int) -> bytes:
    return head + _encode(value) + b'},"index":' + str(index).encode() + b"}\n\n"


class _MessageStream:
    """One streamed Messages response: vLLM's ``message_stream_converter`` over what the chat
    stream would carry, fed from the chat generation's text updates.

    Blocks open and close as vLLM's converter opens and closes them: reasoning goes to a
    ``thinking`` block (closed with a ``signature_delta``), content to a ``text`` block, each
    tool call to a ``tool_use`` block whose arguments are ``input_json_delta`` events; content
    arriving while a tool call's block is open waits, and goes out in a text block of its own
    when that block closes.
    """

    def __init__(
        self,
        ctx: ServingContext,
        gen: ChatGeneration,
        request_id: str,
        named_tool: bool,
        parallel_tool_calls: bool,
    ) -> None:
        self._ctx = ctx
        self._gen = gen
        self._request_id = request_id
        self._named_tool = named_tool
        self._parallel = parallel_tool_calls
        # the open block (vLLM's _ActiveBlockState)
        self._next_index = 0
        self._block_type: str | None = None
        self._block_index: int | None = None
        self._signature: str | None = None
        self._tool_use_id: str | None = None
        self._pending: list[str] = []
        # what message_delta reports
        self._finish_reason: str | None = None
        self._stop_reason: int | str | None = None
        self._tool_used = False
        self._last_tool_args: list[str] = []
        self._tool_ids: dict[int, str] = {}

    async def events(self) -> AsyncIterator[bytes]:
        """The SSE body."""
        gen = self._gen
        [prompt] = gen.text.prompts
        num_prompt = len(prompt.token_ids)
        parser = gen.new_parser()
        num_tokens = 0
        cached: int | None = None
        first = True
        finished = False
        try:
            async with contextlib.aclosing(gen.text.source(0)) as outputs:
                async for _, seq, num_cached in outputs:
                    if first:
                        first = False
                        cached = num_cached
                        yield self._message_start(num_prompt)
                    if finished:
                        continue
                    if seq.finish_reason == "error":
                        raise GenerationFailed()
                    if not seq.text and not seq.token_ids and not num_tokens:
                        continue  # the chat stream sends no empty chunk before the first token
                    num_tokens += len(seq.token_ids)
                    finish = seq.finish_reason
                    if parser is None:
                        delta = OutputDelta(seq.text)
                    else:
                        parsed = parser.feed(
                            seq.text, seq.token_ids, prompt.token_ids, finished=finish is not None
                        )
                        if parsed is None:
                            if finish is None:
                                continue
                            parsed = OutputDelta()
                        delta = parsed
                        if not self._parallel:
                            delta.tool_calls = [c for c in delta.tool_calls if c.index == 0]
                        if parser.tool_calls_streamed and not self._named_tool and finish == "stop":
                            finish = "tool_calls"
                    if finish is not None:
                        finished = True
                        self._finish_reason = finish
                        self._stop_reason = seq.stop_reason
                    out = self._delta(delta)
                    if out:
                        yield b"".join(out)
            if self._ctx.enable_prompt_tokens_details:
                written = outputs.num_cache_creation_tokens
                usage = anthropic_usage(num_prompt, num_tokens, cached, written)
            else:
                usage = anthropic_usage(num_prompt, num_tokens)
            yield self._message_delta(usage)
            yield _MESSAGE_STOP
        except Exception as exc:
            logger.debug("Messages stream failed", exc_info=exc)
            _, _, message, _ = errors.classify(exc)
            body = {
                "type": "error",
                "error": {"type": "internal_error", "message": errors.sanitize_message(message)},
            }
            yield _event(b"error", _encode(body))

    def _message_start(self, num_prompt: int) -> bytes:
        message: dict[str, Any] = {
            "id": self._request_id,
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": self._ctx.model_name_for(
                lora.lora_name if (lora := self._gen.text.lora_request) else None
            ),
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": num_prompt, "output_tokens": 0},
        }
        return _event(b"message_start", _encode({"type": "message_start", "message": message}))

    def _message_delta(self, usage: dict[str, int]) -> bytes:
        out = self._stop_and_flush()
        tool_complete = self._tool_used and _is_json("".join(self._last_tool_args))
        stop_reason, stop_sequence = anthropic_stop_reason(
            self._finish_reason or "stop", self._stop_reason, self._tool_used, tool_complete
        )
        event = {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
            "usage": usage,
        }
        out.append(_event(b"message_delta", _encode(event)))
        return b"".join(out)

    # -- blocks -----------------------------------------------------------------------------

    def _index(self) -> int:
        return self._block_index if self._block_index is not None else self._next_index

    def _start_block(self, block: dict[str, Any]) -> bytes:
        event = {"type": "content_block_start", "content_block": block, "index": self._next_index}
        kind = block["type"]
        self._block_type = kind
        self._block_index = self._next_index
        self._signature = uuid.uuid4().hex if kind == "thinking" else None
        self._tool_use_id = block["id"] if kind == "tool_use" else None
        return _event(b"content_block_start", _encode(event))

    def _stop_block(self) -> list[bytes]:
        if self._block_type is None:
            return []
        out: list[bytes] = []
        index = self._block_index
        if self._signature is not None:
            delta = {"type": "signature_delta", "signature": self._signature}
            event = {"type": "content_block_delta", "delta": delta, "index": index}
            out.append(_event(b"content_block_delta", _encode(event)))
        stop = {"type": "content_block_stop", "index": index}
        out.append(_event(b"content_block_stop", _encode(stop)))
        self._block_type = self._block_index = self._signature = self._tool_use_id = None
        self._pending.clear()
        self._next_index += 1
        return out

    def _stop_and_flush(self) -> list[bytes]:
        pending = "".join(self._pending)
        out = self._stop_block()
        if pending:
            out.append(self._start_block({"type": "text", "text": ""}))
            out.append(_delta_event(_TEXT_DELTA, pending, self._index()))
            out.extend(self._stop_block())
        return out

    def _delta(self, delta: OutputDelta) -> list[bytes]:
        out: list[bytes] = []
        if delta.reasoning:
            if self._block_type != "thinking":
                out.extend(self._stop_and_flush())
                out.append(self._start_block({"type": "thinking", "thinking": ""}))
            out.append(_delta_event(_THINKING_DELTA, delta.reasoning, self._index()))
        if delta.content:
            if self._block_type == "tool_use":
                self._pending.append(delta.content)
            else:
                if self._block_type != "text":
                    out.extend(self._stop_and_flush())
                    out.append(self._start_block({"type": "text", "text": ""}))
                out.append(_delta_event(_TEXT_DELTA, delta.content, self._index()))
        if delta.tool_calls:
            self._tool_calls(delta.tool_calls, out)
        return out

    def _tool_calls(self, calls: Sequence[ToolCallDelta], out: list[bytes]) -> None:
        for call in calls:
            call_id = call.id
            if call_id is not None:
                self._tool_ids[call.index] = call_id
                if self._tool_use_id != call_id and call.name is not None:
                    out.extend(self._stop_and_flush())
                    self._tool_used = True
                    self._last_tool_args = []
                    block = {"type": "tool_use", "id": call_id, "name": call.name, "input": {}}
                    out.append(self._start_block(block))
            else:
                call_id = self._tool_ids.get(call.index)
            if call_id is not None and call.arguments and self._tool_use_id == call_id:
                self._last_tool_args.append(call.arguments)
                out.append(_delta_event(_JSON_DELTA, call.arguments, self._index()))


# -- startup probes (run on the first request that needs them) ---------------------------------


def needs_system_first(chat: ChatLlm) -> bool:
    """vLLM's ``_should_merge_inline_system``: whether a chat template the server renders with
    (for requests with and without tools) fails on a system message after the first turn."""
    renderer = chat.renderer
    if renderer is None:
        return True
    requested = renderer.options.chat_template
    sources = {renderer.templates.select(requested, has_tools=t) for t in (False, True)}
    return any(_rejects_inline_system(source) for source in sources)


def _rejects_inline_system(source: str | None) -> bool:
    if not source:
        return True
    import jinja2
    import jinja2.ext
    import jinja2.sandbox

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    turns = [{"role": role, "content": "t"} for role in ("system", "user", "system", "user")]
    try:
        env.from_string(source).render(messages=turns, add_generation_prompt=False)
    except jinja2.TemplateError:
        return True
    return False


def probe_disabled_thinking_effort(chat: ChatLlm) -> str:
    """vLLM's ``_probe_disabled_thinking_effort``: ``"none"`` when the template renders
    ``reasoning_effort="none"`` differently from every thinking effort, else ``"low"``."""
    none_prompt = _render_probe(chat, "none")
    if none_prompt is None:
        return "low"
    for effort in _EFFORTS:
        if _render_probe(chat, effort) == none_prompt:
            return "low"
    return "none"


def _render_probe(chat: ChatLlm, effort: str) -> str | None:
    renderer = chat.renderer
    if renderer is None:
        return None
    try:
        rendered = renderer.render([{"role": "user", "content": "Hi"}], reasoning_effort=effort)
    except Exception:
        logger.debug("Rendering reasoning_effort=%r failed", effort, exc_info=True)
        return None
    return rendered.prompt

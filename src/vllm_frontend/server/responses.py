"""``POST /v1/responses``, ``GET /v1/responses/{response_id}`` and
``POST /v1/responses/{response_id}/cancel`` with vLLM 0.32's behaviour for non-Harmony models
(vllm/entrypoints/openai/responses/serving.py, the ``SimpleContext`` path).

A request maps onto one chat-layer call (:class:`~vllm_frontend.chat.llm.ChatLlm`, as
``server/chat.py``): the input items become chat messages (:mod:`.responses_input`), the
output parsers split the text into reasoning, message and function-call items, and a stream
emits vLLM's event sequence (``response.created``, ``response.in_progress``, then per item
``output_item.added`` … ``output_item.done``, then ``response.completed``) with sequence
numbers. ``store`` keeps responses and their conversations in memory
(:class:`.responses_store.ResponseStore`) only with ``VLLM_ENABLE_RESPONSES_API_STORE``, as vLLM.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Mapping
from typing import Any

import msgspec

from vllm_frontend.chat.harmony_output import HarmonyOutputParser
from vllm_frontend.chat.harmony_renderer import HarmonyRenderer
from vllm_frontend.chat.harmony_responses import (
    HarmonyContentError,
    HarmonyInputError,
    function_tool_names,
    message_dicts,
    responses_conversation,
)
from vllm_frontend.chat.llm import AnyOutputParser, ChatGeneration, ChatLlm, ChatRequest
from vllm_frontend.chat.mistral_renderer import MistralChatRenderer
from vllm_frontend.chat.output_parser import OutputParsers
from vllm_frontend.chat.parsed import OutputDelta, ToolCallDelta, new_tool_call_id
from vllm_frontend.text.llm import TextRequest
from vllm_frontend.text.output import SequenceOutput

from . import errors
from .chat import chat_logprobs, refuse_request_mm_kwargs
from .generation import (
    GenerationFailed,
    ServingContext,
    data_parallel_rank,
    sampling_request,
    trace_headers,
)
from .message_schema import converted_parts_error
from .responses_calls import CallNames, custom_input, custom_input_prefix, custom_tool_call_item
from .responses_harmony import HarmonyStream, HarmonyTurn
from .responses_input import (
    chat_tool_choice,
    chat_tools,
    check_content_parts,
    function_output_parts,
    input_messages,
)
from .responses_output import (
    function_call_item,
    message_item,
    new_id,
    output_text,
    reasoning_item,
    response_json,
    usage_json,
)
from .responses_protocol import ResponsesRequest, check_echoed_nulls
from .responses_store import ResponseStore, StoredStream
from .transport import PushedStreamingResponse, Request, Response, StreamSink
from .validation import pydantic_report

__all__ = ["ResponsesHandler"]

_encode = msgspec.json.Encoder().encode


def _engine_request_id(response_id: str) -> str:
    """The id of a response's (first) engine request: vLLM's Responses serving numbers the
    requests of a response's turns ``<response id>_0``, ``_1``, ... (only the first here: no
    built-in tools run between turns)."""
    return f"{response_id}_0"


class InvalidRequest(errors.ApiError):
    """vLLM's ``create_error_response(err_type="invalid_request_error", ...)``."""

    err_type = "invalid_request_error"

    def __init__(self, message: str, *, status: int = 400, param: str | None = None) -> None:
        super().__init__(message, param=param)
        self.status = status


def _check_converted_parts(messages: list[dict[str, Any]]) -> None:
    # vLLM's chat parser validates the typed parts of the messages the input became: those of
    # a function_call_output's list output (a message item's were checked with the request),
    # as the Responses request model kept them.
    for message in messages:
        content = message.get("content")
        if message.get("role") != "tool" or not isinstance(content, list):
            continue
        if (report := converted_parts_error(function_output_parts(content))) is not None:
            raise errors.BadRequest(report)


def _not_found(response_id: str) -> InvalidRequest:
    return InvalidRequest(
        f"Response with id '{response_id}' not found.", status=404, param="response_id"
    )


def _event(event: dict[str, Any]) -> bytes:
    return b"event: " + event["type"].encode() + b"\ndata: " + _encode(event) + b"\n\n"


def _raw_message(text: str, token_ids: list[int]) -> dict[str, Any]:
    """vLLM's ``ResponseRawMessageAndToken``: a message as text and tokens."""
    return {"message": text, "tokens": list(token_ids), "type": "raw_message_tokens"}


def transfer_params(source: Any) -> dict[str, Any]:
    """A finished source's ``kv_transfer_params`` and ``ec_transfer_params`` (the KV and
    encoder-cache connectors'), as a response carries them (None without)."""
    return {
        "kv_transfer_params": source.kv_transfer_params,
        "ec_transfer_params": source.ec_transfer_params,
    }


class ResponsesHandler:
    """The three Responses routes over one chat-layer facade and one response store."""

    def __init__(
        self,
        ctx: ServingContext,
        parse: Any,
        parsers: OutputParsers | None = None,
        *,
        store: ResponseStore | None = None,
        harmony: HarmonyRenderer | None = None,
        mistral: MistralChatRenderer | None = None,
    ) -> None:
        """``parse(body)`` decodes the request; ``store`` (None: store disabled, as vLLM
        without ``VLLM_ENABLE_RESPONSES_API_STORE``); ``harmony``: the model is gpt-oss, its
        prompts are rendered through Harmony (:mod:`.responses_harmony`); ``mistral`` renders
        prompts with mistral_common (``--tokenizer-mode mistral``)."""
        self.ctx = ctx
        self.parse = parse
        """Decodes a ``POST /v1/responses`` body."""
        self.chat = ChatLlm(
            ctx.text,
            ctx.chat_renderer,
            parsers,
            response_role="assistant",
            harmony=harmony,
            mistral=mistral,
            media=ctx.media,
        )
        """The chat layer's facade (with the multimodal facade: ``input_image`` parts are
        images, as in vLLM)."""
        self.store = store
        self._harmony = harmony

    def routes(self) -> dict[tuple[str, str], Any]:
        """The route table entries (method, path template) -> handler."""
        return {
            ("POST", "/v1/responses"): self.create,
            ("GET", "/v1/responses/{response_id}"): self.retrieve,
            ("POST", "/v1/responses/{response_id}/cancel"): self.cancel,
        }

    # --- POST /v1/responses -------------------------------------------------------------

    async def create(self, request: Request) -> Response | PushedStreamingResponse:
        """Handle ``POST /v1/responses`` (errors are raised, the app maps them)."""
        ctx = self.ctx
        req: ResponsesRequest = self.parse(request.body)
        ctx.check_model(req.model)
        if self._harmony is not None and req.include_logprobs():
            raise InvalidRequest("logprobs are not supported with gpt-oss models", param="logprobs")
        store = self.store
        if req.store and store is None and req.background:
            raise InvalidRequest(
                "This vLLM engine does not support `store=True` and therefore does not support "
                "the background mode. To enable these features, set the environment variable "
                "`VLLM_ENABLE_RESPONSES_API_STORE=1` when launching the vLLM server.",
                param="background",
            )
        if req.previous_input_messages and req.previous_response_id:
            raise InvalidRequest(
                "Only one of `previous_input_messages` and `previous_response_id` can be set.",
                param="previous_response_id",
            )
        if store is None:
            req.store = False  # vLLM: store silently off
        previous = None
        if req.previous_response_id is not None:
            previous = store.get(req.previous_response_id) if store is not None else None
            if previous is None:
                raise _not_found(req.previous_response_id)
        response_id = req.request_id or new_id("resp")
        if self._harmony is not None:
            return await self._create_harmony(request, req, response_id, previous)
        messages = input_messages(
            req.instructions,
            req.input,
            store.messages(previous["id"]) if store is not None and previous else None,
            previous["output"] if previous else None,
        )
        refuse_request_mm_kwargs(req)  # vLLM's preprocess_chat, after the input's conversion
        _check_converted_parts(messages)
        chat_request = self._chat_request(request, req, response_id, messages)
        chat_request.text.request_id = _engine_request_id(response_id)
        constraint = chat_request.text.structured_outputs
        gen = await self.chat.generate(chat_request)
        check_echoed_nulls(req)  # (the generation is not started yet: nothing to abort)
        engine_constraint = chat_request.text.structured_outputs
        if engine_constraint is not constraint:
            # vLLM's tool parser (adjust_request) rewrites request.text for a forced call's
            # schema (a structural tag leaves it as the request gave it)
            req.text = _echoed_text(engine_constraint) or req.text
        if req.store and store is not None:
            store.put_messages(response_id, messages)
        if req.background and store is not None:
            return self._background(req, response_id, gen, store)
        if req.stream:

            def produce(sink: StreamSink) -> Awaitable[None]:
                return self._push(sink, self._events(req, response_id, gen, int(time.time())))

            return PushedStreamingResponse(produce, keep_alive_interval=ctx.sse_keep_alive_interval)
        return Response(_encode(await self._full(req, response_id, gen, int(time.time()))))

    def render_request(self, request: Request, req: ResponsesRequest) -> ChatRequest:
        """``req`` as ``/v1/responses/render`` maps it (vLLM's stateless render: no stored
        history; ``previous_response_id`` refused), for :attr:`chat`'s ``prepare``."""
        if req.previous_response_id is not None:
            raise InvalidRequest(
                "previous_response_id is not supported by the stateless render endpoint.",
                param="previous_response_id",
            )
        response_id = req.request_id or new_id("resp")
        if self._harmony is not None:
            return self._harmony_request(request, req, response_id, None)
        messages = input_messages(req.instructions, req.input, None, None)
        refuse_request_mm_kwargs(req)
        _check_converted_parts(messages)
        return self._chat_request(request, req, response_id, messages)

    def _chat_request(
        self,
        request: Request,
        req: ResponsesRequest,
        response_id: str,
        messages: list[Any],
        harmony_messages: list[Any] | None = None,
    ) -> ChatRequest:
        sampling = sampling_request(_SamplingView(req), chat=True)
        if sampling.extra_args is None:
            sampling.extra_args = {}  # vLLM's ResponsesRequest.to_sampling_params: xargs or {}
        structured = req.structured_outputs
        fmt = (req.text or {}).get("format")
        if isinstance(fmt, dict):
            if structured is not None:
                raise errors.InvalidParameter(
                    "Cannot specify both structured_outputs and text.format",
                    parameter="structured_outputs",
                )
            if fmt.get("type") == "json_object":
                structured = {"json_object": True}
            elif fmt.get("type") == "json_schema" and fmt.get("schema") is not None:
                structured = {"json": fmt["schema"]}
        effort = (req.reasoning or {}).get("effort")
        last = req.input[-1] if isinstance(req.input, list) and req.input else None
        continue_final = (
            harmony_messages is None
            and isinstance(last, dict)
            and (
                last.get("type", "message") in ("message", "reasoning")
                and last.get("status") in ("in_progress", "incomplete")
            )
        )
        return ChatRequest(
            messages=messages,
            text=TextRequest(
                request_id=response_id,
                sampling=sampling,
                max_tokens=req.max_output_tokens,
                max_tokens_param="max_output_tokens",
                add_special_tokens=True,  # as vLLM (a template's BOS then doubles)
                # (vLLM: anything but "disabled" truncates, a null too; the null is refused after)
                truncate_prompt_tokens=None if req.truncation == "disabled" else -1,
                structured_outputs=structured,
                priority=req.priority,
                data_parallel_rank=data_parallel_rank(request),
                cache_salt=req.cache_salt,
                trace_headers=trace_headers(self.ctx, request),
                model=req.model,
            ),
            tools=chat_tools(req.tools, req.tool_choice),
            # without tools vLLM's request says "none": no tool parsing of a JSON answer
            tool_choice=chat_tool_choice(req.tool_choice) if req.tools else "none",
            add_generation_prompt=not continue_final,
            continue_final_message=continue_final,
            chat_template_kwargs=req.chat_template_kwargs,
            reasoning_effort=effort,
            include_reasoning=req.include_reasoning,
            logprobs=bool(req.include_logprobs()),
            parallel_tool_calls=req.parallel_tool_calls,
            resolve_reasoning_ended=False,  # vLLM's Responses route leaves it to the engine
            harmony_messages=harmony_messages,
            # vLLM's render_responses takes any tool choice without a tool parser
            check_tool_choice=False,
        )

    # --- gpt-oss (Harmony) ----------------------------------------------------------------

    async def _create_harmony(
        self,
        request: Request,
        req: ResponsesRequest,
        response_id: str,
        previous: dict[str, Any] | None,
    ) -> Response | PushedStreamingResponse:
        # vLLM's _render_responses_with_harmony, then one generation read by a HarmonyContext.
        store = self.store
        chat_request = self._harmony_request(request, req, response_id, previous)
        chat_request.text.request_id = _engine_request_id(response_id)  # (render: the id itself)
        constraint = chat_request.text.structured_outputs
        messages = chat_request.harmony_messages
        assert messages is not None
        gen = await self.chat.generate(chat_request)
        engine_constraint = chat_request.text.structured_outputs
        if engine_constraint is not constraint:
            req.text = _echoed_text(engine_constraint)
        turn = HarmonyTurn(self._harmony_parser(gen), function_tool_names(req.tools), messages)
        if req.store and store is not None:
            store.put_messages(response_id, messages)  # the output messages join it
        if req.background and store is not None:
            return self._background(req, response_id, gen, store, turn)
        if req.stream:

            def produce(sink: StreamSink) -> Awaitable[None]:
                events = self._events(req, response_id, gen, int(time.time()), turn)
                return self._push(sink, events)

            return PushedStreamingResponse(
                produce, keep_alive_interval=self.ctx.sse_keep_alive_interval
            )
        return Response(_encode(await self._full(req, response_id, gen, int(time.time()), turn)))

    def _harmony_request(
        self,
        request: Request,
        req: ResponsesRequest,
        response_id: str,
        previous: dict[str, Any] | None,
    ) -> ChatRequest:
        # vLLM's _render_responses_with_harmony: the conversation as Harmony messages (after
        # the stored ones of ``previous``), rendered by the chat facade's Harmony renderer.
        renderer = self._harmony
        assert renderer is not None
        store = self.store
        previous_messages = None
        previous_calls: list[tuple[str, str]] = []
        if previous is not None and store is not None:
            previous_messages = store.messages(previous["id"]) or []
            previous_calls = [
                (item["call_id"], item["name"])
                for item in previous["output"]
                if item.get("type") == "function_call"
            ]
        check_content_parts(req.input)  # the item union vLLM's request model validates
        chat_request = self._chat_request(request, req, response_id, [], harmony_messages=[])
        try:
            chat_request.harmony_messages = responses_conversation(
                renderer,
                instructions=req.instructions,
                request_input=req.input,
                tools=req.tools,
                reasoning_effort=(req.reasoning or {}).get("effort"),
                previous_messages=previous_messages,
                previous_calls=previous_calls,
                previous_input_messages=req.previous_input_messages,
            )
        except HarmonyContentError as e:
            # (vLLM: pydantic refuses the list as the content of Harmony's Message)
            error = {"type": "model_type", "loc": ("content", 0),
                     "msg": "Input should be a valid dictionary or instance of Content",
                     "input": function_output_parts(e.value)}  # fmt: skip
            raise InvalidRequest(pydantic_report("Message", [error]), param="input") from None
        except HarmonyInputError as e:
            raise InvalidRequest(str(e), param="input") from None
        return chat_request

    def _harmony_parser(self, gen: ChatGeneration) -> HarmonyOutputParser:
        parser = gen.new_parser()
        if isinstance(parser, HarmonyOutputParser):
            return parser
        # Without --reasoning-parser / --tool-call-parser vLLM's HarmonyContext fails (500);
        # ours reads the channels all the same.
        decode = self.ctx.text.tokenizer.decode
        return HarmonyOutputParser(
            reasoning=False,
            tools=False,
            tool_choice=None,
            include_reasoning=True,
            request_has_tools=False,
            enable_auto_tools=False,
            decode=lambda ids: decode(ids, skip_special_tokens=False),
        )

    async def _harmony_full(
        self,
        req: ResponsesRequest,
        response_id: str,
        gen: ChatGeneration,
        created: int,
        turn: HarmonyTurn,
    ) -> dict[str, Any]:
        final: SequenceOutput | None = None
        cached = 0
        async with contextlib.aclosing(gen.text.source(0)) as outputs:
            async for _idx, seq, num_cached in outputs:
                if num_cached is not None:
                    cached = num_cached
                if seq.finished:
                    final = seq
            transfer = transfer_params(outputs)
            turn.cache_writes = outputs.num_cache_creation_tokens or 0
        assert final is not None
        turn.append(final.token_ids, final.finish_reason, True)
        turn.check_channels()
        return self._harmony_finish(req, response_id, gen, created, turn, cached,
                                    transfer)  # fmt: skip

    def _opening_events(
        self, req: ResponsesRequest, response_id: str, gen: ChatGeneration, created: int
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """``response.created`` and ``response.in_progress`` of a streamed response."""
        initial = response_json(
            req,
            response_id=response_id,
            created_at=created,
            model=self.ctx.model_name_for(req.model),
            params=gen.text.params[0],
            output=[],
            status="in_progress",
            usage=None,
        )
        return (
            {"response": initial, "sequence_number": 0, "type": "response.created"},
            {"response": initial, "sequence_number": 1, "type": "response.in_progress"},
        )

    async def _harmony_event_dicts(
        self,
        req: ResponsesRequest,
        response_id: str,
        gen: ChatGeneration,
        created: int,
        turn: HarmonyTurn,
    ) -> AsyncIterator[dict[str, Any]]:
        numbered = _Numbering()
        for event in self._opening_events(req, response_id, gen, created):
            yield numbered(event)
        stream = HarmonyStream(turn.function_names)
        cached = 0
        try:
            async with contextlib.aclosing(gen.text.source(0)) as outputs:
                async for _idx, seq, num_cached in outputs:
                    if num_cached is not None:
                        cached = num_cached
                    if seq.finish_reason == "error":
                        raise GenerationFailed()
                    for segment in turn.append(seq.token_ids, seq.finish_reason, seq.finished):
                        for event in stream.feed(segment):
                            yield numbered(event)
                transfer = transfer_params(outputs)
                turn.cache_writes = outputs.num_cache_creation_tokens or 0
            response = self._harmony_finish(
                req, response_id, gen, created, turn, cached, transfer, stream.streamed
            )
        except GenerationFailed as exc:
            yield numbered(_error_event(exc))
            return
        yield numbered({"response": response, "sequence_number": -1, "type": "response.completed"})

    def _harmony_finish(
        self,
        req: ResponsesRequest,
        response_id: str,
        gen: ChatGeneration,
        created: int,
        turn: HarmonyTurn,
        cached: int,
        transfer: dict[str, Any],
        streamed: Any = (),
    ) -> dict[str, Any]:
        # vLLM's responses_full_generator, HarmonyContext branch.
        output = turn.items(streamed)
        if not output:
            status = "incomplete"
        elif turn.finish_reason == "error":
            raise GenerationFailed()
        else:
            status = {"length": "incomplete", "abort": "cancelled"}.get(
                turn.finish_reason or "", "completed"
            )
        [prompt] = gen.text.prompts
        turn.prompt_tokens = len(prompt.token_ids)
        turn.cached_tokens = cached
        response = response_json(
            req,
            response_id=response_id,
            created_at=created,
            model=self.ctx.model_name_for(req.model),
            params=gen.text.params[0],
            output=output,
            status=status,
            usage=turn.usage(),
        )
        if req.enable_response_messages:
            response["input_messages"] = message_dicts(turn.conversation[: turn.start])
            response["output_messages"] = message_dicts(turn.messages)
        response.update(transfer)
        if req.store and self.store is not None:
            self.store.put_final(response)
        return response

    # --- full responses -------------------------------------------------------------------

    async def _full(
        self,
        req: ResponsesRequest,
        response_id: str,
        gen: ChatGeneration,
        created: int,
        turn: HarmonyTurn | None = None,
    ) -> dict[str, Any]:
        if turn is not None:
            return await self._harmony_full(req, response_id, gen, created, turn)
        final: SequenceOutput | None = None
        cached = 0
        async with contextlib.aclosing(gen.text.source(0)) as outputs:
            async for _idx, seq, num_cached in outputs:
                if num_cached is not None:
                    cached = num_cached
                if seq.finished:
                    final = seq
            transfer = transfer_params(outputs)
            writes = outputs.num_cache_creation_tokens or 0
        assert final is not None
        if final.finish_reason == "error":
            raise GenerationFailed()
        parser = gen.new_parser()
        output = self._output_items(req, gen, final, parser)
        reasoning_tokens = parser.count_reasoning_tokens(final.token_ids) if parser else 0
        return self._finish(
            req, response_id, gen, created, final, output, cached, writes, reasoning_tokens,
            transfer, final.text,
        )  # fmt: skip

    def _finish(
        self,
        req: ResponsesRequest,
        response_id: str,
        gen: ChatGeneration,
        created: int,
        final: SequenceOutput,
        output: list[Any],
        cached: int,
        cache_writes: int,
        reasoning_tokens: int,
        transfer: dict[str, Any],
        text: str,
    ) -> dict[str, Any]:
        """The final response; ``cached`` and ``cache_writes``: the prompt tokens the engine
        found in its prefix cache and those it wrote there; ``text``: the whole output text
        (``final``'s token ids are the whole output's)."""
        [prompt] = gen.text.prompts
        status = "incomplete" if final.finish_reason == "length" else "completed"
        response = response_json(
            req,
            response_id=response_id,
            created_at=created,
            model=self.ctx.model_name_for(req.model),
            params=gen.text.params[0],
            output=output,
            status=status,
            usage=usage_json(
                len(prompt.token_ids),
                final.num_output_tokens,
                cached,
                cache_writes,
                reasoning_tokens,
            ),
        )
        response.update(transfer)  # the KV and encoder-cache connectors', or None
        if req.enable_response_messages:
            # vLLM's SimpleContext: the prompt as rendered, and the whole output unparsed
            response["input_messages"] = [_raw_message(prompt.text or "", prompt.token_ids)]
            response["output_messages"] = (
                [_raw_message(text, final.token_ids)] if text or final.token_ids else []
            )
        if req.store and self.store is not None:
            self.store.put_final(response)
        return response

    def _logprobs(self, req: ResponsesRequest, gen: ChatGeneration, seq: SequenceOutput) -> Any:
        if not req.include_logprobs() or not seq.logprobs:
            return None
        lps = chat_logprobs(
            seq.token_ids,
            seq.logprobs,
            req.top_logprobs or 0,
            gen.text.token_text(),
            self.ctx.return_tokens_as_token_ids,
        )
        return [
            {
                "token": c.token,
                "bytes": list(c.token.encode("utf-8", errors="replace")),
                "logprob": c.logprob,
                "top_logprobs": [
                    {
                        "token": t.token,
                        "bytes": list(t.token.encode("utf-8", errors="replace")),
                        "logprob": t.logprob,
                    }
                    for t in c.top_logprobs
                ],
            }
            for c in lps.content or ()
        ]

    def _output_items(
        self,
        req: ResponsesRequest,
        gen: ChatGeneration,
        final: SequenceOutput,
        parser: AnyOutputParser | None,
    ) -> list[Any]:
        logprobs = self._logprobs(req, gen, final)
        if parser is None:
            content = [output_text(final.text, logprobs)] if final.text else []
            return [message_item(new_id("msg"), content, "completed")]
        parsed = parser.parse(final.text)
        reasoning = parsed.reasoning
        if not req.include_reasoning:
            reasoning, logprobs = None, None
        items: list[Any] = []
        if reasoning:
            items.append(reasoning_item(new_id("rs"), reasoning, None))
        if parsed.content:
            items.append(
                message_item(new_id("msg"), [output_text(parsed.content, logprobs)], "completed")
            )
        calls = parsed.tool_calls
        if req.parallel_tool_calls is False:
            calls = calls[:1]
        names = CallNames(req.tools)
        for call in calls:
            call_id = call.id or new_tool_call_id()
            if call.name in names.custom:
                payload = custom_input(call.arguments)
                items.append(custom_tool_call_item(new_id("ctc"), call_id, call.name, payload))
                continue
            name, namespace = names.resolve(call.name)
            items.append(
                function_call_item(
                    new_id("fc"), call_id, name, call.arguments, "completed", namespace
                )
            )
        return items

    # --- streaming ------------------------------------------------------------------------

    async def _push(self, sink: StreamSink, events: AsyncIterator[bytes]) -> None:
        try:
            async for event in events:
                sink.send(event)
                await sink.drain()
        finally:
            await events.aclose()  # type: ignore[attr-defined]

    async def _events(
        self,
        req: ResponsesRequest,
        response_id: str,
        gen: ChatGeneration,
        created: int,
        turn: HarmonyTurn | None = None,
    ) -> AsyncIterator[bytes]:
        async for event in self._event_dicts(req, response_id, gen, created, turn):
            yield _event(event)

    async def _event_dicts(
        self,
        req: ResponsesRequest,
        response_id: str,
        gen: ChatGeneration,
        created: int,
        turn: HarmonyTurn | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        if turn is not None:
            async for event in self._harmony_event_dicts(req, response_id, gen, created, turn):
                yield event
            return
        numbered = _Numbering()
        for event in self._opening_events(req, response_id, gen, created):
            yield numbered(event)
        parser = gen.new_parser()
        [prompt] = gen.text.prompts
        state = _StreamState(CallNames(req.tools))
        final: SequenceOutput | None = None
        cached = 0
        token_ids: list[int] = []
        texts: list[str] = []
        hide = parser is not None and not req.include_reasoning
        try:
            async with contextlib.aclosing(gen.text.source(0)) as outputs:
                async for _idx, seq, num_cached in outputs:
                    if num_cached is not None:
                        cached = num_cached
                    if seq.finish_reason == "error":
                        raise GenerationFailed()
                    token_ids.extend(seq.token_ids)
                    texts.append(seq.text)
                    if seq.finished:
                        final = seq
                    delta: OutputDelta | None
                    if parser is not None:
                        delta = parser.feed(
                            seq.text, seq.token_ids, prompt.token_ids, finished=seq.finished
                        )
                    else:
                        delta = OutputDelta(content=seq.text)
                    if delta is None:
                        continue
                    if req.parallel_tool_calls is False:
                        delta.tool_calls = [tc for tc in delta.tool_calls if tc.index == 0]
                    logprobs = None if hide else self._logprobs(req, gen, seq)
                    for part in _split(delta):
                        for event in state.feed(part, logprobs):
                            yield numbered(event)
                transfer = transfer_params(outputs)
                writes = outputs.num_cache_creation_tokens or 0
        except GenerationFailed as exc:
            yield numbered(_error_event(exc))
            return
        for event in state.close():
            yield numbered(event)
        assert final is not None
        reasoning_tokens = parser.count_reasoning_tokens(token_ids) if parser else 0
        final.num_output_tokens = len(token_ids)
        final.token_ids = token_ids
        response = self._finish(
            req, response_id, gen, created, final, state.items, cached, writes,
            reasoning_tokens, transfer, "".join(texts),
        )  # fmt: skip
        yield numbered({"response": response, "sequence_number": -1, "type": "response.completed"})

    # --- background -------------------------------------------------------------------------

    def _background(
        self,
        req: ResponsesRequest,
        response_id: str,
        gen: ChatGeneration,
        store: ResponseStore,
        turn: HarmonyTurn | None = None,
    ) -> Response | PushedStreamingResponse:
        created = int(time.time())
        queued = response_json(
            req,
            response_id=response_id,
            created_at=created,
            model=self.ctx.model_name_for(req.model),
            params=gen.text.params[0],
            output=[],
            status="queued",
            usage=None,
        )
        store.put(queued)
        if req.stream:
            stream = store.open_stream(response_id)

            async def run_stream() -> None:
                # (vLLM leaves a failed one queued and its replays waiting forever)
                try:
                    async for event in self._event_dicts(req, response_id, gen, created, turn):
                        stream.append(event)
                except asyncio.CancelledError:
                    stream.close()
                    raise
                except Exception as exc:
                    store.mark_failed(response_id)
                    stream.close(exc)
                else:
                    store.mark_failed(response_id)  # an error event ended it
                    stream.close()

            store.run(response_id, run_stream())
            return self._replay(stream, None)

        async def run() -> None:
            try:
                await self._full(req, response_id, gen, created, turn)
            except asyncio.CancelledError:
                raise
            except Exception:
                store.mark_failed(response_id)

        store.run(response_id, run())
        return Response(_encode(queued))

    def _replay(self, stream: StoredStream, starting_after: int | None) -> PushedStreamingResponse:
        async def events() -> AsyncIterator[bytes]:
            async for event in stream.replay(starting_after):
                yield _event(event)

        def produce(sink: StreamSink) -> Awaitable[None]:
            return self._push(sink, events())

        return PushedStreamingResponse(
            produce, keep_alive_interval=self.ctx.sse_keep_alive_interval
        )

    # --- GET /v1/responses/{id} and cancel ---------------------------------------------------

    async def retrieve(self, request: Request) -> Response | PushedStreamingResponse:
        """Handle ``GET /v1/responses/{response_id}`` (``?stream=true&starting_after=N``
        replays a background stream's events)."""
        response_id = request.path.rsplit("/", 1)[-1]
        query = urllib.parse.parse_qs(request.query.decode("latin-1"))
        stream = _query_bool(query, "stream")
        starting_after = _query_int(query, "starting_after")
        stored = self.store.get(response_id) if self.store is not None else None
        if stored is None:
            raise _not_found(response_id)
        if stream:
            assert self.store is not None
            events = self.store.stream(response_id)
            if events is None:
                raise errors.InvalidParameter(
                    f"Unknown response_id: {response_id}",
                    parameter="response_id",
                    value=response_id,
                )
            return self._replay(events, starting_after)
        return Response(_encode(stored))

    async def cancel(self, request: Request) -> Response:
        """Handle ``POST /v1/responses/{response_id}/cancel``."""
        response_id = request.path.rsplit("/", 2)[-2]
        store = self.store
        stored = store.get(response_id) if store is not None else None
        if stored is None or store is None:
            raise _not_found(response_id)
        if stored["status"] not in ("queued", "in_progress"):
            raise InvalidRequest("Cannot cancel a synchronous response.", param="response_id")
        stored["status"] = "cancelled"
        await store.cancel_task(response_id)
        return Response(_encode(stored))


def _echoed_text(constraint: Mapping[str, Any] | None) -> dict[str, Any] | None:
    # What vLLM's parser left in ``request.text`` (the response echoes it) after replacing the
    # request's constraint: a forced tool call's JSON schema as a text format; else (a
    # structural tag) nothing.
    if constraint is not None and set(constraint) == {"json"}:
        schema = constraint["json"]
        fmt = {"type": "json_schema", "name": "tool_calling_response", "schema": schema,
               "strict": True}  # fmt: skip
        return {"format": fmt}
    return None


def _query_bool(query: dict[str, list[str]], name: str) -> bool:
    values = query.get(name)
    if not values:
        return False
    value = values[-1].lower()
    if value in ("1", "true", "on", "yes", "t", "y"):
        return True
    if value in ("0", "false", "off", "no", "f", "n"):
        return False
    raise _query_error(
        name,
        values[-1],
        "bool_parsing",
        "Input should be a valid boolean, unable to interpret input",
    )


def _query_int(query: dict[str, list[str]], name: str) -> int | None:
    values = query.get(name)
    if not values:
        return None
    from .validation import lax_int

    number = lax_int(values[-1])  # pydantic's reading: "1.0" and " 1 " are 1
    if number is None:
        raise _query_error(
            name,
            values[-1],
            "int_parsing",
            "Input should be a valid integer, unable to parse string as an integer",
        )
    return number


def _query_error(name: str, value: str, kind: str, msg: str) -> Exception:
    from .validation import validation_error

    return validation_error([{"type": kind, "loc": ("query", name), "msg": msg, "input": value}])


class _Numbering:
    """Gives each streamed event the next ``sequence_number`` (0, 1, 2, ...)."""

    __slots__ = ("next",)

    def __init__(self) -> None:
        self.next = 0

    def __call__(self, event: dict[str, Any]) -> dict[str, Any]:
        event["sequence_number"] = self.next
        self.next += 1
        return event


def _error_event(exc: errors.ApiError) -> dict[str, Any]:
    # vLLM's _convert_generation_error_to_streaming_response: an "error" event
    return {
        "type": "error",
        "code": str(exc.status),
        "message": exc.message,
        "param": None,
        "sequence_number": -1,
    }


class _SamplingView:
    """A Responses request seen with the chat request's sampling field names."""

    def __init__(self, req: ResponsesRequest) -> None:
        self._req = req

    def __getattr__(self, name: str) -> Any:
        req = self._req
        if name == "logprobs":
            return req.include_logprobs()
        if name == "top_logprobs":
            return req.top_logprobs if req.include_logprobs() else None
        if name == "stream":
            return bool(req.stream)
        if name in _RESPONSES_FIELDS:
            return getattr(req, name)
        return _CHAT_DEFAULTS.get(name)


_RESPONSES_FIELDS = frozenset(
    (
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
        "seed",
        "stop",
        "stop_token_ids",
        "include_stop_str_in_output",
        "ignore_eos",
        "skip_special_tokens",
        "logit_bias",
        "vllm_xargs",
        "kv_transfer_params",
        "ec_transfer_params",
        "watermarking",
    )
)
_CHAT_DEFAULTS: dict[str, Any] = {
    "n": 1,
    "echo": False,
    "min_tokens": 0,
    "spaces_between_special_tokens": True,
}


def _split(delta: OutputDelta) -> list[OutputDelta]:
    """vLLM's ``split_delta``: one delta per kind (reasoning, content, each call's pieces)."""
    kinds = (delta.reasoning is not None) + (delta.content is not None) + bool(delta.tool_calls)
    if kinds <= 1 and len({tc.index for tc in delta.tool_calls}) <= 1:
        return [delta]
    out: list[OutputDelta] = []
    if delta.reasoning is not None:
        out.append(OutputDelta(reasoning=delta.reasoning))
    if delta.content is not None:
        out.append(OutputDelta(content=delta.content))
    groups: dict[int, list[ToolCallDelta]] = {}
    for tc in delta.tool_calls:
        groups.setdefault(tc.index, []).append(tc)
    out.extend(OutputDelta(tool_calls=tcs) for tcs in groups.values())
    return out or [delta]


class _StreamState:
    """vLLM's ``SimpleStreamingEventProcessor``: opens, feeds and closes one output item at a
    time (content, reasoning or a tool call) and keeps the finished items."""

    def __init__(self, names: CallNames) -> None:
        self.names = names
        self.items: list[Any] = []
        self.output_index = 0
        self.kind: str | None = None
        self.item_id = ""
        self.text = ""
        self.logprobs: list[Any] = []
        self.call_id = ""
        self.call_name = ""
        self.call_namespace: str | None = None
        self.call_custom = False  # a custom tool's shim: its input is streamed, not arguments
        self.payload = ""  # (of a custom call: the input streamed so far)
        self.call_index: int | None = None

    def feed(self, delta: OutputDelta, logprobs: list[Any] | None) -> list[dict[str, Any]]:
        """The events of one (split) delta."""
        call = delta.tool_calls[0] if delta.tool_calls else None
        if call is not None and (call.name is not None or call.arguments is not None):
            kind = "call"
        elif delta.reasoning is not None:
            kind = "reasoning"
        elif delta.content:
            kind = "content"
        else:
            return []
        events: list[dict[str, Any]] = []
        if kind != self.kind or (
            kind == "call"
            and self.call_index is not None
            and call is not None
            and call.index != self.call_index
        ):
            events += self.close()
            events += self._open(kind, call)
        if kind == "call":
            args = "".join(tc.arguments or "" for tc in delta.tool_calls)
            if args and self.call_custom:
                self.text += args
                events += self._custom_delta(custom_input_prefix(self.text))
            elif args:
                self.text += args
                events.append(
                    {
                        "delta": args,
                        "item_id": self.item_id,
                        "output_index": self.output_index,
                        "sequence_number": -1,
                        "type": "response.function_call_arguments.delta",
                    }
                )
        elif kind == "reasoning":
            assert delta.reasoning is not None
            self.text += delta.reasoning
            events.append(
                {
                    "content_index": 0,
                    "delta": delta.reasoning,
                    "item_id": self.item_id,
                    "output_index": self.output_index,
                    "sequence_number": -1,
                    "type": "response.reasoning_text.delta",
                }
            )
        else:
            assert delta.content is not None
            self.text += delta.content
            if logprobs:
                self.logprobs.extend(logprobs)
            events.append(
                {
                    "content_index": 0,
                    "delta": delta.content,
                    "item_id": self.item_id,
                    "logprobs": [_stream_logprob(lp) for lp in logprobs or ()],
                    "output_index": self.output_index,
                    "sequence_number": -1,
                    "type": "response.output_text.delta",
                }
            )
        return events

    def _open(self, kind: str, call: ToolCallDelta | None) -> list[dict[str, Any]]:
        self.kind = kind
        self.text = ""
        index = self.output_index
        if kind == "call":
            assert call is not None
            self.call_name, self.call_namespace = self.names.resolve(call.name or "")
            # (vLLM asks whether the resolved name is a custom tool's)
            self.call_custom = self.call_name in self.names.custom
            self.item_id = new_id("ctc" if self.call_custom else "fc")
            self.call_id = call.id or new_tool_call_id()
            self.call_index = call.index
            self.payload = ""
            item: dict[str, Any]
            if self.call_custom:
                item = custom_tool_call_item(self.item_id, self.call_id, self.call_name, "")
            else:
                # vLLM builds this item as the SDK's ResponseFunctionToolCallItem, whose
                # ``created_by`` its serializer leaves out
                item = function_call_item(
                    self.item_id,
                    self.call_id,
                    self.call_name,
                    "",
                    "in_progress",
                    self.call_namespace,
                )
            return [
                {
                    "item": item,
                    "output_index": index,
                    "sequence_number": -1,
                    "type": "response.output_item.added",
                }
            ]
        if kind == "reasoning":
            self.item_id = new_id("rs")
            item = reasoning_item(self.item_id, None, "in_progress")
            part: dict[str, Any] = {"text": "", "type": "reasoning_text"}
        else:
            self.item_id = new_id("msg")
            self.logprobs = []
            item = message_item(self.item_id, [], "in_progress")
            part = output_text("", [])
        return [
            {
                "item": item,
                "output_index": index,
                "sequence_number": -1,
                "type": "response.output_item.added",
            },
            {
                "content_index": 0,
                "item_id": self.item_id,
                "output_index": index,
                "part": part,
                "sequence_number": -1,
                "type": "response.content_part.added",
            },
        ]

    def close(self) -> list[dict[str, Any]]:
        """The events that finish the open item (none when none is open)."""
        kind, index, item_id, text = self.kind, self.output_index, self.item_id, self.text
        if kind is None:
            return []
        events: list[dict[str, Any]]
        if kind == "call" and self.call_custom:
            payload = custom_input(text)
            events = self._custom_delta(payload)
            events.append(
                {
                    "input": payload,
                    "item_id": item_id,
                    "output_index": index,
                    "sequence_number": -1,
                    "type": "response.custom_tool_call_input.done",
                }
            )
            item = custom_tool_call_item(item_id, self.call_id, self.call_name, payload)
        elif kind == "call":
            item = function_call_item(
                item_id, self.call_id, self.call_name, text, "completed", self.call_namespace
            )
            events = [
                {
                    "arguments": text,
                    "item_id": item_id,
                    "output_index": index,
                    "sequence_number": -1,
                    "type": "response.function_call_arguments.done",
                    "name": self.call_name,
                }
            ]
        elif kind == "reasoning":
            part: dict[str, Any] = {"text": text, "type": "reasoning_text"}
            item = reasoning_item(item_id, text, "completed")
            events = [
                {
                    "content_index": 0,
                    "item_id": item_id,
                    "output_index": index,
                    "sequence_number": -1,
                    "text": text,
                    "type": "response.reasoning_text.done",
                },
                {
                    "content_index": 0,
                    "item_id": item_id,
                    "output_index": index,
                    "part": part,
                    "sequence_number": -1,
                    "type": "response.content_part.done",
                },
            ]
        else:
            part = output_text(text, self.logprobs or None)
            item = message_item(item_id, [part] if text else [], "completed")
            events = [
                {
                    "content_index": 0,
                    "item_id": item_id,
                    "logprobs": [],
                    "output_index": index,
                    "sequence_number": -1,
                    "text": text,
                    "type": "response.output_text.done",
                },
                {
                    "content_index": 0,
                    "item_id": item_id,
                    "output_index": index,
                    "part": part,
                    "sequence_number": -1,
                    "type": "response.content_part.done",
                },
            ]
        events.append(
            {
                "item": item,
                "output_index": index,
                "sequence_number": -1,
                "type": "response.output_item.done",
            }
        )
        self.items.append(item)
        self.output_index += 1
        self.kind = None
        self.call_index = None
        self.call_namespace = None
        self.call_custom = False
        return events

    def _custom_delta(self, payload: str) -> list[dict[str, Any]]:
        # a custom call's input so far, as a delta of what was streamed; an input that does not
        # extend it is sent whole (a delta cannot take back what was streamed)
        streamed = self.payload
        if payload == streamed:
            return []
        self.payload = payload
        return [
            {
                "delta": payload[len(streamed) :] if payload.startswith(streamed) else payload,
                "item_id": self.item_id,
                "output_index": self.output_index,
                "sequence_number": -1,
                "type": "response.custom_tool_call_input.delta",
            }
        ]


def _stream_logprob(lp: dict[str, Any]) -> dict[str, Any]:
    return {
        "token": lp["token"],
        "logprob": lp["logprob"],
        "top_logprobs": [
            {"token": t["token"], "logprob": t["logprob"]} for t in lp["top_logprobs"]
        ],
    }

"""``POST /v1/chat/completions`` with vLLM 0.32's behaviour (entrypoints/openai/chat_completion/).

Order of work as in ``OpenAIServingChat._create_chat_completion``: model check (404), template
rendering and tokenization with the prompt-length checks (400), ``max_tokens`` (or
``max_completion_tokens``) resolved against the context, sampling lowering, one engine request
per sample. With ``--reasoning-parser`` / ``--tool-call-parser`` the chat layer's
:class:`~vllm_frontend.chat.output_parser.OutputParsers` split the output into ``reasoning``,
``content`` and ``tool_calls`` (vLLM's ``Parser`` use in ``chat_completion/serving.py``).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Sequence
from functools import partial
from typing import Any

import msgspec

from vllm_frontend.chat.harmony_renderer import HarmonyRenderer
from vllm_frontend.chat.llm import ChatGeneration, ChatLlm, ChatRequest, generation_prompt
from vllm_frontend.chat.mistral_renderer import MistralChatRenderer
from vllm_frontend.chat.output_parser import OutputParsers
from vllm_frontend.chat.parsed import OutputDelta
from vllm_frontend.text.llm import TextRequest
from vllm_frontend.text.llm import refuse_request_mm_kwargs as refuse_mm_kwargs
from vllm_frontend.text.logprobs import PositionLogprobs, token_id_placeholder
from vllm_frontend.text.output import SequenceOutput
from vllm_frontend.text.sequence_stream import Update, UpdateSource, collect_finals

from . import errors
from .completions import PromptLogprob, prompt_logprobs_json
from .generation import (
    ChatUsageChunk,
    GenerationFailed,
    ServingContext,
    Usage,
    UsageChunk,
    data_parallel_rank,
    finite,
    include_usage_flags,
    notify_kv_transfer_rejected,
    request_id_for,
    sampling_request,
    trace_headers,
    usage,
    usage_chunk,
)
from .message_schema import tool_call_errors, unread_parts_error
from .sse import (
    ChoiceTemplates,
    RequestTemplates,
    SseTemplate,
    TextEvent,
    push_sequences,
    send_text_event,
    sse,
)
from .transport import PushedStreamingResponse, Request, Response, StreamSink
from .validation import validation_error

__all__ = ["ChatHandler", "chat_request", "refuse_request_mm_kwargs"]

_encode = msgspec.json.Encoder().encode


class TopLogprob(msgspec.Struct):
    """One ``top_logprobs`` entry."""

    token: str
    logprob: float | None
    bytes: list[int] | None


class ContentLogprob(msgspec.Struct):
    """One ``logprobs.content`` entry."""

    token: str
    logprob: float | None
    bytes: list[int] | None
    top_logprobs: list[TopLogprob]


class ChatLogprobs(msgspec.Struct):
    """The chat ``logprobs`` object."""

    content: list[ContentLogprob] | None


class FunctionJSON(msgspec.Struct):
    """``function`` of a message tool call."""

    name: str
    arguments: str


class ToolCallJSON(msgspec.Struct):
    """A message tool call."""

    id: str
    type: str
    function: FunctionJSON


class ChatMessage(msgspec.Struct):
    """The assistant message as vLLM dumps it (empty ``tool_calls`` dropped)."""

    role: str
    content: str | None
    refusal: None = None
    annotations: None = None
    audio: None = None
    function_call: None = None
    tool_calls: list[ToolCallJSON] | msgspec.UnsetType = msgspec.UNSET
    reasoning: str | None = None


class ReasoningTokens(msgspec.Struct):
    """``completion_tokens_details`` when a reasoning parser is configured."""

    reasoning_tokens: int


class ReasoningUsage(msgspec.Struct):
    """``usage`` of a full response with a reasoning parser configured."""

    prompt_tokens: int
    total_tokens: int
    completion_tokens: int
    prompt_tokens_details: Any = None
    completion_tokens_details: ReasoningTokens | None = None


class ReasoningUsageChunk(msgspec.Struct, omit_defaults=True):
    """Stream ``usage`` with a reasoning parser configured."""

    prompt_tokens: int
    total_tokens: int
    completion_tokens: int
    prompt_tokens_details: Any = None
    completion_tokens_details: ReasoningTokens | None = None


class ChatChoice(msgspec.Struct):
    """A choice of a full chat response."""

    index: int
    message: ChatMessage
    logprobs: ChatLogprobs | None
    finish_reason: str | None
    stop_reason: int | str | None
    token_ids: list[int] | None
    routed_experts: None = None


class ChatResponse(msgspec.Struct):
    """``chat.completion`` as vLLM's ``ChatCompletionResponse.model_dump()``."""

    id: str
    object: str
    created: int
    model: str
    choices: list[ChatChoice]
    service_tier: None
    system_fingerprint: str | None
    usage: Usage | ReasoningUsage
    prompt_logprobs: list[dict[str, PromptLogprob] | None] | None
    prompt_token_ids: list[int] | None
    prompt_text: str | None = None
    kv_transfer_params: dict[str, Any] | None = None
    ec_transfer_params: dict[str, Any] | None = None
    metrics: None = None


class RoleDelta(msgspec.Struct):
    """The first delta of a choice."""

    role: str
    content: str


class DeltaFunctionJSON(msgspec.Struct, omit_defaults=True):
    """``function`` of a streamed tool-call piece: the name first, then argument text."""

    name: str | None = None
    arguments: str | None = None


class ArgumentsOnlyJSON(msgspec.Struct):
    """``function`` of a later ``tool_choice: "required"`` piece: vLLM sets ``name`` to null."""

    name: None
    arguments: str | None


class DeltaToolCallJSON(msgspec.Struct, omit_defaults=True, kw_only=True):
    """A streamed tool-call piece (``id``/``type`` only on the first piece of a call)."""

    id: str | None = None
    type: str | None = None
    index: int
    function: DeltaFunctionJSON | ArgumentsOnlyJSON | None = None


class ContentDelta(msgspec.Struct, omit_defaults=True):
    """A content delta (``{}`` when empty, as vLLM's bare ``DeltaMessage()``)."""

    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[DeltaToolCallJSON] | None = None
    citations: list[dict[str, Any]] | None = None


class HiddenReasoningDelta(msgspec.Struct, omit_defaults=True, kw_only=True):
    """A delta whose ``reasoning`` vLLM set to null (Harmony with ``include_reasoning: false``)."""

    content: str | None = None
    reasoning: None
    tool_calls: list[DeltaToolCallJSON] | None = None


class SetContentDelta(msgspec.Struct, omit_defaults=True, kw_only=True):
    """A delta whose ``content`` vLLM's parser set, null too (hermes beside tool calls)."""

    content: str | None
    reasoning: str | None = None
    tool_calls: list[DeltaToolCallJSON] | None = None


class SetContentHiddenReasoningDelta(msgspec.Struct, omit_defaults=True, kw_only=True):
    """:class:`SetContentDelta` with ``reasoning`` set to null (``include_reasoning: false``)."""

    content: str | None
    reasoning: None
    tool_calls: list[DeltaToolCallJSON] | None = None


AnyDelta = ContentDelta | HiddenReasoningDelta | SetContentDelta | SetContentHiddenReasoningDelta
"""The delta of a running choice's chunk."""


class RoleChoice(msgspec.Struct):
    """Role (and echo) chunk choice: vLLM sets index, delta, logprobs and finish_reason."""

    index: int
    delta: RoleDelta | ContentDelta
    logprobs: None
    finish_reason: None


class DeltaChoice(msgspec.Struct):
    """A content chunk choice (no ``stop_reason`` key until the finish)."""

    index: int
    delta: AnyDelta
    logprobs: ChatLogprobs | None
    finish_reason: None
    token_ids: list[int] | None


class FinishChoice(msgspec.Struct):
    """The choice of the chunk carrying the finish reason."""

    index: int
    delta: AnyDelta
    logprobs: ChatLogprobs | None
    finish_reason: str
    stop_reason: int | str | None
    token_ids: list[int] | None


class FirstChunk(msgspec.Struct):
    """The role chunk: vLLM also sets ``prompt_token_ids`` and ``prompt_text`` (``null``)."""

    id: str
    object: str
    created: int
    model: str
    choices: list[RoleChoice]
    usage: ChatUsageChunk | ReasoningUsageChunk | msgspec.UnsetType = msgspec.UNSET
    prompt_token_ids: list[int] | None = None
    prompt_text: str | None = None


class Chunk(msgspec.Struct, omit_defaults=True):
    """A content or finish chunk."""

    id: str
    object: str
    created: int
    model: str
    choices: list[DeltaChoice | FinishChoice | RoleChoice]
    usage: ChatUsageChunk | ReasoningUsageChunk | msgspec.UnsetType = msgspec.UNSET
    system_fingerprint: str | msgspec.UnsetType | None = msgspec.UNSET


class UsageOnlyChunk(msgspec.Struct, omit_defaults=True):
    """The trailing usage chunk."""

    id: str
    object: str
    created: int
    model: str
    choices: list[DeltaChoice]
    usage: UsageChunk | ReasoningUsageChunk
    system_fingerprint: str | None = None


def _bytes(text: str) -> list[int]:
    return list(text.encode("utf-8", errors="replace"))


def chat_logprobs(
    token_ids: Sequence[int],
    positions: Sequence[PositionLogprobs | None],
    num_top: int | None,
    token_text: Any,
    as_token_ids: bool = False,
    all_candidates: bool = False,
) -> ChatLogprobs:
    """vLLM's ``_create_chat_logprobs``: each sampled token with its bytes and the first
    ``top_logprobs`` candidates (in insertion order: sampled token first, then the top-k)."""
    content: list[ContentLogprob] = []
    for i, tid in enumerate(token_ids):
        step = positions[i] if i < len(positions) else None
        lp = step.get(tid) if step is not None else None
        if step is None or lp is None:
            token = token_id_placeholder(tid) if as_token_ids else token_text(tid)
            content.append(ContentLogprob(token, -9999.0, _bytes(token), []))
            continue
        decoded = lp.decoded_token
        if as_token_ids:
            token = token_id_placeholder(tid)
        else:  # an empty decoded text (a split UTF-8 byte) stays empty, as in vLLM
            token = decoded if decoded is not None else token_text(tid)
        tops: list[TopLogprob] = []
        for j, (cid, clp) in enumerate(step.items()):
            if all_candidates or num_top == -1 or (num_top is not None and j < num_top):
                if as_token_ids:
                    ctoken = token_id_placeholder(cid)
                else:
                    ctoken = clp.decoded_token if clp.decoded_token is not None else token_text(cid)
                tops.append(TopLogprob(ctoken, finite(clp.logprob), _bytes(ctoken)))
        content.append(
            ContentLogprob(
                token,
                finite(lp.logprob),
                None if decoded is None else _bytes(decoded),
                tops,
            )
        )
    return ChatLogprobs(content)


class ChatHandler:
    """The ``/v1/chat/completions`` route handler: the request onto one chat-layer call, its
    text updates onto the response."""

    def __init__(
        self,
        ctx: ServingContext,
        parse: Any,
        parsers: OutputParsers | None = None,
        *,
        harmony: HarmonyRenderer | None = None,
        mistral: MistralChatRenderer | None = None,
    ) -> None:
        """``parse(body: bytes)`` returns the decoded ``ChatCompletionRequest``; ``parsers``
        are the configured reasoning / tool-call parsers; ``harmony`` renders a gpt-oss
        model's prompts, ``mistral`` a model's with ``--tokenizer-mode mistral``."""
        self.ctx = ctx
        self._parse = parse
        self.chat = ChatLlm(
            ctx.text,
            ctx.chat_renderer,
            parsers,
            response_role=ctx.response_role,
            harmony=harmony,
            mistral=mistral,
            media=ctx.media,
        )
        """The chat layer's facade."""

    def __call__(self, request: Request) -> Awaitable[Response | PushedStreamingResponse]:
        """Handle one request: the awaitable response (errors are raised, when called or
        awaited; the app maps them). Not a coroutine of its own: one frame less per request."""
        req = self._parse(request.body)
        if not self.ctx.has_kv_connector:
            return self._handle(request, req)
        return self._handle_kv(request, req)

    async def _handle_kv(self, request: Request, req: Any) -> Response | PushedStreamingResponse:
        # With a KV connector, a request refused on its way tells the connector.
        try:
            return await self._handle(request, req)
        except Exception:
            await notify_kv_transfer_rejected(self.ctx, request, req)
            raise

    async def _handle(self, request: Request, req: Any) -> Response | PushedStreamingResponse:
        ctx = self.ctx
        refuse_request_mm_kwargs(req)
        ctx.check_model(req.model)
        if (report := unread_parts_error(req.messages)) is not None:
            raise errors.BadRequest(report)
        if calls_refused := tool_call_errors(req.messages):
            raise validation_error([{**e, "loc": ("body", *e["loc"])} for e in calls_refused])
        request_id = request_id_for("chatcmpl", request, getattr(req, "request_id", None))
        chat_req = chat_request(req, request, request_id)
        chat_req.text.trace_headers = trace_headers(ctx, request)
        gen = await self.chat.generate(chat_req)
        if req.stream:

            def produce(sink: StreamSink) -> Awaitable[None]:
                return self._stream(sink, req, request_id, gen)

            return PushedStreamingResponse(produce, keep_alive_interval=ctx.sse_keep_alive_interval)
        body = await self._full(req, request_id, gen)
        return Response(body)

    def _logprobs(self, req: Any, gen: ChatGeneration, seq: SequenceOutput) -> ChatLogprobs | None:
        if not req.logprobs:
            return None
        return chat_logprobs(
            seq.token_ids,
            seq.logprobs or [],
            req.top_logprobs,
            gen.text.token_text(),
            self.ctx.as_token_ids(req),
            all_candidates=bool(req.logprob_token_ids),
        )

    async def _full(self, req: Any, request_id: str, gen: ChatGeneration) -> bytes:
        ctx = self.ctx
        created = int(time.time())
        n = req.n or 1
        role, echo_text = gen.role, gen.echo_text
        [prompt] = gen.text.prompts
        got = await collect_finals(gen.text.source(0))
        # The finished choices by index (beam search may return fewer than n).
        finals, cached, kv_transfer_params = got.outputs, got.cached, got.kv_transfer_params
        return_ids = bool(getattr(req, "return_token_ids", False))
        choices: list[ChatChoice] = []
        prompt_lps = None
        reasoning_tokens = 0
        if not gen.text.beam_search:
            assert len(finals) == n
        for idx, seq in sorted(finals.items()):
            if seq.finish_reason == "error":
                raise GenerationFailed()
            if seq.prompt_logprobs is not None:
                prompt_lps = seq.prompt_logprobs
            content: str | None = seq.text
            message = ChatMessage(role=role, content=content)
            finish_reason = seq.finish_reason or "stop"
            hide = False
            if (parser := gen.new_parser()) is not None:
                parsed = parser.parse(seq.text, seq.token_ids)
                message.content = parsed.content
                if parser.forced_choice is not None:
                    # vLLM: a forced call's message has "" content, and "required" finishes
                    # with tool_calls whenever the engine stopped (named ones with "stop").
                    message.content = parsed.content or ""
                    if parser.forced_choice.required and seq.finish_reason == "stop":
                        finish_reason = "tool_calls"
                if req.include_reasoning:
                    message.reasoning = parsed.reasoning
                hide = not req.include_reasoning  # vLLM then also drops logprobs and token ids
                if parsed.tool_calls:
                    message.tool_calls = [
                        ToolCallJSON(c.id, "function", FunctionJSON(c.name, c.arguments))
                        for c in parsed.tool_calls
                    ]
                    if req.parallel_tool_calls is False:  # maybe_filter_parallel_tool_calls
                        message.tool_calls = message.tool_calls[:1]
                if parsed.tools_called:
                    finish_reason = "tool_calls"
                reasoning_tokens += parser.count_reasoning_tokens(seq.token_ids)
            if echo_text is not None:
                message.content = echo_text + (message.content or "")
            choices.append(
                ChatChoice(
                    index=idx,
                    message=message,
                    logprobs=None if hide else self._logprobs(req, gen, seq),
                    finish_reason=finish_reason,
                    stop_reason=seq.stop_reason,
                    token_ids=list(seq.token_ids) if return_ids and not hide else None,
                )
            )
        num_gen = sum(s.num_output_tokens for s in finals.values())
        # vLLM's chat counts the prompt tokens written to the prefix cache too (always a number)
        full_usage: Usage | ReasoningUsage = (
            usage(
                len(prompt.token_ids),
                num_gen,
                cached,
                got.source.num_cache_creation_tokens,
                prompt.mm_token_counts,
            )
            if ctx.enable_prompt_tokens_details
            else usage(len(prompt.token_ids), num_gen)
        )
        if gen.has_reasoning:
            full_usage = ReasoningUsage(
                full_usage.prompt_tokens,
                full_usage.total_tokens,
                full_usage.completion_tokens,
                full_usage.prompt_tokens_details,
                ReasoningTokens(reasoning_tokens),
            )
        response = ChatResponse(
            id=request_id,
            object="chat.completion",
            created=created,
            model=ctx.model_name_for(req.model),
            choices=choices,
            service_tier=None,
            system_fingerprint=ctx.system_fingerprint,
            usage=full_usage,
            prompt_logprobs=prompt_logprobs_json(prompt_lps),
            prompt_token_ids=list(prompt.token_ids) if return_ids else None,
            prompt_text=prompt.text if req.return_prompt_text else None,
            kv_transfer_params=kv_transfer_params,
            ec_transfer_params=got.ec_transfer_params,
        )
        return _encode(response)

    async def _stream(
        self, sink: StreamSink, req: Any, request_id: str, gen: ChatGeneration
    ) -> None:
        chunks = _StreamChunks(self, req, request_id, gen)
        await push_sequences(
            sink,
            chunks.make_sources,
            chunks.render,
            chunks.usage,
            chunks.text_event,
            counts_unused=not self.ctx.enable_prompt_tokens_details,
        )


class _StreamChunks:
    """The SSE events of one streamed chat request: role (and echo) first, one per text update,
    then usage."""

    __slots__ = (
        "_cached",
        "_continuous",
        "_created",
        "_ctx",
        "_echo_text",
        "_finish_sent",
        "_first",
        "_gen",
        "_handler",
        "_include_usage",
        "_model",
        "_n",
        "_named_tool",
        "_num_prompt",
        "_num_tokens",
        "_parsers",
        "_plain",
        "_prompt",
        "_reasoning_details",
        "_req",
        "_request_id",
        "_return_ids",
        "_role",
        "_templates",
        "_text_only",
        "sources",
    )

    def __init__(
        self,
        handler: ChatHandler,
        req: Any,
        request_id: str,
        gen: ChatGeneration,
    ) -> None:
        ctx = handler.ctx
        self._handler = handler
        self._gen = gen
        [prompt] = gen.text.prompts
        self._ctx = ctx
        self._req = req
        self._request_id = request_id
        self._prompt = prompt
        self._role = gen.role
        self._echo_text = gen.echo_text
        self._created = int(time.time())
        self._model = ctx.model_name_for(req.model)
        self._n = n = req.n or 1
        self._include_usage, self._continuous = include_usage_flags(
            getattr(req, "stream_options", None), ctx.enable_force_include_usage
        )
        self._return_ids = bool(getattr(req, "return_token_ids", False))
        self._num_prompt = len(prompt.token_ids)
        self._num_tokens = [0] * n
        self._finish_sent = [False] * n
        self._parsers = [gen.new_parser() for _ in range(n)]
        self._reasoning_details = gen.has_reasoning
        self._named_tool = isinstance(req.tool_choice, dict)
        self._cached: int | None = None
        self.sources: list[UpdateSource] = []
        """The prompt's update source, once :meth:`make_sources` made it."""
        self._first = True
        # Text-only chunks come from a per-choice template (see SseTemplate).
        self._plain = not self._return_ids and not self._continuous
        # ...and with nothing else per chunk (no logprobs, no parser) a running choice's update
        # goes straight to it (render's first branch).
        self._text_only = self._plain and not req.logprobs and all(p is None for p in self._parsers)
        # Bound to values, not to self: a closure over self would be a reference cycle.
        self._templates = ChoiceTemplates(
            partial(_text_template, request_id, self._created, self._model)
        )

    def _heads(self) -> bytes:
        # The role chunk of every choice (and the echoed last message), before any content.
        req, prompt = self._req, self._prompt
        out: list[bytes] = []
        for i in range(self._n):
            head = FirstChunk(
                id=self._request_id,
                object=_OBJECT,
                created=self._created,
                model=self._model,
                choices=[RoleChoice(i, RoleDelta(self._role, ""), None, None)],
                prompt_token_ids=list(prompt.token_ids) if self._return_ids else None,
                prompt_text=prompt.text if req.return_prompt_text else None,
            )
            if self._continuous:
                head.usage = self._no_completion_usage()
            out.append(sse(head))
        if self._echo_text:
            for i in range(self._n):
                echo_chunk = Chunk(
                    id=self._request_id,
                    object=_OBJECT,
                    created=self._created,
                    model=self._model,
                    choices=[RoleChoice(i, ContentDelta(self._echo_text), None, None)],
                )
                if self._continuous:
                    echo_chunk.usage = self._no_completion_usage()
                out.append(sse(echo_chunk))
        return b"".join(out)

    def _no_completion_usage(self) -> ChatUsageChunk | ReasoningUsageChunk:
        # The continuous usage of the role and echo chunks (0 reasoning tokens with a parser).
        num_prompt = self._num_prompt
        if self._reasoning_details:
            return ReasoningUsageChunk(num_prompt, num_prompt, 0, None, ReasoningTokens(0))
        return ChatUsageChunk(num_prompt, num_prompt, 0)

    def text_event(self, idx: int) -> TextEvent | None:
        """Choice ``idx``'s text-only event while a running update that is new text alone can
        go out as that event (after the role chunks, with no parser or logprobs, until the
        choice's finish chunk)."""
        if not self._text_only or self._first or self._finish_sent[idx]:
            return None
        template = self._templates.get(idx)
        return None if template is None else (template, self._num_tokens)

    def make_sources(self) -> list[UpdateSource]:
        """The generation's update sources (kept: the usage chunk reads the cache writes)."""
        self.sources = self._gen.text.sources()
        return self.sources

    def send_text(self, sink: StreamSink, idx: int, text: str, num_tokens: int) -> bool:
        """Send the event of a running choice's update that is new text alone, as
        :meth:`render` would, from the choice's template; False where :meth:`render` must."""
        return send_text_event(self.text_event(idx), sink, idx, text, num_tokens)

    def render(self, sink: StreamSink, p: int, update: Update) -> None:
        """Send the event(s) of one text update (the role chunks before the first)."""
        idx, seq, num_cached = update
        if self._first:
            self._cached = num_cached
            self._first = False
            sink.send(self._heads())
        elif seq.finish_reason is None and self.send_text(sink, idx, seq.text, len(seq.token_ids)):
            return
        event = self._event(idx, seq)
        if event is not None:
            sink.send(event)

    def _event(self, idx: int, seq: SequenceOutput) -> bytes | None:
        req = self._req
        num_tokens = self._num_tokens
        if self._finish_sent[idx]:
            return None
        if seq.finish_reason == "error":
            raise GenerationFailed()
        logprobs = self._handler._logprobs(req, self._gen, seq)
        if not seq.text and not seq.token_ids and not num_tokens[idx]:
            return None  # vLLM: no empty chunks before the first token
        num_tokens[idx] += len(seq.token_ids)
        finish_reason = seq.finish_reason
        parser = self._parsers[idx]
        if self._plain and finish_reason is None and logprobs is None and parser is None:
            # A running choice's chunk that only carries new text (the common case)
            event = self._templates.render(idx, seq.text)
            if event is not None:
                return event
        delta: AnyDelta = ContentDelta(seq.text)
        token_ids = list(seq.token_ids) if self._return_ids else None
        if parser is not None:
            parsed = parser.feed(
                seq.text,
                seq.token_ids,
                self._prompt.token_ids,
                finished=finish_reason is not None,
            )
            hide = not req.include_reasoning  # no logprobs/ids that show reasoning
            if hide:
                logprobs = token_ids = None
            if parsed is None:
                if finish_reason is None and logprobs is None and token_ids is None:
                    return None
                parsed = OutputDelta()
            elif (
                self._plain
                and finish_reason is None
                and logprobs is None
                and parsed.content is not None
                and not parsed.tool_calls
                and parsed.reasoning is None
                and not parsed.reasoning_hidden
                and parsed.citations is None
            ):
                # Content alone (e.g. text before a tool call): the same chunk as parser-less
                # text, so from the same template.
                event = self._templates.render(idx, parsed.content)
                if event is not None:
                    return event
            if req.parallel_tool_calls is False:  # maybe_filter_parallel_tool_calls
                parsed.tool_calls = [tc for tc in parsed.tool_calls if tc.index == 0]
            delta = _delta_json(parsed, null_names=parser.null_later_names)
            if parser.tool_calls_streamed and not self._named_tool and finish_reason == "stop":
                finish_reason = "tool_calls"
        choice: DeltaChoice | FinishChoice
        if finish_reason is None:
            choice = DeltaChoice(idx, delta, logprobs, None, token_ids)
        else:
            choice = FinishChoice(idx, delta, logprobs, finish_reason, seq.stop_reason, token_ids)
            self._finish_sent[idx] = True
        chunk = Chunk(id=self._request_id, object=_OBJECT, created=self._created,
                      model=self._model, choices=[choice])  # fmt: skip
        ctx = self._ctx
        if (
            not self._include_usage
            and ctx.system_fingerprint is not None
            and seq.finish_reason is not None
        ):
            chunk.system_fingerprint = ctx.system_fingerprint
        if self._continuous:
            num_prompt = self._num_prompt
            chunk.usage = ChatUsageChunk(num_prompt, num_prompt + num_tokens[idx], num_tokens[idx])
            if self._reasoning_details and parser is not None:
                chunk.usage = ReasoningUsageChunk(
                    num_prompt,
                    num_prompt + num_tokens[idx],
                    num_tokens[idx],
                    None,
                    ReasoningTokens(parser.streamed_reasoning_tokens()),
                )
        return sse(chunk)

    def usage(self) -> bytes | None:
        """The final usage event, when the request asked for it."""
        if not self._include_usage:
            return None
        ctx = self._ctx
        if ctx.enable_prompt_tokens_details:
            written = self.sources[0].num_cache_creation_tokens
            last_usage: UsageChunk | ReasoningUsageChunk = usage_chunk(
                self._num_prompt,
                sum(self._num_tokens),
                self._cached,
                written,
                self._prompt.mm_token_counts,
            )
        else:
            last_usage = usage_chunk(self._num_prompt, sum(self._num_tokens))
        if self._reasoning_details:
            last_usage = ReasoningUsageChunk(
                last_usage.prompt_tokens,
                last_usage.total_tokens,
                last_usage.completion_tokens,
                last_usage.prompt_tokens_details,
                ReasoningTokens(
                    sum(p.streamed_reasoning_tokens() for p in self._parsers if p is not None)
                ),
            )
        return sse(
            UsageOnlyChunk(
                id=self._request_id,
                object=_OBJECT,
                created=self._created,
                model=self._model,
                choices=[],
                usage=last_usage,
                system_fingerprint=ctx.system_fingerprint,
            )
        )


_OBJECT = "chat.completion.chunk"


def _text_chunk(request_id: str, created: int, key: tuple[str, int], text: str) -> Chunk:
    """A running choice's chunk that carries only new content (``key``: model, choice)."""
    model, index = key
    return Chunk(
        id=request_id,
        object=_OBJECT,
        created=created,
        model=model,
        choices=[DeltaChoice(index, ContentDelta(text), None, None, None)],
    )


_TEXT_TEMPLATES = RequestTemplates(_text_chunk)


def _text_template(request_id: str, created: int, model: str, index: int) -> SseTemplate | None:
    """The event of a running choice's chunk that carries only new content."""
    return _TEXT_TEMPLATES.template(request_id, created, (model, index))


def _delta_json(delta: OutputDelta, null_names: bool = False) -> AnyDelta:
    """A parser delta as vLLM's ``DeltaMessage`` JSON (tool-call pieces in vLLM's shape);
    ``null_names``: later pieces say ``"name": null`` (vLLM's
    ``extract_required_tool_call_streaming``)."""
    calls = []
    for tc in delta.tool_calls:
        function: DeltaFunctionJSON | ArgumentsOnlyJSON | None = None
        if null_names and tc.id is None:
            function = ArgumentsOnlyJSON(None, tc.arguments)
        elif tc.name is not None or tc.arguments is not None:
            function = DeltaFunctionJSON(tc.name, tc.arguments)
        calls.append(
            DeltaToolCallJSON(
                id=tc.id,
                type="function" if tc.id is not None or tc.typed else None,
                index=tc.index,
                function=function,
            )
        )
    if delta.content_set and delta.citations is None:
        if delta.reasoning_hidden:
            return SetContentHiddenReasoningDelta(
                content=delta.content, reasoning=None, tool_calls=calls or None
            )
        return SetContentDelta(
            content=delta.content, reasoning=delta.reasoning, tool_calls=calls or None
        )
    if delta.reasoning_hidden:
        return HiddenReasoningDelta(content=delta.content, reasoning=None, tool_calls=calls or None)
    return ContentDelta(delta.content, delta.reasoning, calls or None, delta.citations)


def chat_request(req: Any, request: Request, request_id: str) -> ChatRequest:
    """A decoded ``ChatCompletionRequest`` in the chat layer's terms (``request``: its HTTP
    request, for the data-parallel rank header)."""
    if req.max_completion_tokens is not None:
        max_tokens, max_tokens_param = req.max_completion_tokens, "max_completion_tokens"
    else:
        max_tokens, max_tokens_param = req.max_tokens, "max_tokens"
    # The first fields positional: a call's positionals + 2 x keywords at most 30 (more go
    # through a keyword dict: CPython 3.11 compiles them to CALL_FUNCTION_EX, ~1 us a call).
    return ChatRequest(
        req.messages,
        TextRequest(
            request_id,
            sampling_request(req, chat=True),
            None,  # prompt: the chat layer sets it from the rendered template
            max_tokens,
            max_tokens_param,
            bool(req.add_special_tokens),  # add_special_tokens
            truncate_prompt_tokens=req.truncate_prompt_tokens,
            truncation_side=req.truncation_side,
            structured_outputs=req.structured_outputs,
            response_format=req.response_format,
            repetition_detection=req.repetition_detection,
            use_beam_search=bool(req.use_beam_search),
            length_penalty=req.length_penalty,
            priority=getattr(req, "priority", 0) or 0,
            data_parallel_rank=data_parallel_rank(request),
            cache_salt=getattr(req, "cache_salt", None),
            model=req.model,
            defer_engine_checks=bool(req.stream),
        ),
        tools=getattr(req, "tools", None),
        tool_choice=getattr(req, "tool_choice", None),
        documents=getattr(req, "documents", None),
        logprobs=bool(getattr(req, "logprobs", False)),
        add_generation_prompt=generation_prompt(
            getattr(req, "add_generation_prompt", None),
            getattr(req, "continue_final_message", False),
        ),
        continue_final_message=bool(getattr(req, "continue_final_message", False)),
        chat_template=getattr(req, "chat_template", None),
        chat_template_kwargs=getattr(req, "chat_template_kwargs", None),
        reasoning_effort=getattr(req, "reasoning_effort", None),
        include_reasoning=bool(req.include_reasoning),
        parallel_tool_calls=req.parallel_tool_calls,
        echo=bool(req.echo),
        mm_processor_kwargs=getattr(req, "mm_processor_kwargs", None),
        media_io_kwargs=getattr(req, "media_io_kwargs", None),
    )


def refuse_request_mm_kwargs(req: Any) -> None:
    """vLLM's ``validate_request_mm_kwargs`` on a request's fields (see the text layer's)."""
    refuse_mm_kwargs(
        getattr(req, "mm_processor_kwargs", None), getattr(req, "media_io_kwargs", None)
    )

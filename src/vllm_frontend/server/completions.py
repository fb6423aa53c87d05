"""``POST /v1/completions`` with vLLM 0.32's behaviour (vllm/entrypoints/openai/completion/).

Order of work as in ``OpenAIServingCompletion._create_completion``: model check (404), prompt
rendering and its length checks (400), ``max_tokens`` resolved against the context, sampling
lowering (400 on invalid values), then one engine request per prompt and sample. Response and
chunk shapes reproduce vLLM's pydantic output: full responses dump every field (``null`` when
unset); stream chunks dump only the fields vLLM sets explicitly, which are the ones built below.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Sequence
from functools import partial
from typing import Any

import msgspec

from vllm_frontend.text.llm import TextGeneration, TextRequest
from vllm_frontend.text.logprobs import PositionLogprobs, token_id_placeholder
from vllm_frontend.text.output import SequenceOutput
from vllm_frontend.text.prompts import PreparedPrompt
from vllm_frontend.text.sequence_stream import Update, collect_finals

from . import errors
from .generation import (
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

__all__ = ["CompletionsHandler", "text_request"]

_encode = msgspec.json.Encoder().encode


class CompletionLogProbs(msgspec.Struct):
    """The legacy OpenAI completions ``logprobs`` object."""

    text_offset: list[int]
    token_logprobs: list[float | None]
    tokens: list[str]
    top_logprobs: list[dict[str, float | None] | None]


class PromptLogprob(msgspec.Struct):
    """One entry of ``prompt_logprobs`` (vLLM's ``Logprob`` dataclass)."""

    logprob: float | None
    rank: int | None
    decoded_token: str | None


class CompletionChoice(msgspec.Struct):
    """A choice of a full response (every field, as ``model_dump()``)."""

    index: int
    text: str
    logprobs: CompletionLogProbs | None
    finish_reason: str | None
    stop_reason: int | str | None
    token_ids: list[int] | None
    prompt_logprobs: list[dict[str, PromptLogprob] | None] | None
    prompt_token_ids: list[int] | None
    routed_experts: None = None


class CompletionResponse(msgspec.Struct):
    """``text_completion`` as vLLM's ``CompletionResponse.model_dump()``."""

    id: str
    object: str
    created: int
    model: str
    choices: list[CompletionChoice]
    service_tier: None
    system_fingerprint: str | None
    usage: Usage
    kv_transfer_params: dict[str, Any] | None = None
    ec_transfer_params: dict[str, Any] | None = None
    metrics: None = None


class StreamChoice(msgspec.Struct):
    """A stream choice: vLLM sets all seven fields explicitly, so all are written."""

    index: int
    text: str
    logprobs: CompletionLogProbs | None
    finish_reason: str | None
    stop_reason: int | str | None
    prompt_token_ids: list[int] | None
    token_ids: list[int] | None


class StreamChunk(msgspec.Struct, omit_defaults=True):
    """A stream chunk; ``usage`` only with continuous usage stats."""

    id: str
    object: str
    created: int
    model: str
    choices: list[StreamChoice]
    usage: UsageChunk | msgspec.UnsetType = msgspec.UNSET
    system_fingerprint: str | msgspec.UnsetType | None = msgspec.UNSET


class UsageStreamChunk(msgspec.Struct, omit_defaults=True):
    """The trailing usage chunk (vLLM dumps it with ``exclude_none``)."""

    id: str
    object: str
    created: int
    model: str
    choices: list[StreamChoice]
    usage: UsageChunk
    system_fingerprint: str | None = None


def prompt_logprobs_json(
    entries: Sequence[PositionLogprobs | None] | None,
) -> list[dict[str, PromptLogprob] | None] | None:
    """``prompt_logprobs`` as vLLM dumps ``list[dict[int, Logprob] | None]`` (-inf → -9999)."""
    if entries is None:
        return None
    out: list[dict[str, PromptLogprob] | None] = []
    for entry in entries:
        if entry is None:
            out.append(None)
            continue
        out.append(
            {
                str(tid): PromptLogprob(finite(lp.logprob), lp.rank, lp.decoded_token)
                for tid, lp in entry.items()
            }
        )
    return out


def completion_logprobs(
    token_ids: Sequence[int],
    positions: Sequence[PositionLogprobs | None],
    num_top: int,
    token_text: Any,
    initial_offset: int = 0,
    as_token_ids: bool = False,
    all_candidates: bool = False,
) -> CompletionLogProbs:
    """vLLM's ``_create_completion_logprobs``: per token its string, logprob, the top
    ``num_top + 1`` candidates (by insertion order: sampled first, then top-k) and its offset.
    ``text_offset`` advances by the length of each token string, not the emitted text."""
    offsets: list[int] = []
    token_lps: list[float | None] = []
    tokens: list[str] = []
    tops: list[dict[str, float | None] | None] = []
    last_len = 0
    for i, tid in enumerate(token_ids):
        step = positions[i] if i < len(positions) else None
        if step is None:
            token = token_id_placeholder(tid) if as_token_ids else token_text(tid)
            tokens.append(token)
            token_lps.append(None)
            tops.append(None)
        else:
            lp = step.get(tid)
            if lp is None:
                token = token_id_placeholder(tid) if as_token_ids else token_text(tid)
                token_lps.append(None)
            else:
                token = _decoded(lp.decoded_token, tid, token_text, as_token_ids)
                token_lps.append(finite(lp.logprob))
            tokens.append(token)
            top: dict[str, float | None] = {}
            for j, (cid, clp) in enumerate(step.items()):
                if all_candidates or num_top == -1 or num_top >= j:
                    top[_decoded(clp.decoded_token, cid, token_text, as_token_ids)] = finite(
                        clp.logprob
                    )
            tops.append(top)
        offsets.append(initial_offset if not offsets else offsets[-1] + last_len)
        last_len = len(token)
    return CompletionLogProbs(offsets, token_lps, tokens, tops)


def _decoded(decoded: str | None, tid: int, token_text: Any, as_token_ids: bool) -> str:
    if as_token_ids:
        return token_id_placeholder(tid)
    if decoded is not None:
        return decoded
    return str(token_text(tid))


class CompletionsHandler:
    """The ``/v1/completions`` route handler: the request onto one text-layer call, its text
    updates onto the response."""

    def __init__(self, ctx: ServingContext, parse: Any) -> None:
        """``parse(body: bytes)`` returns the decoded ``CompletionRequest`` (server/protocol)."""
        self.ctx = ctx
        self._parse = parse

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
        if req.stream and req.use_beam_search:
            raise errors.BadRequest("Streaming is not currently supported with beam search")
        ctx.check_model(req.model)
        request_id = request_id_for("cmpl", request, getattr(req, "request_id", None))
        text_req = text_request(req, request, request_id)
        text_req.trace_headers = trace_headers(ctx, request)
        gen = await ctx.text.generate(text_req)
        created = int(time.time())
        if req.stream:

            def produce(sink: StreamSink) -> Awaitable[None]:
                return self._stream(sink, req, request_id, created, gen)

            return PushedStreamingResponse(
                produce, keep_alive_interval=self.ctx.sse_keep_alive_interval
            )
        body = await self._full(req, request_id, created, gen)
        return Response(body)

    async def _full(self, req: Any, request_id: str, created: int, gen: TextGeneration) -> bytes:
        ctx = self.ctx
        n = req.n or 1
        prompts = gen.prompts
        # Per prompt, its finished choices by index (beam search may return fewer than n).
        finals: list[dict[int, SequenceOutput]]
        cached: list[int | None]
        kv_params: list[dict[str, Any] | None]
        ec_params: list[dict[str, Any] | None]
        if len(prompts) == 1:  # (the common request: no per-prompt task or closure)
            got = await collect_finals(gen.source(0))
            finals, cached = [got.outputs], [got.cached]
            kv_params, ec_params = [got.kv_transfer_params], [got.ec_transfer_params]
        else:
            finals = [{} for _ in prompts]
            cached = [None] * len(prompts)
            kv_params = [None] * len(prompts)
            ec_params = [None] * len(prompts)

            async def run(i: int) -> None:
                got = await collect_finals(gen.source(i))
                finals[i] = got.outputs
                cached[i] = got.cached
                kv_params[i] = got.kv_transfer_params
                ec_params[i] = got.ec_transfer_params

            try:
                async with asyncio.TaskGroup() as tg:
                    for i in range(len(prompts)):
                        tg.create_task(run(i))
            except ExceptionGroup as group:
                # vLLM merges the prompts' generators: the first failure is the request's (e.g. a
                # beam search's step refused by the engine's limits, which is a 400).
                raise group.exceptions[0] from None

        choices: list[CompletionChoice] = []
        num_prompt = num_gen = 0
        echo = bool(req.echo)
        return_ids = bool(getattr(req, "return_token_ids", False))
        for i, prompt in enumerate(prompts):
            if not gen.beam_search:
                assert len(finals[i]) == n
            for _, seq in sorted(finals[i].items()):
                if seq.finish_reason == "error":
                    raise GenerationFailed()
                choices.append(
                    self._full_choice(req, gen, len(choices), prompt, seq, echo, return_ids)
                )
                num_gen += seq.num_output_tokens
            num_prompt += len(prompt.token_ids)
        details = cached[-1] if ctx.enable_prompt_tokens_details else None
        response = CompletionResponse(
            id=request_id,
            object="text_completion",
            created=created,
            model=ctx.model_name_for(req.model),
            choices=choices,
            service_tier=None,
            system_fingerprint=ctx.system_fingerprint,
            usage=usage(num_prompt, num_gen, details),
            kv_transfer_params=kv_params[0],  # vLLM returns the first prompt's
            ec_transfer_params=ec_params[0],
        )
        return _encode(response)

    def _full_choice(
        self,
        req: Any,
        gen: TextGeneration,
        index: int,
        prompt: PreparedPrompt,
        seq: SequenceOutput,
        echo: bool,
        return_ids: bool,
    ) -> CompletionChoice:
        prompt_lps = seq.prompt_logprobs
        out_lps: Sequence[PositionLogprobs | None] | None
        if echo:
            prompt_text = "" if return_ids else self.ctx.text.prompt_text(prompt)
            if req.max_tokens == 0:
                token_ids: list[int] = list(prompt.token_ids)
                out_lps = prompt_lps
                text = prompt_text
            else:
                token_ids = [*prompt.token_ids, *seq.token_ids]
                out_lps = (
                    None if req.logprobs is None else [*(prompt_lps or []), *(seq.logprobs or [])]
                )
                text = prompt_text + seq.text
        else:
            token_ids = seq.token_ids
            out_lps = seq.logprobs
            text = seq.text
        logprobs = None
        if req.logprobs is not None:
            logprobs = completion_logprobs(
                token_ids,
                out_lps or [],
                req.logprobs,
                gen.token_text(),
                as_token_ids=self.ctx.as_token_ids(req),
                all_candidates=bool(req.logprob_token_ids),
            )
        return CompletionChoice(
            index=index,
            text=text,
            logprobs=logprobs,
            finish_reason=seq.finish_reason,
            stop_reason=seq.stop_reason,
            token_ids=seq.token_ids if return_ids else None,
            prompt_logprobs=prompt_logprobs_json(prompt_lps),
            prompt_token_ids=list(prompt.token_ids) if return_ids else None,
        )

    async def _stream(
        self, sink: StreamSink, req: Any, request_id: str, created: int, gen: TextGeneration
    ) -> None:
        chunks = _StreamChunks(self, req, request_id, created, gen.prompts)
        await push_sequences(
            sink,
            gen.sources,
            chunks.render,
            chunks.usage,
            chunks.text_event,
            counts_unused=not self.ctx.enable_prompt_tokens_details,
        )


class _StreamChunks:
    """The SSE events of one streamed completion request: one per text update, then usage."""

    __slots__ = (
        "_as_token_ids",
        "_cached",
        "_continuous",
        "_created",
        "_ctx",
        "_echo",
        "_echoed",
        "_first",
        "_include_usage",
        "_model",
        "_n",
        "_next_offsets",
        "_num_prompt",
        "_num_tokens",
        "_plain",
        "_prompts",
        "_req",
        "_request_id",
        "_return_ids",
        "_templates",
        "_text_only",
    )

    def __init__(
        self,
        handler: CompletionsHandler,
        req: Any,
        request_id: str,
        created: int,
        prompts: list[PreparedPrompt],
    ) -> None:
        ctx = handler.ctx
        self._ctx = ctx
        self._req = req
        self._request_id = request_id
        self._created = created
        self._model = ctx.model_name_for(req.model)
        self._prompts = prompts
        self._n = n = req.n or 1
        self._include_usage, self._continuous = include_usage_flags(
            getattr(req, "stream_options", None), ctx.enable_force_include_usage
        )
        total = n * len(prompts)
        self._next_offsets = [0] * total
        self._num_tokens = [0] * total
        self._echoed = [False] * total
        self._num_prompt = [0] * len(prompts)
        self._cached: int | None = None
        self._first = True
        self._echo = bool(req.echo)
        self._return_ids = bool(getattr(req, "return_token_ids", False))
        self._as_token_ids = ctx.as_token_ids(req)
        # Text-only chunks come from a per-choice template (see SseTemplate).
        self._plain = req.logprobs is None and not self._return_ids and not self._continuous
        # ...and for one prompt without echo, a running choice's text update goes straight to
        # it once the first update has been through the whole of render.
        self._text_only = self._plain and not self._echo and len(prompts) == 1
        # Bound to values, not to self: a closure over self would be a reference cycle.
        self._templates = ChoiceTemplates(partial(_text_template, request_id, created, self._model))

    def text_event(self, idx: int) -> TextEvent | None:
        """Choice ``idx``'s text-only event while a running update that is new text alone can
        go out as that event (after the first chunk, with nothing else per chunk)."""
        if not self._text_only or self._first:
            return None
        template = self._templates.get(idx)
        return None if template is None else (template, self._num_tokens)

    def send_text(self, sink: StreamSink, idx: int, text: str, num_tokens: int) -> bool:
        """Send the event of a running choice's update that is new text alone, as
        :meth:`render` would, from the choice's template; False where :meth:`render` must."""
        return send_text_event(self.text_event(idx), sink, idx, text, num_tokens)

    def render(self, sink: StreamSink, p: int, update: Update) -> None:
        """Send the event of one text update of prompt ``p`` (if it has one)."""
        idx, seq, num_cached = update
        if seq.finish_reason is None and self.send_text(sink, idx, seq.text, len(seq.token_ids)):
            return
        if seq.finish_reason == "error":
            raise GenerationFailed()
        req = self._req
        prompt = self._prompts[p]
        self._num_prompt[p] = len(prompt.token_ids)
        if self._first:
            self._cached = num_cached
            self._first = False
        i = idx + p * self._n
        prompt_ids_out: list[int] | None = None
        if self._echo and not self._echoed[i]:
            prompt_text = "" if self._return_ids else self._ctx.text.prompt_text(prompt)
            if req.max_tokens == 0:
                text = prompt_text
                delta_ids: list[int] = list(prompt.token_ids)
                lps: Sequence[PositionLogprobs | None] | None = seq.prompt_logprobs
            else:
                text = prompt_text + seq.text
                delta_ids = [*prompt.token_ids, *seq.token_ids]
                lps = [*(seq.prompt_logprobs or []), *(seq.logprobs or [])]
            prompt_ids_out = list(prompt.token_ids)
            self._echoed[i] = True
        else:
            text = seq.text
            delta_ids = seq.token_ids
            lps = seq.logprobs
            if not self._echoed[i] and self._return_ids:
                prompt_ids_out = list(prompt.token_ids)
                self._echoed[i] = True
            if not text and not delta_ids and not self._num_tokens[i]:
                return  # vLLM: no empty chunks before the first token
        logprobs = None
        if req.logprobs is not None:
            logprobs = completion_logprobs(
                delta_ids,
                lps or [],
                req.logprobs,
                self._ctx.text.strings().token,
                initial_offset=self._next_offsets[i],
                as_token_ids=self._as_token_ids,
                all_candidates=bool(req.logprob_token_ids),
            )
            if logprobs.tokens:
                self._next_offsets[i] = logprobs.text_offset[-1] + len(logprobs.tokens[-1])
        self._num_tokens[i] += len(seq.token_ids)
        if self._plain and prompt_ids_out is None and seq.finish_reason is None:
            # A running choice's chunk that only carries new text (the common case)
            event = self._templates.render(i, text)
            if event is not None:
                sink.send(event)
                return
        chunk = StreamChunk(
            id=self._request_id,
            object="text_completion",
            created=self._created,
            model=self._model,
            choices=[
                StreamChoice(
                    index=i,
                    text=text,
                    logprobs=logprobs,
                    finish_reason=seq.finish_reason,
                    stop_reason=seq.stop_reason,
                    prompt_token_ids=prompt_ids_out,
                    token_ids=list(seq.token_ids) if self._return_ids else None,
                )
            ],
        )
        ctx = self._ctx
        if (
            not self._include_usage
            and ctx.system_fingerprint is not None
            and seq.finish_reason is not None
        ):
            chunk.system_fingerprint = ctx.system_fingerprint
        if self._continuous:
            chunk.usage = usage_chunk(self._num_prompt[p], self._num_tokens[i])
        sink.send(sse(chunk))

    def usage(self) -> bytes | None:
        """The final usage event, when the request asked for it."""
        if not self._include_usage:
            return None
        ctx = self._ctx
        details = self._cached if ctx.enable_prompt_tokens_details else None
        return sse(
            UsageStreamChunk(
                id=self._request_id,
                object="text_completion",
                created=self._created,
                model=self._model,
                choices=[],
                usage=usage_chunk(sum(self._num_prompt), sum(self._num_tokens), details),
                system_fingerprint=ctx.system_fingerprint,
            )
        )


def text_request(req: Any, request: Request, request_id: str) -> TextRequest:
    """A decoded ``CompletionRequest`` in the text layer's terms (``request``: its HTTP
    request, for the data-parallel rank header)."""
    # Positional, in field order: a call with more than 15 keywords goes through a keyword
    # dict (CPython 3.11 compiles it to CALL_FUNCTION_EX), ~1 us more per request.
    return TextRequest(
        request_id,
        sampling_request(req, chat=False),
        req.prompt,
        req.max_tokens,
        "max_tokens",  # max_tokens_param
        getattr(req, "add_special_tokens", True),
        req.truncate_prompt_tokens,
        req.truncation_side,
        bool(req.echo),  # echo
        req.suffix,
        req.prompt_embeds,
        getattr(req, "mm_processor_kwargs", None),
        getattr(req, "media_io_kwargs", None),
        req.structured_outputs,
        req.response_format,
        req.repetition_detection,
        bool(req.use_beam_search),  # use_beam_search
        req.length_penalty,
        True,  # numbered
        getattr(req, "priority", 0) or 0,  # priority
        data_parallel_rank(request),
        getattr(req, "cache_salt", None),
        req.model,
        defer_engine_checks=bool(req.stream),
    )


def _text_chunk(request_id: str, created: int, key: tuple[str, int], text: str) -> StreamChunk:
    """A running choice's chunk that carries only new text (``key``: model, choice)."""
    model, index = key
    return StreamChunk(
        id=request_id,
        object="text_completion",
        created=created,
        model=model,
        choices=[StreamChoice(index, text, None, None, None, None, None)],
    )


_TEXT_TEMPLATES = RequestTemplates(_text_chunk)


def _text_template(request_id: str, created: int, model: str, index: int) -> SseTemplate | None:
    """The event of a running choice's chunk that carries only new text."""
    return _TEXT_TEMPLATES.template(request_id, created, (model, index))

"""``POST /v1/completions`` with vLLM 0.32's behaviour (vllm/entrypoints/openai/completion/).

Order of work as in ``OpenAIServingCompletion._create_completion``: model check (404), prompt
rendering and its length checks (400), ``max_tokens`` resolved against the context, sampling
lowering (400 on invalid values), then one engine request per prompt and sample. Response and
chunk shapes reproduce vLLM's pydantic output: full responses dump every field (``null`` when
unset); stream chunks dump only the fields vLLM sets explicitly, which are the ones built below.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Sequence
from typing import Any

import msgspec

from vllm_frontend.text.logprobs import PositionLogprobs, token_id_placeholder
from vllm_frontend.text.output import SequenceOutput

from . import errors
from .beam_search import (
    BeamSearchParams,
    beam_search_params,
    beam_search_source,
    beam_token_text,
)
from .generation import (
    ChoiceTemplates,
    GenerationFailed,
    PreparedPrompt,
    SequenceStream,
    ServingContext,
    SseTemplate,
    TextEvent,
    Update,
    UpdateSource,
    Usage,
    UsageChunk,
    data_parallel_rank,
    finite,
    include_usage_flags,
    push_sequences,
    request_id_for,
    request_sequences,
    send_text_event,
    sse,
    usage,
    usage_chunk,
)
from .transport import PushedStreamingResponse, Request, Response, StreamSink

__all__ = ["CompletionsHandler"]

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
    ec_transfer_params: None = None
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


class _Prompt(msgspec.Struct):
    token_ids: list[int]
    text: str | None


class CompletionsHandler:
    """The ``/v1/completions`` route handler."""

    def __init__(self, ctx: ServingContext, parse: Any) -> None:
        """``parse(body: bytes)`` returns the decoded ``CompletionRequest`` (server/protocol)."""
        self.ctx = ctx
        self._parse = parse

    async def __call__(self, request: Request) -> Response | PushedStreamingResponse:
        """Handle one request (errors are raised, the app maps them)."""
        ctx = self.ctx
        req = self._parse(request.body)
        if req.stream and req.use_beam_search:
            raise errors.BadRequest("Streaming is not currently supported with beam search")
        ctx.check_model(req.model)
        ctx.llm.check_admission(req.n or 1)  # vLLM's _preflight: before rendering
        prompts = await self._render(req)
        request_id = request_id_for("cmpl", request, getattr(req, "request_id", None))
        created = int(time.time())
        prepared: list[tuple[PreparedPrompt, Any]] = []
        for prompt in prompts:
            max_tokens = ctx.resolve_max_tokens(req.max_tokens, len(prompt.token_ids))
            if req.use_beam_search:  # vLLM's to_beam_search_params: no sampling lowering
                params: Any = beam_search_params(ctx, req, max_tokens)
            else:
                params = ctx.lower(req, chat=False, max_tokens=max_tokens)
            prepared.append((prompt, params))
        dp_rank = data_parallel_rank(request)
        if req.stream:

            def produce(sink: StreamSink) -> Awaitable[None]:
                return self._stream(sink, req, request_id, created, prepared, dp_rank)

            return PushedStreamingResponse(
                produce, keep_alive_interval=self.ctx.sse_keep_alive_interval
            )
        body = await self._full(req, request_id, created, prepared, dp_rank)
        return Response(body)

    async def _render(self, req: Any) -> list[PreparedPrompt]:
        ctx = self.ctx
        prompt = req.prompt
        add_special = getattr(req, "add_special_tokens", True)
        if req.suffix is not None:
            # vLLM's OnlineRenderer.render_completion; no model here has FIM rendering.
            if req.echo:
                raise errors.BadRequest("Echo is unsupported with suffix.", param="suffix")
            if req.prompt_embeds is not None:
                raise errors.BadRequest(
                    "suffix is not supported with prompt_embeds", param="suffix"
                )
            if req.truncate_prompt_tokens is not None:
                raise errors.BadRequest(
                    "suffix is not supported with truncate_prompt_tokens", param="suffix"
                )
            if isinstance(prompt, str) or (
                isinstance(prompt, list) and all(isinstance(p, str) for p in prompt)
            ):
                raise errors.BadRequest(
                    "suffix is only supported for models with FIM completion rendering",
                    param="suffix",
                )
        if req.prompt_embeds is not None and req.prompt_embeds != []:
            raise errors.InvalidParameter(
                "You must set `--enable-prompt-embeds` to input `prompt_embeds`.",
                parameter="prompt_embeds",
            )
        if prompt is None or prompt == "":
            raise errors.InvalidParameter(
                "Either prompt or prompt_embeds must be provided and non-empty.",
                parameter="prompt",
            )
        items: list[str | list[int]]
        if isinstance(prompt, str):
            items = [prompt]
        elif prompt and all(isinstance(t, int) for t in prompt):
            items = [list(prompt)]
        else:
            items = list(prompt)
        ctx.check_max_tokens_param(req.max_tokens, "max_tokens")
        truncate = ctx.truncation(req.truncate_prompt_tokens, req.max_tokens or 0)
        return await ctx.prepare_prompts(
            items,
            add_special_tokens=add_special,
            truncate=truncate,
            truncation_side=req.truncation_side,
        )

    def _prompt_text(self, prompt: PreparedPrompt) -> str:
        if prompt.text is None:
            prompt.text = self.ctx.tokenizer.decode(prompt.token_ids, skip_special_tokens=False)
        return prompt.text

    async def _full(
        self,
        req: Any,
        request_id: str,
        created: int,
        prepared: list[tuple[PreparedPrompt, Any]],
        dp_rank: int | None,
    ) -> bytes:
        ctx = self.ctx
        n = req.n or 1
        # Per prompt, its finished choices by index (beam search may return fewer than n).
        finals: list[dict[int, SequenceOutput]] = [{} for _ in prepared]
        cached: list[int | None] = [None] * len(prepared)

        def source(i: int, prompt: PreparedPrompt, params: Any) -> UpdateSource:
            if isinstance(params, BeamSearchParams):
                # vLLM gives every prompt's search the request's own id (no "-<i>").
                return beam_search_source(ctx, req, request_id, prompt, params)
            return request_sequences(ctx, req, f"{request_id}-{i}", prompt, params, n, dp_rank)

        async def run(i: int, prompt: PreparedPrompt, params: Any) -> None:
            async with contextlib.aclosing(source(i, prompt, params)) as outputs:
                async for idx, seq, num_cached in outputs:
                    if num_cached is not None:
                        cached[i] = num_cached
                    if seq.finished:
                        finals[i][idx] = seq

        if len(prepared) == 1:
            await run(0, *prepared[0])
        else:
            try:
                async with asyncio.TaskGroup() as tg:
                    for i, (prompt, params) in enumerate(prepared):
                        tg.create_task(run(i, prompt, params))
            except ExceptionGroup as group:
                # vLLM merges the prompts' generators: the first failure is the request's (e.g. a
                # beam search's step refused by the engine's limits, which is a 400).
                raise group.exceptions[0] from None

        choices: list[CompletionChoice] = []
        num_prompt = num_gen = 0
        echo = bool(req.echo)
        return_ids = bool(getattr(req, "return_token_ids", False))
        for i, (prompt, params) in enumerate(prepared):
            if not isinstance(params, BeamSearchParams):
                assert len(finals[i]) == n
            for _, seq in sorted(finals[i].items()):
                if seq.finish_reason == "error":
                    raise GenerationFailed()
                choices.append(self._full_choice(req, len(choices), prompt, seq, echo, return_ids))
                num_gen += seq.num_output_tokens
            num_prompt += len(prompt.token_ids)
        details = cached[-1] if ctx.enable_prompt_tokens_details else None
        response = CompletionResponse(
            id=request_id,
            object="text_completion",
            created=created,
            model=ctx.model_name,
            choices=choices,
            service_tier=None,
            system_fingerprint=ctx.system_fingerprint,
            usage=usage(num_prompt, num_gen, details),
        )
        return _encode(response)

    def _full_choice(
        self,
        req: Any,
        index: int,
        prompt: PreparedPrompt,
        seq: SequenceOutput,
        echo: bool,
        return_ids: bool,
    ) -> CompletionChoice:
        ctx = self.ctx
        prompt_lps = seq.prompt_logprobs
        out_lps: Sequence[PositionLogprobs | None] | None
        if echo:
            prompt_text = "" if return_ids else self._prompt_text(prompt)
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
                beam_token_text(ctx.tokenizer) if req.use_beam_search else ctx.strings().token,
                as_token_ids=self._as_token_ids(req),
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

    def _as_token_ids(self, req: Any) -> bool:
        value = getattr(req, "return_tokens_as_token_ids", None)
        return self.ctx.return_tokens_as_token_ids if value is None else bool(value)

    async def _stream(
        self,
        sink: StreamSink,
        req: Any,
        request_id: str,
        created: int,
        prepared: list[tuple[PreparedPrompt, Any]],
        dp_rank: int | None,
    ) -> None:
        n = req.n or 1
        chunks = _StreamChunks(self, req, request_id, created, prepared)

        def sources() -> list[SequenceStream]:
            return [
                request_sequences(self.ctx, req, f"{request_id}-{p}", prompt, params, n, dp_rank)
                for p, (prompt, params) in enumerate(prepared)
            ]

        await push_sequences(sink, sources, chunks.render, chunks.usage, chunks.text_event)


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
        "_handler",
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
        prepared: list[tuple[PreparedPrompt, Any]],
    ) -> None:
        ctx = handler.ctx
        self._handler = handler
        self._ctx = ctx
        self._req = req
        self._request_id = request_id
        self._created = created
        self._model = ctx.model_name
        self._prompts = [prompt for prompt, _ in prepared]
        self._n = n = req.n or 1
        self._include_usage, self._continuous = include_usage_flags(
            getattr(req, "stream_options", None), ctx.enable_force_include_usage
        )
        total = n * len(prepared)
        self._next_offsets = [0] * total
        self._num_tokens = [0] * total
        self._echoed = [False] * total
        self._num_prompt = [0] * len(prepared)
        self._cached: int | None = None
        self._first = True
        self._echo = bool(req.echo)
        self._return_ids = bool(getattr(req, "return_token_ids", False))
        self._as_token_ids = handler._as_token_ids(req)
        # Text-only chunks come from a per-choice template (see SseTemplate).
        self._plain = req.logprobs is None and not self._return_ids and not self._continuous
        # ...and for one prompt without echo, a running choice's text update goes straight to
        # it once the first update has been through the whole of render.
        self._text_only = self._plain and not self._echo and len(prepared) == 1
        self._templates = ChoiceTemplates(
            lambda i: _text_template(request_id, created, self._model, i)
        )

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
            prompt_text = "" if self._return_ids else self._handler._prompt_text(prompt)
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
                self._ctx.strings().token,
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


def _text_template(request_id: str, created: int, model: str, index: int) -> SseTemplate | None:
    """The event of a running choice's chunk that carries only new text."""
    return SseTemplate.of(
        lambda text: StreamChunk(
            id=request_id,
            object="text_completion",
            created=created,
            model=model,
            choices=[StreamChoice(index, text, None, None, None, None, None)],
        )
    )

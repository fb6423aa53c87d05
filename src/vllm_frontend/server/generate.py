"""``POST /inference/v1/generate`` (token-in/token-out) and ``POST /inference/v1/abort_requests``,
as vLLM 0.32 serves them with ``--enable-scale-out`` (vllm/entrypoints/scale_out/
token_in_token_out/): the ``GenerateRequest`` a disaggregated router sends (token ids and vLLM's
``SamplingParams``) runs as it is, and the answer carries token ids, not text.

The request maps onto two text-layer calls: :meth:`TextLlm.token_prompt` (the request-level
checks vLLM makes before it answers, 400) and :meth:`TextLlm.generate_tokens` (what vLLM's
engine client checks as the request starts: 400, or for a stream an SSE error event after the
200, as vLLM's stream generator sends it). As in vLLM, the output still goes through the
detokenizer when ``detokenize`` is on (stop strings). ``output_mode: "text"`` adds the
detokenized text (stop strings cut as on ``/v1/completions``) and logprobs with token strings.
The request's ``traceparent`` / ``tracestate`` reach the engine requests and the request spans
as on the chat and completion routes. ``prompt_logprob_token_ids`` (scored prompt rows, answered
as ``prompt_token_id_logprobs``, a base64 ``.npy`` float32 array), ``trace_decode_token_ids`` and
``routed_experts_prompt_start`` are checked as vLLM's input processor checks them and sent on.
Multimodal ``features`` (a render's, :mod:`.generate_features`) go to the engine with the
prompt; ``content_parts`` (media by URL) are loaded, processed and expanded into the token
prompt's placeholders by the multimodal facade (:meth:`MultimodalLlm.expand_token_prompt`).

``/inference/v1/abort_requests`` aborts requests by their public id (the ``request_id`` of a
generate answer, a completion's ``id``, ...), every sample of each, through the engine client,
and answers 200 with an empty body at once (vLLM aborts in a background task).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import msgspec

from vllm_frontend.engine.protocol import SamplingParams
from vllm_frontend.llm import LLM
from vllm_frontend.multimodal.parts import CONTENT_PART_MODALITIES
from vllm_frontend.text.llm import GenerateFailed, TextGeneration, TextRequest, TokenPrompt
from vllm_frontend.text.logprobs import PositionLogprobs, token_id_placeholder
from vllm_frontend.text.output import SequenceOutput
from vllm_frontend.text.sampling import InvalidRequestError, SamplingRequest
from vllm_frontend.text.sequence_stream import Update

from . import errors
from .chat import ChatLogprobs, ContentLogprob, TopLogprob
from .completions import PromptLogprob, prompt_logprobs_json
from .generate_features import engine_features, placeholder_ranges
from .generate_protocol import GenerateBody, parse_generate_request, score_rows
from .generation import (
    GenerationFailed,
    ServingContext,
    Usage,
    UsageChunk,
    data_parallel_rank,
    include_usage_flags,
    request_id_for,
    trace_headers,
    usage,
    usage_chunk,
)
from .sse import DONE, push_sequences, sse
from .transport import PushedStreamingResponse, Request, Response, StreamSink

__all__ = ["ABORT_PATH", "GENERATE_PATH", "GenerateHandler", "abort_requests_handler"]

logger = logging.getLogger(__name__)

GENERATE_PATH = "/inference/v1/generate"
ABORT_PATH = "/inference/v1/abort_requests"

_encode = msgspec.json.Encoder().encode


class GenerateLogProb(msgspec.Struct):
    """One candidate (vLLM's ``GenerateLogProb``)."""

    token_id: int
    logprob: float
    rank: int | None


class GenerateLogProbsContent(msgspec.Struct):
    """The sampled token of one position and its candidates."""

    token_id: int
    logprob: float
    rank: int | None
    top_logprobs: list[GenerateLogProb]


class GenerateLogProbs(msgspec.Struct):
    """A choice's ``logprobs``."""

    content: list[GenerateLogProbsContent] | None


class WeightVersionSpan(msgspec.Struct):
    """Output tokens ``[start, end)`` came from the weights labelled ``version``."""

    version: str
    start: int
    end: int


class GenerateChoice(msgspec.Struct):
    """A choice of a full answer or of a stream chunk (every field, as vLLM dumps it)."""

    index: int
    finish_reason: str | None
    stop_reason: int | str | None
    token_ids: list[int]
    routed_experts: None = None
    sampling_mask: None = None
    weight_versions: list[WeightVersionSpan] | None = None
    logprobs: GenerateLogProbs | None = None


class GenerateTextChoice(msgspec.Struct):
    """A choice with ``output_mode="text"``: the same, with the detokenized ``text`` (the
    delta, in a stream) and logprobs with token strings (vLLM's ``GenerateTextChoice``)."""

    index: int
    finish_reason: str | None
    stop_reason: int | str | None
    token_ids: list[int]
    routed_experts: None = None
    sampling_mask: None = None
    weight_versions: list[WeightVersionSpan] | None = None
    text: str = ""
    logprobs: ChatLogprobs | None = None


def weight_versions(version: str | None, num_tokens: int) -> list[WeightVersionSpan] | None:
    """A finished choice's ``weight_versions`` (vLLM's ``_weight_version_spans``) for
    ``num_tokens`` tokens sampled with the weights labelled ``version``: no label and tokens
    give None, no tokens an empty list. One span: the label is the engines' latest (vLLM splits
    the spans where the label changed during the request)."""
    if not num_tokens:
        return []
    if version is None:
        return None
    return [WeightVersionSpan(version, 0, num_tokens)]


class GenerateResponse(msgspec.Struct):
    """vLLM's ``GenerateTokensResponse.model_dump()``."""

    request_id: str
    model: str
    created: int
    usage: Usage
    prompt_logprobs: list[dict[str, PromptLogprob] | None] | None
    prompt_token_id_logprobs: str | None
    prompt_token_ids: list[int] | None
    mm_placeholders: dict[str, list[dict[str, int]]] | None
    metrics: None
    kv_transfer_params: dict[str, Any] | None
    ec_transfer_params: dict[str, Any] | None
    output_mode: str
    choices: list[GenerateChoice] | list[GenerateTextChoice]


class GenerateChunk(msgspec.Struct):
    """A stream chunk (vLLM drops ``prompt_token_ids``, ``mm_placeholders`` and ``metrics``
    when they are None)."""

    request_id: str
    usage: Usage | None
    prompt_token_ids: list[int] | msgspec.UnsetType = msgspec.UNSET
    mm_placeholders: dict[str, list[dict[str, int]]] | msgspec.UnsetType = msgspec.UNSET
    output_mode: str = "tokens"
    choices: list[GenerateChoice] | list[GenerateTextChoice] = msgspec.field(default_factory=list)


class GenerateUsageChunk(msgspec.Struct):
    """The last chunk with ``include_usage`` (dumped without its None fields)."""

    request_id: str
    usage: UsageChunk
    output_mode: str = "tokens"
    choices: list[GenerateChoice] = msgspec.field(default_factory=list)


def npy_base64(scores: Any) -> str | None:
    """vLLM's ``numpy2base64`` of an engine tensor (None stays None): its ``.npy`` file, in
    base64."""
    if scores is None:
        return None
    import base64
    import io

    import numpy as np

    buffer = io.BytesIO()
    np.save(buffer, scores.numpy(), allow_pickle=False)
    return base64.b64encode(buffer.getbuffer()).decode("ascii")


def _placeholders(req: GenerateBody, prompt: TokenPrompt) -> dict[str, list[dict[str, int]]] | None:
    # vLLM's _response_mm_placeholders: with return_token_ids, for a prompt with media (taken
    # before the prompt is sent: the engine request takes its features over)
    if not req.return_token_ids:
        return None
    if req.features is not None:
        return placeholder_ranges(req.features)
    ranges: dict[str, list[dict[str, int]]] = {}
    for feature in prompt.prompt.mm_features or ():
        position = feature.mm_position
        ranges.setdefault(feature.modality, []).append(
            {"offset": position.offset, "length": position.length}
        )
    return ranges or None


def _clamp(value: float) -> float:
    # vLLM's _clamp_logprob: -inf and NaN become -9999.0
    return -9999.0 if value != value else max(value, -9999.0)


def token_logprobs(
    token_ids: Sequence[int], positions: Sequence[PositionLogprobs | None], num: int
) -> GenerateLogProbs:
    """vLLM's ``_create_tokens_logprobs``: per token its logprob and rank (a rank of 0 is
    None), and the first ``max(num, 1)`` candidates of its map (all with -1), sampled first."""
    content: list[GenerateLogProbsContent] = []
    width = max(num, 1)
    for i, tid in enumerate(token_ids):
        step = positions[i] if i < len(positions) else None
        lp = step.get(tid) if step else None
        if step is None or lp is None:
            content.append(GenerateLogProbsContent(tid, -9999.0, None, []))
            continue
        tops = [
            GenerateLogProb(cid, _clamp(c.logprob), c.rank or None)
            for j, (cid, c) in enumerate(step.items())
            if num == -1 or j < width
        ]
        content.append(GenerateLogProbsContent(tid, _clamp(lp.logprob), lp.rank or None, tops))
    return GenerateLogProbs(content)


def text_logprobs(
    token_ids: Sequence[int],
    positions: Sequence[PositionLogprobs | None],
    num: int,
    decode: Callable[[int], str] | None,
) -> ChatLogprobs:
    """vLLM's ``_create_text_logprobs``: each token's string (the engine's decoded text, else
    ``decode`` of the id alone) and bytes, its logprob and the first ``max(num, 1)``
    candidates (all with -1); ``decode`` None: ``token_id:N`` placeholders without bytes."""

    def string(token_id: int, decoded: str | None) -> tuple[str, list[int] | None]:
        if decode is None:
            return token_id_placeholder(token_id), None
        text = decoded if decoded is not None else decode(token_id)
        return text, list(text.encode("utf-8", errors="replace"))

    content: list[ContentLogprob] = []
    width = max(num, 1)
    for i, tid in enumerate(token_ids):
        step = positions[i] if i < len(positions) else None
        lp = step.get(tid) if step else None
        if step is None or lp is None:
            token, token_bytes = string(tid, None)
            content.append(ContentLogprob(token, -9999.0, token_bytes, []))
            continue
        tops = []
        for j, (cid, c) in enumerate(step.items()):
            if num == -1 or j < width:
                ctoken, cbytes = string(cid, c.decoded_token)
                tops.append(TopLogprob(ctoken, _clamp(c.logprob), cbytes))
        token, token_bytes = string(tid, lp.decoded_token)
        content.append(ContentLogprob(token, _clamp(lp.logprob), token_bytes, tops))
    return ChatLogprobs(content)


def _sampling_request(
    sp: SamplingParams, stream: bool, rows: list[list[int]] | None
) -> SamplingRequest:
    return SamplingRequest(
        n=sp.n,
        temperature=sp.temperature,
        top_p=sp.top_p,
        top_k=sp.top_k,
        min_p=sp.min_p,
        presence_penalty=sp.presence_penalty,
        frequency_penalty=sp.frequency_penalty,
        repetition_penalty=sp.repetition_penalty,
        seed=sp.seed,
        stop=sp.stop,
        stop_token_ids=sp.stop_token_ids,
        include_stop_str_in_output=sp.include_stop_str_in_output,
        ignore_eos=sp.ignore_eos,
        min_tokens=sp.min_tokens,
        logprobs=sp.logprobs,
        prompt_logprobs=sp.prompt_logprobs,
        logprob_token_ids=sp.logprob_token_ids,
        skip_special_tokens=sp.skip_special_tokens,
        spaces_between_special_tokens=sp.spaces_between_special_tokens,
        logit_bias=sp.logit_bias,
        allowed_token_ids=sp.allowed_token_ids,
        bad_words=sp.bad_words,
        extra_args=sp.extra_args,
        stream=stream,
        stream_interval=sp.stream_interval,
        watermarking=sp.watermarking,
        thinking_token_budget=sp.thinking_token_budget,
        skip_reading_prefix_cache=sp.skip_reading_prefix_cache,
        prompt_logprob_token_ids=rows,
        prompt_logprob_start=sp.prompt_logprob_start,
        routed_experts_prompt_start=sp.routed_experts_prompt_start,
        trace_decode_token_ids=sp.trace_decode_token_ids,
    )


class GenerateHandler:
    """The ``/inference/v1/generate`` route handler over the text facade of ``ctx``."""

    def __init__(self, ctx: ServingContext, max_num_seqs: int | None = None) -> None:
        """``max_num_seqs``: the engines' (the most samples one request may ask for)."""
        self.ctx = ctx
        self.max_num_seqs = max_num_seqs

    async def __call__(self, request: Request) -> Response | PushedStreamingResponse:
        """Handle one request (errors are raised, the app maps them)."""
        req, sp = parse_generate_request(request.body)
        stream = bool(req.stream)
        prompt = self._token_prompt(request, req, sp, stream)
        ctx = self.ctx
        ctx.check_model(req.model)
        ctx.text.admit(1)  # vLLM's _preflight()
        n = prompt.sampling.n or 1
        if self.max_num_seqs is not None and n > self.max_num_seqs:
            raise errors.BadRequest(
                f"sampling_params.n must be at most the server's max_num_seqs "
                f"({self.max_num_seqs}), got {n}."
            )
        if stream and prompt.sampling.prompt_logprob_token_ids is not None:
            # the stream's chunks have no field for the scores
            raise errors.BadRequest("prompt_logprob_token_ids are not available when stream=true.")
        if req.content_parts:
            prompt = await self._media_prompt(prompt, req)
        placeholders = _placeholders(req, prompt)
        try:
            gen = ctx.text.generate_tokens(prompt)
        except (InvalidRequestError, GenerateFailed) as e:
            if not stream:
                raise
            return self._error_stream(e)
        created = int(time.time())
        request_id = prompt.request.request_id
        if stream:

            def produce(sink: StreamSink) -> Awaitable[None]:
                return self._stream(sink, req, request_id, gen, placeholders)

            return PushedStreamingResponse(produce, keep_alive_interval=ctx.sse_keep_alive_interval)
        return Response(await self._full(req, request_id, created, gen, placeholders))

    def _token_prompt(
        self, request: Request, req: GenerateBody, sp: SamplingParams, stream: bool
    ) -> TokenPrompt:
        raw = req.sampling_params
        if not sp.detokenize and sp.stop:
            raise InvalidRequestError(
                "stop strings are only supported when detokenize is True. "
                "Set detokenize=True to use stop."
            )
        sampling = _sampling_request(sp, stream, score_rows(req))
        extra = dict(sampling.extra_args or {})
        if req.kv_transfer_params is not None:
            extra["kv_transfer_params"] = req.kv_transfer_params
        if req.ec_transfer_params is not None:
            extra["ec_transfer_params"] = req.ec_transfer_params
        sampling.extra_args = extra or sampling.extra_args
        kwargs = req.reasoning_parser_kwargs
        text_request = TextRequest(
            request_id=request_id_for("generate-tokens", request, req.request_id),
            sampling=sampling,
            max_tokens=sp.max_tokens,
            structured_outputs=raw.get("structured_outputs"),
            repetition_detection=raw.get("repetition_detection"),
            priority=req.priority,
            data_parallel_rank=data_parallel_rank(request),
            cache_salt=req.cache_salt,
            model=req.model,
            reasoning_ended=req.reasoning_ended,
            reasoning_parser_kwargs=None if kwargs is None else msgspec.structs.asdict(kwargs),
            trace_headers=trace_headers(self.ctx, request),
        )
        prompt = self.ctx.text.token_prompt(
            text_request,
            list(req.token_ids),
            max_tokens_set="max_tokens" in raw,
            mm_features=None if req.features is None else engine_features(req.features),
        )
        return prompt

    async def _media_prompt(self, prompt: TokenPrompt, req: GenerateBody) -> TokenPrompt:
        # vLLM's ServingTokens with content_parts: its renderer processes the token prompt
        # with the media, and max_tokens defaults against the expanded prompt.
        media = self.ctx.media
        if media is None:
            content = req.content_parts or ()
            if not any(part.get("type") in CONTENT_PART_MODALITIES for part in content):
                return prompt  # no media part: the token prompt as it is
            # vLLM's multimodal registry refuses to make a processor for a text-only model
            name = self.ctx.served_model_names[0]
            raise errors.BadRequest(f"{name} is not a multimodal model")
        parts = media.parts_from_content(req.content_parts or [])
        expanded = await media.expand_token_prompt(prompt.prompt.token_ids, parts)
        return self.ctx.text.token_prompt(
            prompt.request,
            expanded.token_ids,
            max_tokens_set="max_tokens" in req.sampling_params,
            mm_features=expanded.mm_features,
            mm_cache=expanded.mm_cache,
        )

    def _error_stream(self, exc: Exception) -> PushedStreamingResponse:
        async def produce(sink: StreamSink) -> None:
            sink.send(errors.error_sse_event(exc))
            sink.send(DONE)

        return PushedStreamingResponse(produce)

    async def _full(
        self,
        req: GenerateBody,
        request_id: str,
        created: int,
        gen: TextGeneration,
        placeholders: dict[str, list[dict[str, int]]] | None,
    ) -> bytes:
        ctx = self.ctx
        finals: dict[int, SequenceOutput] = {}
        cached: int | None = None
        source = gen.source(0)
        async with contextlib.aclosing(source) as outputs:
            async for idx, seq, num_cached in outputs:
                if num_cached is not None:
                    cached = num_cached
                if seq.finished:
                    finals[idx] = seq
        params = gen.params[0]
        num = getattr(params, "logprobs", None)
        text_mode = req.output_mode == "text"
        decode = self._decode()
        choices: list[Any] = []
        num_gen = 0
        version = ctx.text.llm.weight_version
        for idx, seq in sorted(finals.items()):
            if seq.finish_reason == "error":
                raise GenerationFailed()
            spans = weight_versions(version, len(seq.token_ids))
            reason = seq.finish_reason or "stop"
            if text_mode:
                text_lps = None
                if num is not None:
                    text_lps = text_logprobs(seq.token_ids, seq.logprobs or [], num, decode)
                choices.append(
                    GenerateTextChoice(
                        idx, reason, seq.stop_reason, seq.token_ids, weight_versions=spans,
                        text=seq.text, logprobs=text_lps,
                    )
                )  # fmt: skip
            else:
                logprobs = None
                if num is not None:
                    logprobs = token_logprobs(seq.token_ids, seq.logprobs or [], num)
                choices.append(
                    GenerateChoice(
                        idx, reason, seq.stop_reason, seq.token_ids, weight_versions=spans,
                        logprobs=logprobs,
                    )
                )  # fmt: skip
            num_gen += len(seq.token_ids)
        prompt_ids = gen.prompts[0].token_ids
        prompt_lps = finals[min(finals)].prompt_logprobs if finals else None
        details = cached if ctx.enable_prompt_tokens_details else None
        response = GenerateResponse(
            request_id=request_id,
            model=ctx.model_name_for(req.model),
            created=created,
            usage=usage(len(prompt_ids), num_gen, details),
            prompt_logprobs=prompt_logprobs_json(prompt_lps),
            prompt_token_id_logprobs=npy_base64(getattr(source, "prompt_token_id_logprobs", None)),
            prompt_token_ids=list(prompt_ids) if req.return_token_ids else None,
            mm_placeholders=placeholders,
            metrics=None,
            kv_transfer_params=source.kv_transfer_params,
            ec_transfer_params=source.ec_transfer_params,
            output_mode=req.output_mode,
            choices=choices,
        )
        return _encode(response)

    def _decode(self) -> Callable[[int], str] | None:
        # vLLM's _logprobs_tokenizer: placeholders with --return-tokens-as-token-ids
        if self.ctx.return_tokens_as_token_ids:
            return None
        tokenizer = self.ctx.text.tokenizer
        return lambda token_id: tokenizer.decode([token_id])

    async def _stream(
        self,
        sink: StreamSink,
        req: GenerateBody,
        request_id: str,
        gen: TextGeneration,
        placeholders: dict[str, list[dict[str, int]]] | None,
    ) -> None:
        chunks = _StreamChunks(self.ctx, req, request_id, gen, self._decode())
        chunks.placeholders = placeholders
        await push_sequences(sink, gen.sources, chunks.render, chunks.usage)


class _StreamChunks:
    """The SSE events of one streamed generate request: one per choice update, then usage."""

    def __init__(
        self,
        ctx: ServingContext,
        req: GenerateBody,
        request_id: str,
        gen: TextGeneration,
        decode: Callable[[int], str] | None,
    ) -> None:
        self.request_id = request_id
        self.req = req
        self.placeholders: dict[str, list[dict[str, int]]] | None = None
        """The prompt's ``mm_placeholders`` (with ``return_token_ids``), on the first chunk."""
        self.text_mode = req.output_mode == "text"
        self.output_mode = req.output_mode
        self.decode = decode
        self.llm = ctx.text.llm
        self.num_prompt = len(gen.prompts[0].token_ids)
        self.prompt_ids: list[int] | None = (
            list(gen.prompts[0].token_ids) if req.return_token_ids else None
        )
        self.num_logprobs = getattr(gen.params[0], "logprobs", None)
        n = getattr(gen.params[0], "n", 1) or 1
        self.counts = [0] * n
        self.cached: int | None = None
        self.include_usage, self.continuous = include_usage_flags(req.stream_options, False)
        self.details = ctx.enable_prompt_tokens_details

    def render(self, sink: StreamSink, p: int, update: Update) -> None:
        """Send one update's chunk (an update without tokens only when it finishes)."""
        idx, seq, num_cached = update
        if num_cached is not None and self.cached is None:
            self.cached = num_cached
        if seq.finish_reason == "error":
            raise GenerationFailed()
        text_mode = self.text_mode
        if not seq.token_ids and seq.finish_reason is None and not (text_mode and seq.text):
            return
        self.counts[idx] += len(seq.token_ids)
        num = self.num_logprobs
        choice: GenerateChoice | GenerateTextChoice
        if text_mode:
            text_lps = None
            if num is not None:
                text_lps = text_logprobs(seq.token_ids, seq.logprobs or [], num, self.decode)
            choice = GenerateTextChoice(
                idx, seq.finish_reason, seq.stop_reason, seq.token_ids, text=seq.text,
                logprobs=text_lps,
            )  # fmt: skip
        else:
            logprobs = None
            if num is not None:
                logprobs = token_logprobs(seq.token_ids, seq.logprobs or [], num)
            choice = GenerateChoice(
                idx, seq.finish_reason, seq.stop_reason, seq.token_ids, logprobs=logprobs
            )
        if seq.finish_reason is not None:
            choice.weight_versions = weight_versions(self.llm.weight_version, self.counts[idx])
        chunk = GenerateChunk(self.request_id, None, output_mode=self.output_mode)
        chunk.choices = [choice]  # type: ignore[assignment]
        if self.prompt_ids is not None:
            chunk.prompt_token_ids = self.prompt_ids
            placeholders = self.placeholders
            if placeholders is not None:
                chunk.mm_placeholders = placeholders
            self.prompt_ids = None
        if self.continuous:
            chunk.usage = usage(self.num_prompt, self.counts[idx])
        sink.send(sse(chunk))

    def usage(self) -> bytes | None:
        """The usage chunk (with ``include_usage``)."""
        if not self.include_usage:
            return None
        cached = self.cached if self.details else None
        total = usage_chunk(self.num_prompt, sum(self.counts), cached)
        return sse(GenerateUsageChunk(self.request_id, total, self.output_mode))


def abort_requests_handler(llm: LLM) -> Any:
    """``POST /inference/v1/abort_requests``: ``{"request_ids": [...]}`` (a string is one id),
    aborted in the background; 200 with an empty body. A body that is not JSON, or has no
    ``request_ids``, is 400 as in vLLM; one that is not a JSON object too (vLLM fails it
    with a 500)."""

    async def abort_requests(request: Request) -> Response:
        try:
            body = json.loads(request.body)
        except json.JSONDecodeError as e:
            raise errors.HttpError(400, f"JSON decode error: {e}") from None
        except (UnicodeDecodeError, RecursionError, ValueError):
            raise errors.HttpError(400, "JSON decode error") from None
        request_ids = body.get("request_ids") if isinstance(body, dict) else None
        if request_ids is None:
            raise errors.HttpError(400, "Missing 'request_ids' in request body")
        ids = [request_ids] if isinstance(request_ids, str) else request_ids
        if isinstance(ids, list):
            await llm.abort([i for i in ids if isinstance(i, str)])
        return Response(b"", content_type=None)

    return abort_requests

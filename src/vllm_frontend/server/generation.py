"""What the completions and chat handlers share: the serving context, usage, SSE framing, and
the per-sample text pipeline between the llm stream and the OpenAI response shapes.

Shapes and orders follow vLLM 0.32's serving code (vllm/entrypoints/openai/completion/serving.py
and chat_completion/serving.py); the comments there name the vLLM behaviour being mirrored.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import msgspec

from vllm_frontend.engine.protocol import RepetitionDetectionParams, SamplingParams
from vllm_frontend.llm import LLM, GenerateRequest, OutputKind, TokenConsumer, public_request_id
from vllm_frontend.text.logprobs import TokenStrings
from vllm_frontend.text.output import FINISH_REASONS, SequenceOutput, SequenceProcessor
from vllm_frontend.text.sampling import ModelSamplingInfo, SamplingRequest, lower_sampling_params
from vllm_frontend.text.structured_outputs import (
    merge_response_format,
    structured_outputs_params,
)
from vllm_frontend.text.tokenizer import Tokenizer

from . import errors
from .transport import Request, StreamSink

__all__ = [
    "DONE",
    "OFF_LOOP_ENCODE_CHARS",
    "ChoiceTemplates",
    "SequenceStream",
    "ServingContext",
    "SseTemplate",
    "TextEvent",
    "TextEvents",
    "UpdateSource",
    "Usage",
    "UsageChunk",
    "encode_off_loop",
    "include_usage_flags",
    "push_sequences",
    "request_sequences",
    "send_text_event",
    "sse",
]

DONE = b"data: [DONE]\n\n"
"""The last event of every stream."""
_SAMPLING_EPS = 1e-5

_json = msgspec.json.Encoder()
_encode_str = _json.encode
# A string no real chunk field holds (NUL bytes; JSON escapes them).
_MARK = "\x00chunk-text\x00"
_MARK_JSON = _json.encode(_MARK)


def sse(payload: Any) -> bytes:
    """One ``data:`` event with ``payload`` as compact JSON."""
    return b"data: " + _json.encode(payload) + b"\n\n"


class SseTemplate:
    """The ``data:`` event of a chunk whose only changing field is one string, pre-encoded.

    Most events of a stream differ from the previous one only in their new text; encoding the
    rest once and splicing each new text's JSON in gives the bytes :func:`sse` would produce,
    for a fraction of the cost.
    """

    __slots__ = ("head", "tail")

    def __init__(self, head: bytes, tail: bytes) -> None:
        self.head = head
        """The event's bytes before the text's JSON string."""
        self.tail = tail
        """The event's bytes after it."""

    @classmethod
    def of(cls, make: Callable[[str], Any]) -> SseTemplate | None:
        """The template of ``sse(make(text))``; None if ``make``'s other fields defeat it."""
        parts = sse(make(_MARK)).split(_MARK_JSON)
        return cls(parts[0], parts[1]) if len(parts) == 2 else None

    def render(self, text: str) -> bytes:
        """``sse(make(text))``."""
        return self.head + _encode_str(text) + self.tail


class ChoiceTemplates:
    """Each choice's :class:`SseTemplate`, made on first use by ``make(choice index)`` (which
    returns None where the chunk's shape defeats a template)."""

    __slots__ = ("_make", "_templates")

    def __init__(self, make: Callable[[int], SseTemplate | None]) -> None:
        self._make = make
        self._templates: dict[int, SseTemplate | None] = {}

    def get(self, index: int) -> SseTemplate | None:
        """Choice ``index``'s template (None when its chunks' shape defeats one)."""
        templates = self._templates
        try:
            return templates[index]
        except KeyError:
            template = templates[index] = self._make(index)
            return template

    def render(self, index: int, text: str) -> bytes | None:
        """Choice ``index``'s text-only event for ``text``; None when it has no template."""
        template = self.get(index)
        return None if template is None else template.render(text)


TextEvent = tuple[SseTemplate, list[int]]
"""A running choice's text-only event: its template, and the per-choice output token counts
that sending it adds to (the handler's, for usage)."""


def send_text_event(
    event: TextEvent | None, sink: StreamSink, index: int, text: str, num_tokens: int
) -> bool:
    """Send choice ``index``'s event for ``text`` from ``event`` and add ``num_tokens`` to its
    count; False, doing nothing, without an event or without text."""
    if event is None or not text:
        return False
    template, counts = event
    counts[index] += num_tokens
    sink.send(template.render(text))
    return True


class ServingContext(msgspec.Struct):
    """Everything the generation handlers need, built once at startup."""

    llm: LLM
    tokenizer: Tokenizer
    served_model_names: list[str]
    max_model_len: int
    sampling: ModelSamplingInfo
    """Model-level sampling inputs (generation-config defaults, EOS ids, limits)."""
    return_tokens_as_token_ids: bool = False
    enable_force_include_usage: bool = False
    enable_prompt_tokens_details: bool = False
    response_role: str = "assistant"
    chat_renderer: Any = None
    """A ``vllm_frontend.chat.ChatRenderer`` (needed by the chat route)."""
    token_strings: TokenStrings | None = None
    system_fingerprint: str | None = None
    tokenizer_truncation_side: str = "left"
    """Side ``truncate_prompt_tokens`` cuts when the request names none: vLLM loads generation
    models' tokenizers with ``truncation_side="left"`` (vllm/tokenizers/registry.py)."""
    stream_interval: int = 1
    """``--stream-interval``: streamed updates every N tokens (a request's own may be larger)."""
    sse_keep_alive_interval: float = 0.0
    """``--sse-keep-alive-interval``: seconds of stream idleness before an SSE keep-alive
    comment (0 = never); handlers pass it as ``StreamingResponse(keep_alive_interval=...)``."""

    @property
    def model_name(self) -> str:
        """The name responses carry (the first served name)."""
        return self.served_model_names[0]

    def strings(self) -> TokenStrings:
        """The shared per-token string cache (for logprobs)."""
        if self.token_strings is None:
            self.token_strings = TokenStrings(self.tokenizer)
        return self.token_strings

    def check_model(self, model: str | None) -> None:
        """vLLM's ``_check_model``: an absent model means the default; an unknown one is 404."""
        if model is None or model in self.served_model_names:
            return
        names = ", ".join(self.served_model_names)
        raise errors.NotFound(
            f"The model `{model}` does not exist. Valid aliases: {names}.", param="model"
        )

    def resolve_max_tokens(self, requested: int | None, prompt_len: int) -> int:
        """vLLM's ``get_max_tokens``: the smallest of what the context leaves, the request (or
        the generation config's default) and the server override."""
        if self.max_model_len < prompt_len:
            raise ValueError(
                f"Input length ({prompt_len}) exceeds model's maximum context length "
                f"({self.max_model_len})."
            )
        candidates = [self.max_model_len - prompt_len]
        default = self.sampling.sampling_defaults.get("max_tokens")
        fallback = requested if requested is not None else default
        if fallback is not None:
            candidates.append(fallback)
        if self.sampling.override_max_tokens is not None:
            candidates.append(self.sampling.override_max_tokens)
        return min(candidates)

    def lower(self, req: Any, *, chat: bool, max_tokens: int) -> SamplingParams:
        """The engine ``SamplingParams`` of a completions (``chat=False``) or chat request,
        mapped onto the text layer's lowering as vLLM's ``to_sampling_params`` does."""
        structured = None
        if req.structured_outputs is not None or req.response_format is not None:
            structured = merge_response_format(
                None
                if req.structured_outputs is None
                else structured_outputs_params(req.structured_outputs),
                req.response_format,
            )
        echo = bool(req.echo)
        if chat:
            logprobs = req.top_logprobs if req.logprobs and not req.logprob_token_ids else None
            prompt_logprobs = req.prompt_logprobs
            if prompt_logprobs is None and echo:
                prompt_logprobs = req.top_logprobs
        else:
            logprobs = None if req.logprob_token_ids else req.logprobs
            prompt_logprobs = req.prompt_logprobs
            if prompt_logprobs is None and echo:
                prompt_logprobs = req.logprobs
            if echo and req.max_tokens == 0:
                max_tokens = 1  # vLLM: echo without generation still runs one step
        extra_args: dict[str, Any] = dict(req.vllm_xargs or {})
        if req.kv_transfer_params:
            extra_args["kv_transfer_params"] = req.kv_transfer_params
        if req.ec_transfer_params:
            extra_args["ec_transfer_params"] = req.ec_transfer_params
        temperature = req.temperature
        if temperature is None:
            temperature = self.sampling.sampling_defaults.get("temperature", 1.0)
        if (req.n or 1) > 1 and temperature < _SAMPLING_EPS:
            # vLLM's _verify_greedy_sampling (a plain message, no parameter).
            raise ValueError(f"n must be 1 when using greedy sampling, got {req.n}.")
        sreq = SamplingRequest(
            n=req.n,
            temperature=req.temperature,
            top_p=req.top_p,
            top_k=req.top_k,
            min_p=req.min_p,
            presence_penalty=req.presence_penalty,
            frequency_penalty=req.frequency_penalty,
            repetition_penalty=req.repetition_penalty,
            seed=req.seed,
            stop=req.stop,
            stop_token_ids=req.stop_token_ids,
            include_stop_str_in_output=req.include_stop_str_in_output,
            ignore_eos=req.ignore_eos,
            min_tokens=req.min_tokens,
            logprobs=logprobs,
            prompt_logprobs=prompt_logprobs,
            logprob_token_ids=req.logprob_token_ids or None,
            skip_special_tokens=req.skip_special_tokens,
            spaces_between_special_tokens=req.spaces_between_special_tokens,
            logit_bias=req.logit_bias,
            allowed_token_ids=req.allowed_token_ids,
            bad_words=req.bad_words,
            extra_args=extra_args or None,
            stream=bool(req.stream),
            stream_interval=req.stream_interval,
            watermarking=req.watermarking,
            thinking_token_budget=req.thinking_token_budget,
            repetition_detection=_repetition_detection(req.repetition_detection),
            structured_outputs=structured,
        )
        return lower_sampling_params(
            sreq, max_tokens=max_tokens, model=self.sampling, tokenizer=self.tokenizer
        )

    def check_prompt_length(self, num_tokens: int, from_text: bool) -> None:
        """vLLM's renderer check (``TokenizeParams._token_len_check``): 400 when the prompt
        alone is longer than the context. vLLM tokenizes text with truncation to one token more
        than the context, so for text prompts it can only say "at least <limit + 1>"."""
        limit = self.max_model_len
        if num_tokens <= limit:
            return
        if from_text:
            num_tokens = limit + 1
        qualifier = "at least " if num_tokens == limit + 1 else ""
        raise errors.InvalidParameter(
            f"This model's maximum context length is {limit} tokens. However, your prompt "
            f"contains {qualifier}{num_tokens} input tokens, which exceeds this limit even "
            "without any output tokens. Please reduce the length of the input prompt.",
            parameter="input_tokens",
            value=num_tokens,
        )

    def check_text_length(self, text: str) -> None:
        """vLLM's ``TokenizeParams._text_len_check``: a text that cannot fit even at the
        longest token's length is refused before tokenizing."""
        limit = self.max_model_len * self.tokenizer.max_chars_per_token
        if len(text) > limit:
            raise errors.InvalidParameter(
                f"This model's maximum context length is {self.max_model_len} tokens. However, "
                f"your prompt contains {len(text)} characters (more than {limit} characters, "
                f"which is the upper bound for {self.max_model_len} input tokens). Please reduce "
                "the length of the input prompt.",
                parameter="input_text",
                value=len(text),
            )

    def truncation(self, truncate: int | None, max_output_tokens: int | None) -> int | None:
        """The prompt length ``truncate_prompt_tokens`` asks for (vLLM's ``TokenizeParams``):
        -1 means the context less one token kept for output (the whole context when no output
        is wanted); more than the context is a 400."""
        if truncate is None:
            return None
        limit = self.max_model_len
        if truncate > limit:
            raise errors.InvalidParameter(
                f"truncate_prompt_tokens={truncate} cannot be greater than max_model_len = "
                f"{limit}. Please request a smaller truncation size.",
                parameter="truncate_prompt_tokens",
                value=truncate,
            )
        if truncate < 0:
            return limit if max_output_tokens == 0 else max(0, limit - 1)
        return truncate

    def prepare_prompt(
        self,
        prompt: str | list[int],
        *,
        add_special_tokens: bool,
        truncate: int | None = None,
        truncation_side: str | None = None,
    ) -> PreparedPrompt:
        """Tokenize (or take) a prompt and apply vLLM's renderer steps: the text-length guard,
        truncation (``truncate`` from :meth:`truncation`) and the context-length check."""
        side = truncation_side or self.tokenizer_truncation_side
        if isinstance(prompt, list):
            ids = list(prompt)
            if truncate is not None:
                ids = _truncated(ids, truncate, side)
            self.check_prompt_length(len(ids), from_text=False)
            return PreparedPrompt(ids, None)
        if truncate is not None and truncation_side is None:
            # vLLM lets the HF tokenizer truncate (max_length counts the special tokens, which
            # stay): encode bare, truncate the content, then add the special tokens.
            backend = self.tokenizer.backend
            encoding = backend.encode(prompt, add_special_tokens=False)
            special = backend.num_special_tokens_to_add(False) if add_special_tokens else 0
            encoding.truncate(max(truncate - special, 0), direction=side)
            ids = backend.post_process(encoding, add_special_tokens=add_special_tokens).ids
            self.check_prompt_length(len(ids), from_text=True)
            return PreparedPrompt(ids, prompt)
        text = self._text_to_encode(prompt, truncate, truncation_side)
        ids = self.tokenizer.encode(text, add_special_tokens=add_special_tokens)
        return self._encoded_prompt(prompt, ids, truncate, side)

    async def prepare_prompts(
        self,
        prompts: Sequence[str | list[int]],
        *,
        add_special_tokens: bool,
        truncate: int | None = None,
        truncation_side: str | None = None,
    ) -> list[PreparedPrompt]:
        """:meth:`prepare_prompt` for each prompt, in order, with the same results and errors;
        when their texts come to :data:`OFF_LOOP_ENCODE_CHARS` or more, they are encoded on a
        worker thread (the library releases the GIL there), so running streams are not held up
        for the milliseconds a long prompt takes to encode."""
        chars = sum(len(p) for p in prompts if isinstance(p, str))
        if chars < OFF_LOOP_ENCODE_CHARS or (truncate is not None and truncation_side is None):
            return [
                self.prepare_prompt(
                    p,
                    add_special_tokens=add_special_tokens,
                    truncate=truncate,
                    truncation_side=truncation_side,
                )
                for p in prompts
            ]
        # The texts prepare_prompt would encode, up to the first one it refuses unencoded.
        texts: dict[int, str] = {}
        refused: tuple[int, errors.ApiError] | None = None
        for k, prompt in enumerate(prompts):
            if isinstance(prompt, str):
                try:
                    texts[k] = self._text_to_encode(prompt, truncate, truncation_side)
                except errors.ApiError as e:
                    refused = (k, e)
                    break
        ids = await encode_off_loop(self.tokenizer, list(texts.values()), add_special_tokens)
        encoded = dict(zip(texts, ids, strict=True))
        side = truncation_side or self.tokenizer_truncation_side
        out = []
        for k, prompt in enumerate(prompts):
            if refused is not None and k == refused[0]:
                raise refused[1]
            if isinstance(prompt, str):
                out.append(self._encoded_prompt(prompt, encoded[k], truncate, side))
            else:
                out.append(
                    self.prepare_prompt(
                        prompt,
                        add_special_tokens=add_special_tokens,
                        truncate=truncate,
                        truncation_side=truncation_side,
                    )
                )
        return out

    def _text_to_encode(self, text: str, truncate: int | None, truncation_side: str | None) -> str:
        if truncate is None:
            self.check_text_length(text)
            return text
        # vLLM trims the text by characters first, then tokenizes it whole and slices.
        limit = self.max_model_len * self.tokenizer.max_chars_per_token
        if len(text) > limit:
            text = text[-limit:] if truncation_side == "left" else text[:limit]
        return text

    def _encoded_prompt(
        self, prompt: str, ids: list[int], truncate: int | None, side: str
    ) -> PreparedPrompt:
        if truncate is not None:
            ids = _truncated(ids, truncate, side)
        self.check_prompt_length(len(ids), from_text=True)
        return PreparedPrompt(ids, prompt)

    def check_max_tokens_param(self, max_tokens: int | None, name: str) -> None:
        """vLLM's ``TokenizeParams.__post_init__``: an output budget above the context is a 400."""
        if max_tokens is not None and max_tokens > self.max_model_len:
            raise errors.InvalidParameter(
                f"{name}={max_tokens} cannot be greater than max_model_len={self.max_model_len}."
                " Please request fewer output tokens.",
                parameter=name,
                value=max_tokens,
            )


def _truncated(ids: list[int], length: int, side: str) -> list[int]:
    if length >= len(ids):
        return ids
    if length == 0:
        return []
    return ids[-length:] if side == "left" else ids[:length]


OFF_LOOP_ENCODE_CHARS = 8192
"""Prompt texts of at least this many characters (a request's in all) are encoded off the event
loop: ~2k tokens, which take `tokenizers` 5-10 ms here, a stall for every running stream."""

_encoder_pool: ThreadPoolExecutor | None = None


class BatchEncoder(Protocol):
    """What :func:`encode_off_loop` needs of a tokenizer (``text.Tokenizer`` has it)."""

    def encode_batch(
        self, texts: Sequence[str], add_special_tokens: bool = True
    ) -> list[list[int]]:
        """Token ids of several texts, computed without holding the GIL."""
        ...


async def encode_off_loop(
    tokenizer: BatchEncoder, texts: list[str], add_special_tokens: bool
) -> list[list[int]]:
    """Token ids of ``texts`` computed on the (one) encoder thread; ``encode_batch`` releases
    the GIL, so the event loop runs meanwhile. The same ids as ``tokenizer.encode``."""
    global _encoder_pool
    if not texts:
        return []
    if _encoder_pool is None:
        _encoder_pool = ThreadPoolExecutor(1, thread_name_prefix="vllm-frontend-encode")
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(
        _encoder_pool, tokenizer.encode_batch, texts, add_special_tokens
    )


def request_id_for(prefix: str, request: Request, body_request_id: str | None) -> str:
    """The public id (``X-Request-Id`` header, else the body's ``request_id``, else random)."""
    return public_request_id(prefix, request.header(b"x-request-id"), body_request_id)


def data_parallel_rank(request: Request) -> int | None:
    """The ``X-data-parallel-rank`` header as an int (unparsable values are ignored, as vLLM)."""
    value = request.header(b"x-data-parallel-rank")
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def include_usage_flags(stream_options: Any, force: bool) -> tuple[bool, bool]:
    """vLLM's ``should_include_usage``: (usage chunk at the end, usage on every chunk)."""
    if force:
        return True, True
    if stream_options is None:
        return False, False
    include = bool(getattr(stream_options, "include_usage", False))
    continuous = include and bool(getattr(stream_options, "continuous_usage_stats", False))
    return include, continuous


class PromptTokensDetails(msgspec.Struct, omit_defaults=True):
    """``usage.prompt_tokens_details`` (with ``--enable-prompt-tokens-details``)."""

    cached_tokens: int | None = None


class Usage(msgspec.Struct):
    """``usage`` as vLLM's ``UsageInfo.model_dump()`` writes it in full responses."""

    prompt_tokens: int
    total_tokens: int
    completion_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None
    completion_tokens_details: None = None


class UsageChunk(msgspec.Struct, omit_defaults=True):
    """``usage`` on stream chunks (vLLM serialises those with ``exclude_unset``/``none``)."""

    prompt_tokens: int
    total_tokens: int
    completion_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None


class ChatUsageChunk(msgspec.Struct):
    """Continuous ``usage`` on chat chunks: vLLM also sets ``completion_tokens_details``."""

    prompt_tokens: int
    total_tokens: int
    completion_tokens: int
    completion_tokens_details: None = None


def usage(prompt: int, completion: int, cached: int | None = None) -> Usage:
    """A full-response ``usage`` object."""
    details = PromptTokensDetails(cached) if cached is not None else None
    return Usage(prompt, prompt + completion, completion, details)


def usage_chunk(prompt: int, completion: int, cached: int | None = None) -> UsageChunk:
    """A stream-chunk ``usage`` object."""
    details = PromptTokensDetails(cached) if cached is not None else None
    return UsageChunk(prompt, prompt + completion, completion, details)


class GenerationFailed(errors.InternalError):
    """An engine ``error`` finish (vLLM's ``GenerationError``: 500 "Internal server error")."""

    def __init__(self) -> None:
        super().__init__("Internal server error")


def finite(value: float) -> float | None:
    """A logprob as JSON: vLLM clamps to -9999.0 (NaN stays NaN, which JSON writes as null)."""
    if math.isnan(value):
        return None
    return max(value, -9999.0)


class PreparedPrompt(msgspec.Struct):
    """One prompt ready to generate: its token ids and (for echo) its text."""

    token_ids: list[int]
    text: str | None


def request_sequences(
    ctx: ServingContext,
    req: Any,
    request_id: str,
    prompt: PreparedPrompt,
    params: Any,
    n: int,
    dp_rank: int | None,
) -> SequenceStream:
    """A :class:`SequenceStream` with the request's own ``priority`` and ``cache_salt``."""
    return SequenceStream(
        ctx,
        request_id=request_id,
        prompt=prompt,
        params=params,
        n=n,
        priority=getattr(req, "priority", 0) or 0,
        data_parallel_rank=dp_rank,
        cache_salt=getattr(req, "cache_salt", None),
    )


Update = tuple[int, SequenceOutput, int | None]
"""``(sample index, text update, num_cached_tokens)``."""


class UpdateSource(Protocol):
    """One prompt's choices as text updates, as the handlers consume them: a
    :class:`SequenceStream`, or a beam search's (``server.beam_search.BeamSearchStream``)."""

    @property
    def finished(self) -> bool:
        """Every choice has ended and its last update was taken."""
        ...

    def on_ready(self, callback: Callable[[], None] | None) -> None:
        """Start, and call ``callback()`` whenever :meth:`take` may have something."""

    def take(self) -> list[Update]:
        """The updates available now, without waiting."""
        ...

    def on_tokens(self, consumer: TokenConsumer) -> SequenceProcessor | None:
        """Offer ``consumer.tokens`` plain new token ids as they arrive (None: not supported)."""
        ...

    def __aiter__(self) -> AsyncIterator[Update]:
        """Iterate the updates as they come."""
        ...

    async def aclose(self) -> None:
        """Stop, aborting whatever still runs on the engine."""


class SequenceStream:
    """One prompt's ``n`` samples as text updates: ``(index, output, num_cached_tokens)``.

    Detokenization, stop strings and logprobs run incrementally on every engine output (as
    vLLM's output processor does) whatever the request's output kind; with FINAL_ONLY params
    each sample yields once, when it finishes. A stop string ends its sample and aborts the
    engine request. Consume with ``async for`` (then :meth:`aclose`, e.g. through
    ``contextlib.aclosing``), or push-style: :meth:`on_ready` and :meth:`take` from a callback
    (no task wakes up per engine step). Closing early (disconnect) aborts what still runs.
    """

    __slots__ = ("_gen", "_procs")

    def __init__(
        self,
        ctx: ServingContext,
        *,
        request_id: str,
        prompt: PreparedPrompt,
        params: Any,
        n: int,
        priority: int = 0,
        data_parallel_rank: int | None = None,
        cache_salt: str | None = None,
    ) -> None:
        wants_logprobs = params.logprobs is not None or params.prompt_logprobs is not None
        strings = ctx.strings() if wants_logprobs else None
        self._procs = [
            SequenceProcessor(
                ctx.tokenizer,
                prompt.token_ids,
                params,
                token_strings=strings,
                request_id=request_id,
                stream_interval=ctx.stream_interval,
            )
            for _ in range(n)
        ]
        self._gen = ctx.llm.generate(
            GenerateRequest(
                request_id=request_id,
                prompt_token_ids=prompt.token_ids,
                sampling_params=params,
                n=n,
                output_kind=OutputKind.DELTA,
                arrival_time=time.time(),
                priority=priority,
                data_parallel_rank=data_parallel_rank,
                cache_salt=cache_salt,
            )
        )

    @property
    def finished(self) -> bool:
        """Every sample has ended (what :meth:`take` returned last included the last update)."""
        return self._gen.finished

    def start(self) -> None:
        """Send the engine requests (idempotent; iterating or :meth:`on_ready` also does)."""
        self._gen.start()

    def on_ready(self, callback: Callable[[], None] | None) -> None:
        """Start, and call ``callback()`` from the event loop whenever :meth:`take` may have
        something; call :meth:`take` once right away too."""
        self._gen.on_ready(callback)
        self._gen.start()

    def take(self) -> list[Update]:
        """The text updates available now, without waiting.

        An engine ``error`` finish is an update like any other (the handlers raise
        GenerationFailed where vLLM does); raises EngineDeadError & co. from the engine client.
        """
        updates: list[Update] = []
        procs = self._procs
        for out in self._gen.take():
            proc = procs[out.index]
            if out.finish_reason is None and not out.logprobs and out.prompt_logprobs is None:
                seq = proc.process(out.token_ids)  # a running sample's new tokens, nothing else
            else:
                # One logprobs block per engine output merged into this update.
                blocks = out.logprobs
                lp = (
                    None
                    if not blocks
                    else _triple(blocks[0])
                    if len(blocks) == 1
                    else _concat(blocks)
                )
                plp = out.prompt_logprobs
                code = FINISH_REASONS.index(out.finish_reason) if out.finish_reason else None
                seq = proc.process(
                    out.token_ids,
                    code,
                    out.stop_reason,
                    new_logprobs=lp,
                    new_prompt_logprobs=None if plp is None else _triple(plp),
                )
            if seq is None:
                continue
            if seq.abort_engine:
                self._gen.finish_sample_nowait(out.index, "stop")
            updates.append((out.index, seq, out.num_cached_tokens))
        return updates

    def on_tokens(self, consumer: TokenConsumer) -> SequenceProcessor | None:
        """After :meth:`on_ready`, for one sample: offer ``consumer.tokens`` a running sample's
        plain new token ids as soon as the engine client reads them (see
        ``GenerationStream.on_tokens``). Returns the sample's processor, None where the stream
        cannot do this: the consumer returns True when it handled the ids, through the
        processor's ``take_text`` (False when that declines), and makes of them what
        :meth:`take` would."""
        if len(self._procs) != 1 or not self._gen.on_tokens(consumer):
            return None
        return self._procs[0]

    def __aiter__(self) -> AsyncIterator[Update]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Update]:
        gen = self._gen
        gen.start()
        waiter: asyncio.Future[None] | None = None

        def wake() -> None:
            if waiter is not None and not waiter.done():
                waiter.set_result(None)

        gen.on_ready(wake)
        while True:
            updates = self.take()
            for update in updates:
                yield update
            if gen.finished:
                return
            if not updates:
                waiter = asyncio.get_running_loop().create_future()
                await waiter
                waiter = None

    async def aclose(self) -> None:
        """Abort whatever still runs on the engine (idempotent)."""
        await self._gen.aclose()


TextEvents = Callable[[int], TextEvent | None]
"""``text_event(choice index)``: the choice's :data:`TextEvent` once its running updates that
are new text alone can go out as that event (as ``render`` would send them), else None."""


async def push_sequences(
    sink: StreamSink,
    make_sources: Callable[[], Sequence[UpdateSource]],
    render: Callable[[StreamSink, int, Update], None],
    trailer: Callable[[], bytes | None],
    text_event: TextEvents | None = None,
) -> None:
    """Stream the sources ``make_sources()`` builds (one per prompt) into ``sink`` as SSE,
    push-style, then ``[DONE]``. The head of the response is out already, so every failure from
    here on, building the sources included, becomes an SSE error event.

    Each engine step's outputs run through ``render(sink, prompt index, update)`` (which sends
    the update's events) from the engine client's notification callback, straight into the
    connection's buffer: no task resumes per chunk. While the client is not reading, nothing is
    taken (outputs queue up in the engine client and go out merged on resume). After the last
    update comes ``trailer()`` (e.g. the usage chunk); an error becomes an SSE error event.
    Every source is closed on the way out (aborting what still runs when the client went away).
    With one source, its plain running updates are rendered as the engine client reads them,
    new text alone straight from ``text_event(0)``'s template once it has one.
    """
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    pump = _Pump(sink, render, text_event, done)
    sources: Sequence[UpdateSource] = ()
    try:
        sources = pump.sources = make_sources()
        pump.single = sources[0] if len(sources) == 1 else None
        for source in sources:
            source.on_ready(pump)
        if pump.single is not None:
            pump.proc = pump.single.on_tokens(pump)
        pump()
        await done
        tail = trailer()
        if tail is not None:
            sink.send(tail)
    except Exception as e:
        sink.send(errors.error_sse_event(e))
    finally:
        for source in sources:
            await source.aclose()
    sink.send(DONE)


class _Pump:
    """push_sequences' notification callback: renders whatever the sources have now into the
    sink, and resolves ``done`` when they have all finished (or with the error that stopped it).

    One object with slots rather than a closure: its state is one cache line or two, not a cell
    per variable, and this runs for every stream at every engine step. For the same reason the
    single source's text event, once the handler has one, is kept here in parts (``head``,
    ``tail``, ``counts``): a plain token's event is then made without visiting the handler.
    """

    __slots__ = (
        "counts",
        "done",
        "head",
        "proc",
        "render",
        "single",
        "sink",
        "sources",
        "tail",
        "text_event",
    )

    def __init__(
        self,
        sink: StreamSink,
        render: Callable[[StreamSink, int, Update], None],
        text_event: TextEvents | None,
        done: asyncio.Future[None],
    ) -> None:
        self.sink = sink
        self.render = render
        self.text_event = text_event
        self.done = done
        self.sources: Sequence[UpdateSource] = ()
        self.single: UpdateSource | None = None
        self.proc: SequenceProcessor | None = None  # the single source's, for tokens()
        self.head = self.tail = b""
        self.counts: list[int] | None = None  # set with head and tail by _arm()

    def __call__(self) -> None:
        done = self.done
        if done.done():
            return
        sink = self.sink
        if sink.paused:
            sink.on_resume(self)
            return
        render = self.render
        try:
            single = self.single
            if single is not None:  # the common case, without the loops
                for update in single.take():
                    render(sink, 0, update)
                finished = single.finished
                if self.counts is None and not finished:
                    self._arm()
            else:
                sources = self.sources
                for p, source in enumerate(sources):
                    for update in source.take():
                        render(sink, p, update)
                finished = all(source.finished for source in sources)
            if finished:
                done.set_result(None)
        except Exception as e:
            done.set_exception(e)

    def _arm(self) -> None:
        # Keep the single source's text event at hand once the handler has one (after its first
        # update, typically); it stays valid while the sequence runs.
        text_event = self.text_event
        if text_event is None or self.proc is None:
            return
        event = text_event(0)
        if event is not None:
            template, self.counts = event
            self.head = template.head
            self.tail = template.tail

    def tokens(self, token_ids: list[int]) -> bool:
        """The single source's plain new tokens, straight from the engine client's read loop:
        rendered now when nothing stands in the way (as ``__call__`` would render them; new
        text alone straight from the text event), else False and they go the usual way.
        """
        done = self.done
        proc = self.proc
        if proc is None or done.done() or self.sink.paused:
            return False
        text = proc.take_text(token_ids)
        if text is None:
            return False
        try:
            counts = self.counts
            if counts is not None and text:  # send_text_event, inline: this runs per token
                counts[0] += len(token_ids)
                self.sink.send(self.head + _encode_str(text) + self.tail)
            else:
                self.render(self.sink, 0, (0, proc.plain_output(text, token_ids), None))
                if counts is None:
                    self._arm()
        except Exception as e:
            done.set_exception(e)
        return True


def _triple(lp: Any) -> tuple[Any, Any, Any] | None:
    # As lists: the wire triples' own tolist() reads the small per-output arrays without numpy.
    if lp is None:
        return None
    ranks = getattr(lp, "sampled_token_ranks", None)
    if ranks is None:
        ranks = lp.selected_token_ranks
    return (_rows(lp.logprob_token_ids), _rows(lp.logprobs), _rows(ranks))


def _concat(blocks: list[Any]) -> tuple[Any, Any, Any]:
    triples = [t for t in map(_triple, blocks) if t is not None]
    return (
        [row for t in triples for row in t[0]],
        [row for t in triples for row in t[1]],
        [row for t in triples for row in t[2]],
    )


def _rows(value: Any) -> Any:
    return value.tolist() if hasattr(value, "tolist") else value


def _repetition_detection(value: Any) -> RepetitionDetectionParams | None:
    if value is None:
        return None
    try:
        return msgspec.convert(value, RepetitionDetectionParams)
    except msgspec.ValidationError as e:
        raise errors.InvalidParameter(
            f"Invalid repetition_detection: {e}", parameter="repetition_detection"
        ) from None

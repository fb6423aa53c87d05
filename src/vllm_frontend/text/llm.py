"""The text layer's facade: text in, text updates out, over the llm layer.

:meth:`TextLlm.generate` takes one request in text terms (:class:`TextRequest`: prompts, the
sampling fields, truncation, beam search) and does, in vLLM 0.32's order, everything before the
engine is asked: admission, the completion prompt's checks, tokenization with the renderer's
length checks and truncation (:mod:`text.prompts`), ``max_tokens`` against the context, and the
lowering to engine ``SamplingParams`` (validated there, once) or beam-search parameters. The
:class:`TextGeneration` it returns makes each prompt's stream of text updates
(:class:`~vllm_frontend.text.sequence_stream.SequenceStream`, or a beam search's) when the
caller starts consuming.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from vllm_frontend.engine.protocol import LoRARequest, RepetitionDetectionParams, SamplingParams
from vllm_frontend.engine.validate import PlainValueError
from vllm_frontend.llm import LLM, LoraAdapters
from vllm_frontend.text.beam_search import (
    BeamSearch,
    BeamSearchParams,
    BeamSearchStream,
    beam_search_params,
    beam_token_text,
)
from vllm_frontend.text.errors import BadInput, InvalidInput
from vllm_frontend.text.logprobs import TokenStrings
from vllm_frontend.text.lowered_params import LoweredParams
from vllm_frontend.text.prompts import PreparedPrompt, PromptPreparer
from vllm_frontend.text.request_log import RequestLog
from vllm_frontend.text.sampling import (
    InvalidRequestError,
    ModelSamplingInfo,
    SamplingRequest,
    check_debug_fields,
    lower_sampling_params,
    resolve_max_tokens,
)
from vllm_frontend.text.sequence_stream import SequenceStream, UpdateSource
from vllm_frontend.text.structured_outputs import merge_response_format, structured_outputs_params
from vllm_frontend.text.tokenizer import Tokenizer

__all__ = ["GenerateFailed", "TextGeneration", "TextLlm", "TextRequest", "TokenPrompt"]


class TextRequest(msgspec.Struct, gc=False):
    """One generation request in text terms, as a route maps it (field names are vLLM's)."""

    request_id: str
    """The public id; engine ids derive from it."""
    sampling: SamplingRequest
    """The sampling fields, route-mapped (its ``structured_outputs`` and
    ``repetition_detection`` are set from the fields below)."""
    prompt: Any = None
    """A text, token ids, or a list of either (the completions ``prompt``)."""
    max_tokens: int | None = None
    """The requested output budget (None: the default)."""
    max_tokens_param: str = "max_tokens"
    """The name ``max_tokens`` had in the request (for its error)."""
    add_special_tokens: bool = True
    truncate_prompt_tokens: int | None = None
    truncation_side: str | None = None
    echo: bool = False
    """The completions ``echo``: with ``max_tokens`` 0, vLLM still runs one step."""
    suffix: str | None = None
    prompt_embeds: Any = None
    mm_processor_kwargs: Any = None
    """The completions body's ``mm_processor_kwargs`` (a key vLLM keeps as an extra field, of
    any type): refused when set, as :func:`refuse_request_mm_kwargs`."""
    media_io_kwargs: Any = None
    """The completions body's ``media_io_kwargs``, likewise."""
    structured_outputs: Mapping[str, Any] | None = None
    """The request's ``structured_outputs`` (JSON), merged with ``response_format``."""
    response_format: Mapping[str, Any] | None = None
    repetition_detection: Any = None
    use_beam_search: bool = False
    length_penalty: float = 1.0
    numbered: bool = False
    """Each prompt's engine requests use ``<request_id>-<prompt index>`` (completions; a beam
    search keeps the request's id, as vLLM)."""
    priority: int = 0
    data_parallel_rank: int | None = None
    cache_salt: str | None = None
    model: str | None = None
    """The request's ``model``: a loaded LoRA adapter's name runs the request with it (the
    route has checked that it names a served model or an adapter)."""
    reasoning_ended: bool | None = None
    """The engine requests' ``reasoning_ended`` (set by the chat layer once the prompt is
    tokenized; a beam search sends none, as vLLM's)."""
    reasoning_parser_kwargs: dict[str, Any] | None = None
    """The engine requests' ``reasoning_parser_kwargs`` (chat with a reasoning parser)."""
    trace_headers: dict[str, str] | None = None
    """The HTTP request's ``traceparent`` / ``tracestate`` (with ``--otlp-traces-endpoint``):
    the engine requests carry them and their spans are children of that context."""
    render: bool = False
    """Prepared for a render route, not for the engines: the request-level sampling parameters
    (vLLM's ``to_sampling_params``), without what vLLM's engine-side input processor adds or
    checks (EOS ids, bad-word ids, the model-dependent checks, the structured-output backend)."""
    defer_engine_checks: bool = False
    """A streamed chat or completions request: vLLM's engine client runs its input checks
    (``SamplingParams.verify``, the structured-output backend) only when the stream is iterated,
    after the response's head went out, so what they refuse becomes the stream's error event;
    the request-level checks still refuse the request before."""


class TextLlm:
    """Text-level generation for one model over ``llm`` (built once at startup)."""

    __slots__ = (
        "_lowered",
        "_token_sampling",
        "adapters",
        "llm",
        "max_model_len",
        "prompts",
        "request_log",
        "sampling",
        "stream_interval",
        "token_strings",
        "tokenizer",
    )

    def __init__(
        self,
        llm: LLM,
        tokenizer: Tokenizer,
        max_model_len: int,
        sampling: ModelSamplingInfo,
        *,
        token_strings: TokenStrings | None = None,
        tokenizer_truncation_side: str = "left",
        stream_interval: int = 1,
        request_log: RequestLog | None = None,
        adapters: LoraAdapters | None = None,
    ) -> None:
        self.llm = llm
        self.adapters = adapters if adapters is not None else LoraAdapters(None)
        """The loaded LoRA adapters (a request's ``model`` may name one)."""
        self.request_log = request_log
        """``--enable-log-requests``: each prompt's request is logged as it starts."""
        self.tokenizer = tokenizer
        self.sampling = sampling
        """Model-level sampling inputs (generation-config defaults, EOS ids, limits)."""
        self.max_model_len = max_model_len
        """The context length."""
        self.prompts = PromptPreparer(tokenizer, max_model_len, tokenizer_truncation_side)
        """Prompt preparation (tokenization, truncation, length checks)."""
        self.token_strings = token_strings
        self.stream_interval = stream_interval
        """``--stream-interval``: streamed updates every N tokens."""
        self._token_sampling: ModelSamplingInfo | None = None
        self._lowered = LoweredParams()

    def strings(self) -> TokenStrings:
        """The shared per-token string cache (for logprobs)."""
        if self.token_strings is None:
            self.token_strings = TokenStrings(self.tokenizer)
        return self.token_strings

    def admit(self, num_requests: int) -> None:
        """Refuse (503) while the engines are at the queue limits (vLLM's ``_preflight``)."""
        self.llm.check_admission(num_requests)

    async def generate(self, request: TextRequest) -> TextGeneration:
        """Admission, then :meth:`prepare`."""
        self.llm.check_admission(request.sampling.n or 1)  # as admit()
        return await self.prepare(request)

    async def prepare(self, request: TextRequest) -> TextGeneration:
        """The completion prompt's checks, then :meth:`generate_prompts` (no admission: the
        render routes prepare requests that this server does not run)."""
        items = completion_prompts(request)
        self.prompts.check_max_tokens_param(request.max_tokens, request.max_tokens_param)
        return await self.generate_prompts(request, items)

    async def generate_prompts(
        self, request: TextRequest, prompts: list[str | list[int]]
    ) -> TextGeneration:
        """Tokenize and check ``prompts`` (admission and ``max_tokens`` already checked), and
        resolve each one's parameters."""
        await self.load_decoder(request)
        preparer = self.prompts
        truncate = preparer.truncation(request.truncate_prompt_tokens, request.max_tokens or 0)
        prepared = preparer.prepare_prompts_in_loop(
            prompts,
            add_special_tokens=request.add_special_tokens,
            truncate=truncate,
            truncation_side=request.truncation_side,
        )
        if prepared is None:  # long texts: encoded on a worker thread
            prepared = await preparer.prepare_prompts_off_loop(
                prompts,
                add_special_tokens=request.add_special_tokens,
                truncate=truncate,
                truncation_side=request.truncation_side,
            )
        return self.generate_prepared(request, prepared)

    async def load_decoder(self, request: TextRequest) -> None:
        """Have a let-go ``tokenizers`` object loaded on a worker thread when ``request`` will
        decode (logprobs, prompt logprobs, echo, beam search), so that its first decode does not
        hold the event loop for the load."""
        if not self.tokenizer.holds_backend and _decodes(request):
            await self.tokenizer.ensure_backend()

    def generate_prepared(
        self, request: TextRequest, prepared: list[PreparedPrompt]
    ) -> TextGeneration:
        """Resolve each prepared prompt's parameters (``prepared`` checked already: the
        multimodal layer's expanded prompts)."""
        lowered: SamplingRequest | None = None
        params: list[SamplingParams | BeamSearchParams] = []
        failure: InvalidRequestError | None = None
        for prompt in prepared:
            max_tokens = self.resolve_max_tokens(request.max_tokens, len(prompt.token_ids))
            if request.use_beam_search:  # vLLM's to_beam_search_params: no sampling lowering
                params.append(
                    beam_search_params(
                        self.sampling, request.sampling, request.length_penalty, max_tokens
                    )
                )
                continue
            if request.echo and request.max_tokens == 0:
                max_tokens = 1  # vLLM: echo without generation still runs one step
            if lowered is None:
                lowered = _sampling_request(request)
            try:
                lowered_params = self._lowered.lower(
                    lowered,
                    max_tokens=max_tokens,
                    model=self.sampling,
                    tokenizer=self.tokenizer,
                    engine_side=not request.render,
                )
            except InvalidRequestError as e:
                if request.render or not request.defer_engine_checks:
                    raise
                # The request-level part refuses now (before the head); an engine-side refusal
                # waits for the stream (TextGeneration.source).
                lowered_params = self._lowered.lower(
                    lowered,
                    max_tokens=max_tokens,
                    model=self.sampling,
                    tokenizer=self.tokenizer,
                    engine_side=False,
                )
                failure = failure or e
            params.append(lowered_params)
        lora = self.adapters.get(request.model)
        return TextGeneration(self, request, prepared, params, lora, failure)

    def token_prompt(
        self,
        request: TextRequest,
        token_ids: list[int],
        *,
        max_tokens_set: bool,
        mm_features: list[Any] | None = None,
        mm_cache: Any = None,
    ) -> TokenPrompt:
        """A token-in/token-out request's request-level checks (vLLM's ``ServingTokens``
        before its engine client): the prompt as given (no special tokens, no truncation),
        ``max_tokens`` (``request.max_tokens``) defaulted against the context only when the
        request did not set it (``max_tokens_set``), and the sampling parameters as vLLM's
        ``SamplingParams`` builds them from the request's values: its own defaults, not the
        generation config's; ``mm_features``: the engine features of the prompt's media items
        (placeholders already in ``token_ids``), sent through ``mm_cache`` (the mirror of the
        engine's multimodal cache, or None). Raises vLLM's 400 errors;
        :meth:`generate_tokens` does the rest."""
        max_tokens = request.max_tokens
        if not max_tokens_set:
            max_tokens = self.resolve_max_tokens(None, len(token_ids))
        model = self._token_sampling
        if model is None:
            model = self._token_sampling = msgspec.structs.replace(
                self.sampling, sampling_defaults={}
            )
        lowered = _sampling_request(request)
        lower_sampling_params(lowered, max_tokens=max_tokens, model=model, engine_side=False)
        prompt = PreparedPrompt(token_ids, None, mm_features or None, mm_cache)
        return TokenPrompt(request, prompt, max_tokens, lowered)

    def generate_tokens(self, prompt: TokenPrompt) -> TextGeneration:
        """:meth:`token_prompt`'s request as vLLM's input processor takes it (what vLLM raises
        from its engine client's ``generate``, after a stream's head went out): the prompt's
        length against the context, an unset ``max_tokens`` to the context's end, the
        engine-side checks and additions (EOS ids, bad-word ids, the grammar backend)."""
        request = prompt.request
        prompt_len = len(prompt.prompt.token_ids)
        limit = self.max_model_len
        suggestion = "Make sure that `max_model_len` is no smaller than the number of text tokens"
        if prompt_len > limit:
            raise InvalidRequestError(
                f"The decoder prompt (length {prompt_len}) is longer than the maximum model "
                f"length of {limit}. {suggestion}."
            )
        if prompt_len == limit:
            raise InvalidRequestError(
                f"The decoder prompt (length {prompt_len}) plus the number of requested output "
                f"tokens (at least 1) is longer than the maximum model length of {limit}. "
                f"{suggestion} (prompt + requested output tokens)."
            )
        max_tokens = prompt.max_tokens
        if max_tokens is None:
            max_tokens = limit - prompt_len
            if prompt.sampling.min_tokens > max_tokens:
                raise InvalidRequestError(
                    f"min_tokens must be less than or equal to max_tokens={max_tokens}, got "
                    f"{prompt.sampling.min_tokens}."
                )
        model = self._token_sampling or self.sampling
        try:
            params = lower_sampling_params(
                prompt.sampling, max_tokens=max_tokens, model=model, tokenizer=self.tokenizer
            )
        except PlainValueError as e:
            raise GenerateFailed() from e
        params.skip_clone = False  # vLLM's SamplingParams default (the OpenAI routes set it)
        if (
            params.prompt_logprob_token_ids is not None
            or params.trace_decode_token_ids
            or params.routed_experts_prompt_start
        ):
            check_debug_fields(params, prompt_len, self.max_model_len, model)
        lora = self.adapters.get(request.model)
        return TextGeneration(self, request, [prompt.prompt], [params], lora)

    def token_offsets(
        self, request: TextRequest, prompt: PreparedPrompt
    ) -> list[tuple[int, int]] | None:
        """vLLM's ``prompt_token_offsets`` of a prepared prompt (``return_token_offsets``): the
        character span of each token in the text it was tokenized from, for a prompt that came
        as text without media; None otherwise, as vLLM."""
        if prompt.text is None or prompt.mm_features:
            return None
        preparer = self.prompts
        return preparer.token_offsets(
            prompt.text,
            add_special_tokens=request.add_special_tokens,
            truncate=preparer.truncation(request.truncate_prompt_tokens, request.max_tokens or 0),
            truncation_side=request.truncation_side,
        )

    def resolve_max_tokens(self, requested: int | None, prompt_len: int) -> int:
        """vLLM's ``get_max_tokens``: the smallest of what the context leaves, the request (or
        the generation config's default) and the server override."""
        sampling = self.sampling
        return resolve_max_tokens(
            requested,
            prompt_len,
            self.max_model_len,
            default_max_tokens=sampling.sampling_defaults.get("max_tokens"),
            override_max_tokens=sampling.override_max_tokens,
        )

    def prompt_text(self, prompt: PreparedPrompt) -> str:
        """The prompt's text (decoded from its ids, once, when it came as ids: all of them when
        it was truncated, as vLLM echoes it)."""
        if prompt.text is None:
            ids = prompt.token_ids if prompt.untruncated_ids is None else prompt.untruncated_ids
            prompt.text = self.tokenizer.decode(ids, skip_special_tokens=False)
        return prompt.text


class TextGeneration:
    """A request's prompts, checked and tokenized, with their parameters; each prompt's
    stream of text updates is made (and its engine requests sent) by :meth:`source`."""

    __slots__ = ("_request", "_text", "failure", "lora_request", "params", "prompts")

    def __init__(
        self,
        text: TextLlm,
        request: TextRequest,
        prompts: list[PreparedPrompt],
        params: list[SamplingParams | BeamSearchParams],
        lora_request: LoRARequest | None = None,
        failure: InvalidRequestError | None = None,
    ) -> None:
        self._text = text
        self.failure = failure
        """The engine-side refusal a streamed request meets when its stream starts (see
        ``TextRequest.defer_engine_checks``); None for a request that runs."""
        self.lora_request = lora_request
        """The adapter the request's ``model`` names (None: the base model)."""
        self._request = request
        self.prompts = prompts
        """The prepared prompts, in order."""
        self.params = params
        """Each prompt's engine parameters (or beam-search parameters)."""

    @property
    def beam_search(self) -> bool:
        """The choices come from a beam search (all at once, maybe fewer than ``n``)."""
        return self._request.use_beam_search

    def token_text(self) -> Callable[[int], str]:
        """A token's text for logprobs (a beam search's logprobs carry none, see
        ``beam_token_text``)."""
        text = self._text
        return beam_token_text(text.tokenizer) if self.beam_search else text.strings().token

    def source(self, p: int) -> UpdateSource:
        """Prompt ``p``'s text updates (not started: iterating or ``on_ready`` starts it).
        Raises :attr:`failure` when there is one."""
        if self.failure is not None:
            raise self.failure
        request = self._request
        prompt = self.prompts[p]
        params = self.params[p]
        request_id = f"{request.request_id}-{p}" if request.numbered else request.request_id
        if (log := self._text.request_log) is not None:
            log.log_inputs(
                request_id,
                prompt.text,
                prompt.token_ids,
                params,
                self.lora_request,
                request.sampling.watermarking,
            )
        if isinstance(params, BeamSearchParams):
            search = BeamSearch(
                self._text,
                request_id=request.request_id,
                prompt=prompt,
                params=params,
                cache_salt=request.cache_salt,
                lora_request=self.lora_request,
                trace_headers=request.trace_headers,
            )
            return BeamSearchStream(search)
        # positional: a class called with keywords gets them as a dict (~1 us more for these)
        return SequenceStream(
            self._text,
            request_id,
            prompt,
            params,
            request.sampling.n or 1,  # n
            request.priority,
            request.data_parallel_rank,
            request.cache_salt,
            self.lora_request,
            request.reasoning_ended,
            request.reasoning_parser_kwargs,
            request.trace_headers,
        )

    def sources(self) -> list[UpdateSource]:
        """Every prompt's :meth:`source`, in order."""
        return [self.source(p) for p in range(len(self.prompts))]


class GenerateFailed(Exception):
    """vLLM's ``EngineGenerateError``: its engine client failed the request on an unexpected
    error (a plain ``ValueError`` of its input processing); a 500 with an empty message."""

    def __init__(self) -> None:
        super().__init__("")


class TokenPrompt(msgspec.Struct, gc=False):
    """A token-in/token-out request past :meth:`TextLlm.token_prompt`'s checks."""

    request: TextRequest
    prompt: PreparedPrompt
    max_tokens: int | None
    """The budget (None: up to the context's end)."""
    sampling: SamplingRequest
    """The request's sampling fields, as :meth:`TextLlm.generate_tokens` lowers them."""


def refuse_request_mm_kwargs(mm_processor_kwargs: Any, media_io_kwargs: Any) -> None:
    """vLLM's ``validate_request_mm_kwargs`` without ``--trust-request-mm-kwargs`` (which this
    frontend does not take): per-request processor and media options (any value that is true
    in Python) are refused."""
    if mm_processor_kwargs:
        raise InvalidInput(
            "Per-request mm_processor_kwargs are disabled by default because they can change "
            "multimodal preprocessing resource usage. Start the server with "
            "--trust-request-mm-kwargs only when clients are trusted.",
            parameter="mm_processor_kwargs",
        )
    if media_io_kwargs:
        raise InvalidInput(
            "Per-request media_io_kwargs are disabled by default because they can change "
            "multimodal media loading resource usage. Start the server with "
            "--trust-request-mm-kwargs only when clients are trusted.",
            parameter="media_io_kwargs",
        )


def completion_prompts(request: TextRequest) -> list[str | list[int]]:
    """The completions ``prompt`` as a list of prompts, after vLLM's
    ``OnlineRenderer.render_completion`` checks (``suffix``, ``prompt_embeds``, empty)."""
    prompt = request.prompt
    if request.suffix is not None:
        # No model here has FIM rendering.
        if request.echo:
            raise BadInput("Echo is unsupported with suffix.", param="suffix")
        if request.prompt_embeds is not None:
            raise BadInput("suffix is not supported with prompt_embeds", param="suffix")
        if request.truncate_prompt_tokens is not None:
            raise BadInput("suffix is not supported with truncate_prompt_tokens", param="suffix")
        if isinstance(prompt, str) or (
            isinstance(prompt, list) and all(isinstance(p, str) for p in prompt)
        ):
            raise BadInput(
                "suffix is only supported for models with FIM completion rendering",
                param="suffix",
            )
    refuse_request_mm_kwargs(request.mm_processor_kwargs, request.media_io_kwargs)
    if request.prompt_embeds is not None and request.prompt_embeds != []:
        raise InvalidInput(
            "You must set `--enable-prompt-embeds` to input `prompt_embeds`.",
            parameter="prompt_embeds",
        )
    if prompt is None or prompt == "":
        raise InvalidInput(
            "Either prompt or prompt_embeds must be provided and non-empty.",
            parameter="prompt",
        )
    if isinstance(prompt, str):
        return [prompt]
    if prompt and all(isinstance(t, int) for t in prompt):
        prompts: list[str | list[int]] = [list(prompt)]
    elif not prompt:  # vLLM's renderer refuses an empty prompt list (render_prompts)
        raise BadInput("You must pass at least one prompt")
    else:
        prompts = list(prompt)
    if request.echo:
        _check_decodable(prompts)
    return prompts


def _check_decodable(prompts: list[str | list[int]]) -> None:
    # To echo a token-id prompt vLLM's renderer decodes it first, before the engine checks the
    # ids: the tokenizer's binding refuses an id beyond 32 bits with its conversion error.
    # (the first such id decides the message, as the binding converts them in order)
    for p in prompts:
        if isinstance(p, list) and p and max(p) >= 1 << 32:
            first = next(t for t in p if t >= 1 << 32)
            if first >= 1 << 63:
                raise BadInput("Python int too large to convert to C long")
            raise BadInput("number too large to fit in target type")


def _decodes(request: TextRequest) -> bool:
    """Whether serving ``request`` decodes token ids (logprobs' token strings, an echoed
    prompt, beam search's texts), which a released ``tokenizers`` object is loaded again for."""
    sampling = request.sampling
    return (
        request.echo
        or request.use_beam_search
        or sampling.logprobs is not None
        or sampling.prompt_logprobs is not None
    )


def _sampling_request(request: TextRequest) -> SamplingRequest:
    # The request's constraint merged with response_format, and its repetition detection, as
    # vLLM's to_sampling_params takes them (set on the request's own SamplingRequest).
    structured = None
    if request.structured_outputs is not None or request.response_format is not None:
        structured = merge_response_format(
            None
            if request.structured_outputs is None
            else structured_outputs_params(request.structured_outputs),
            request.response_format,
        )
    sampling = request.sampling
    sampling.structured_outputs = structured
    sampling.repetition_detection = _repetition_detection(request.repetition_detection)
    return sampling


def _repetition_detection(value: Any) -> RepetitionDetectionParams | None:
    if value is None:
        return None
    try:
        return msgspec.convert(value, RepetitionDetectionParams)
    except msgspec.ValidationError as e:
        raise InvalidInput(
            f"Invalid repetition_detection: {e}", parameter="repetition_detection"
        ) from None

"""What the completions and chat handlers share: the serving context, the mapping of a
request's sampling fields onto the text layer, request ids, and ``usage``.

Shapes and orders follow vLLM 0.32's serving code (vllm/entrypoints/openai/completion/serving.py
and chat_completion/serving.py); the comments there name the vLLM behaviour being mirrored.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from vllm_frontend.llm import LLM, LoraAdapters, public_request_id
from vllm_frontend.text.llm import TextLlm
from vllm_frontend.text.logprobs import TokenStrings
from vllm_frontend.text.request_log import RequestLog
from vllm_frontend.text.sampling import ModelSamplingInfo, SamplingRequest
from vllm_frontend.text.tokenizer import Tokenizer

from . import errors
from .services import check_model
from .transport import Request

if TYPE_CHECKING:
    from vllm_frontend.multimodal.llm import MultimodalLlm

logger = logging.getLogger(__name__)

__all__ = [
    "ServingContext",
    "Usage",
    "UsageChunk",
    "include_usage_flags",
    "sampling_request",
]


class ServingContext:
    """Everything the generation handlers need, built once at startup: the server's options
    and the text layer's facade (:attr:`text`) over ``llm``."""

    __slots__ = (
        "chat_renderer",
        "enable_force_include_usage",
        "enable_prompt_tokens_details",
        "has_kv_connector",
        "media",
        "response_role",
        "return_tokens_as_token_ids",
        "runtime_lora_updating",
        "served_model_names",
        "sse_keep_alive_interval",
        "system_fingerprint",
        "text",
        "trace",
    )

    def __init__(
        self,
        *,
        llm: LLM,
        tokenizer: Tokenizer,
        served_model_names: list[str],
        max_model_len: int,
        sampling: ModelSamplingInfo,
        return_tokens_as_token_ids: bool = False,
        enable_force_include_usage: bool = False,
        enable_prompt_tokens_details: bool = False,
        response_role: str = "assistant",
        chat_renderer: Any = None,
        token_strings: TokenStrings | None = None,
        system_fingerprint: str | None = None,
        tokenizer_truncation_side: str = "left",
        stream_interval: int = 1,
        sse_keep_alive_interval: float = 0.0,
        multimodal: Callable[[TextLlm], MultimodalLlm] | None = None,
        request_log: RequestLog | None = None,
        has_kv_connector: bool = False,
        adapters: LoraAdapters | None = None,
        runtime_lora_updating: bool = False,
    ) -> None:
        """``sampling``: model-level sampling inputs (generation-config defaults, EOS ids,
        limits); ``chat_renderer``: a ``vllm_frontend.chat.ChatRenderer`` (for the chat route);
        ``tokenizer_truncation_side``: the side ``truncate_prompt_tokens`` cuts when the request
        names none (vLLM loads generation models' tokenizers with ``truncation_side="left"``);
        ``stream_interval``: ``--stream-interval``; ``sse_keep_alive_interval``: seconds of
        stream idleness before an SSE keep-alive comment (0 = never); ``multimodal`` makes the
        multimodal facade over the text one (a model that takes media); ``adapters``: the
        loaded LoRA adapters (a request's ``model`` may name one); ``runtime_lora_updating``:
        ``VLLM_ALLOW_RUNTIME_LORA_UPDATING`` is set."""
        self.text = TextLlm(
            llm,
            tokenizer,
            max_model_len,
            sampling,
            token_strings=token_strings,
            tokenizer_truncation_side=tokenizer_truncation_side,
            stream_interval=stream_interval,
            request_log=request_log,
            adapters=adapters,
        )
        """The text layer's facade."""
        self.runtime_lora_updating = runtime_lora_updating
        self.media = multimodal(self.text) if multimodal is not None else None
        """The multimodal layer's facade (None: a text-only model)."""
        self.served_model_names = served_model_names
        self.return_tokens_as_token_ids = return_tokens_as_token_ids
        self.enable_force_include_usage = enable_force_include_usage
        self.enable_prompt_tokens_details = enable_prompt_tokens_details
        self.response_role = response_role
        self.chat_renderer = chat_renderer
        self.system_fingerprint = system_fingerprint
        self.sse_keep_alive_interval = sse_keep_alive_interval
        self.has_kv_connector = has_kv_connector
        """``--kv-transfer-config`` is set: a request the engines never got that asked for a
        remote prefill is reported to them (see :func:`notify_kv_transfer_rejected`)."""
        self.trace: Callable[[Request], dict[str, str] | None] | None = (
            extract_trace_headers
            if getattr(llm, "tracer", None) is not None
            else self._warn_untraced
        )
        """A request's trace headers for its engine requests (``--otlp-traces-endpoint``);
        without it, a check for vLLM's one warning, then None (see :func:`trace_headers`)."""

    def _warn_untraced(self, request: Request) -> None:
        # AsyncLLM's add_request: trace headers without an endpoint are dropped, with a warning
        # logged once; after that no request is looked at.
        if b"traceparent" in request.headers or b"tracestate" in request.headers:
            logger.warning("Received a request with trace context but tracing is disabled")
            self.trace = None

    @property
    def model_name(self) -> str:
        """The name responses for the base model carry (the first served name)."""
        return self.served_model_names[0]

    def model_name_for(self, model: str | None) -> str:
        """The name a response to a request for ``model`` carries: the LoRA adapter's name if
        ``model`` names one, else the first served name (vLLM's ``model_name(lora_request)``)."""
        if model and model in self.text.adapters:
            return model
        return self.served_model_names[0]

    def check_model(self, model: str | None) -> None:
        """vLLM's ``_check_model``: an absent (or empty) model means the default, a served name
        or a loaded LoRA adapter is served; another one is 404."""
        check_model(self.served_model_names, model, self.text.adapters, self.runtime_lora_updating)

    def as_token_ids(self, req: Any) -> bool:
        """``return_tokens_as_token_ids``: the request's, else the server's."""
        value = getattr(req, "return_tokens_as_token_ids", None)
        return self.return_tokens_as_token_ids if value is None else bool(value)


def sampling_request(req: Any, *, chat: bool) -> SamplingRequest:
    """The sampling fields of a completions (``chat=False``) or chat request in the text
    layer's terms, mapped as vLLM's ``to_sampling_params`` maps them (``structured_outputs``
    and ``repetition_detection`` go to the text request as they are)."""
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
    extra_args: dict[str, Any] = dict(req.vllm_xargs or {})
    if req.kv_transfer_params:
        extra_args["kv_transfer_params"] = req.kv_transfer_params
    if req.ec_transfer_params:
        extra_args["ec_transfer_params"] = req.ec_transfer_params
    # Positional, in field order: a call with more than 15 keywords goes through a keyword
    # dict (CPython 3.11 compiles it to CALL_FUNCTION_EX), ~1 us more per request.
    return SamplingRequest(
        req.n,
        req.temperature,
        req.top_p,
        req.top_k,
        req.min_p,
        req.presence_penalty,
        req.frequency_penalty,
        req.repetition_penalty,
        req.seed,
        req.stop,
        req.stop_token_ids,
        req.include_stop_str_in_output,
        req.ignore_eos,
        req.min_tokens,
        logprobs,
        prompt_logprobs,
        req.logprob_token_ids or None,  # logprob_token_ids
        req.skip_special_tokens,
        req.spaces_between_special_tokens,
        req.logit_bias,
        req.allowed_token_ids,
        req.bad_words,
        extra_args or None,  # extra_args
        bool(req.stream),  # stream
        req.stream_interval,
        req.watermarking,
        req.thinking_token_budget,
    )


def request_id_for(prefix: str, request: Request, body_request_id: str | None) -> str:
    """The public id (``X-Request-Id`` header, else the body's ``request_id``, else random)."""
    return public_request_id(prefix, request.header(b"x-request-id"), body_request_id)


async def notify_kv_transfer_rejected(ctx: ServingContext, request: Request, req: Any) -> None:
    """vLLM's ``_with_kv_transfer_rejection_cleanup``: a request asking for a remote prefill
    (``kv_transfer_params.do_remote_prefill``) that failed here is sent to the engines
    pre-aborted, so that their KV connector frees what the prefill side pinned for it."""
    params = getattr(req, "kv_transfer_params", None)
    if not params or not params.get("do_remote_prefill"):
        return
    request_id = getattr(req, "request_id", None) or uuid.uuid4().hex
    try:
        await ctx.text.llm.notify_kv_transfer_rejected(
            request_id, params, data_parallel_rank(request)
        )
    except Exception:
        logger.warning(
            "Failed to notify KV connector about rejected request %s", request_id, exc_info=True
        )


def extract_trace_headers(request: Request) -> dict[str, str] | None:
    """The request's ``traceparent`` and ``tracestate`` headers (vLLM's ``_get_trace_headers``:
    None when it has neither)."""
    headers = request.headers
    if b"traceparent" not in headers and b"tracestate" not in headers:
        return None
    return {
        name: value.decode("latin-1")
        for name, key in (("traceparent", b"traceparent"), ("tracestate", b"tracestate"))
        if (value := headers.get(key)) is not None
    }


def trace_headers(ctx: ServingContext, request: Request) -> dict[str, str] | None:
    """What a generation request's ``trace_headers`` are: the HTTP request's trace context when
    tracing is on, else None (vLLM's warning logged for the first request that has one)."""
    extract = ctx.trace
    return None if extract is None else extract(request)


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
    """``usage.prompt_tokens_details`` (with ``--enable-prompt-tokens-details``) on a stream's
    usage chunk, whose nulls vLLM leaves out: the prompt tokens read from the prefix cache and
    (chat) those written to it."""

    cached_tokens: int | None = None
    created_cache_tokens: int | None = None
    multimodal_tokens: dict[str, int] | None = None


class FullPromptTokensDetails(msgspec.Struct):
    """``usage.prompt_tokens_details`` in a full response: vLLM's ``PromptTokenUsageInfo``
    with every field (``multimodal_tokens``: placeholder tokens per modality, chat only)."""

    cached_tokens: int | None = None
    created_cache_tokens: int | None = None
    multimodal_tokens: dict[str, int] | None = None


class Usage(msgspec.Struct):
    """``usage`` as vLLM's ``UsageInfo.model_dump()`` writes it in full responses."""

    prompt_tokens: int
    total_tokens: int
    completion_tokens: int
    prompt_tokens_details: FullPromptTokensDetails | None = None
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


def usage(
    prompt: int,
    completion: int,
    cached: int | None = None,
    created: int | None = None,
    multimodal: dict[str, int] | None = None,
) -> Usage:
    """A full-response ``usage`` object (details when a cache count or a modality's
    placeholder count is given)."""
    details = None
    if cached is not None or created is not None or multimodal:
        details = FullPromptTokensDetails(cached, created, multimodal or None)
    return Usage(prompt, prompt + completion, completion, details)


def usage_chunk(
    prompt: int,
    completion: int,
    cached: int | None = None,
    created: int | None = None,
    multimodal: dict[str, int] | None = None,
) -> UsageChunk:
    """A stream-chunk ``usage`` object (details when a cache count or a modality's placeholder
    count is given)."""
    details = None
    if cached is not None or created is not None or multimodal:
        details = PromptTokensDetails(cached, created, multimodal or None)
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

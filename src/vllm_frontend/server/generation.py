"""What the completions and chat handlers share: the serving context, usage, SSE framing, and
the per-sample text pipeline between the llm stream and the OpenAI response shapes.

Shapes and orders follow vLLM 0.32's serving code (vllm/entrypoints/openai/completion/serving.py
and chat_completion/serving.py); the comments there name the vLLM behaviour being mirrored.
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from vllm_frontend.llm import LLM, GenerateRequest, OutputKind, public_request_id
from vllm_frontend.text.logprobs import TokenStrings
from vllm_frontend.text.output import FINISH_REASONS, SequenceOutput, SequenceProcessor
from vllm_frontend.text.tokenizer import Tokenizer

from . import errors
from .http import Request

__all__ = [
    "DONE",
    "ServingContext",
    "Usage",
    "UsageChunk",
    "generate_sequences",
    "include_usage_flags",
    "sse",
]

DONE = b"data: [DONE]\n\n"
"""The last event of every stream."""

_json = msgspec.json.Encoder()


def sse(payload: Any) -> bytes:
    """One ``data:`` event with ``payload`` as compact JSON."""
    return b"data: " + _json.encode(payload) + b"\n\n"


@dataclass
class ServingContext:
    """Everything the generation handlers need, built once at startup."""

    llm: LLM
    tokenizer: Tokenizer
    served_model_names: list[str]
    max_model_len: int
    lower_sampling: Callable[..., Any]
    """``(request, *, max_tokens, output_kind, prompt_len) -> engine SamplingParams``; raises
    ``ValueError`` with vLLM's message for invalid values (the text layer's lowering)."""
    default_max_tokens: int | None = None
    """``max_new_tokens`` from the generation config (vLLM's ``default_sampling_params``)."""
    override_max_tokens: int | None = None
    return_tokens_as_token_ids: bool = False
    enable_force_include_usage: bool = False
    enable_prompt_tokens_details: bool = False
    response_role: str = "assistant"
    chat_renderer: Any = None
    """A ``vllm_frontend.chat.ChatRenderer`` (needed by the chat route)."""
    token_strings: TokenStrings | None = None
    system_fingerprint: str | None = None

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
        fallback = requested if requested is not None else self.default_max_tokens
        if fallback is not None:
            candidates.append(fallback)
        if self.override_max_tokens is not None:
            candidates.append(self.override_max_tokens)
        return min(candidates)

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

    def check_max_tokens_param(self, max_tokens: int | None, name: str) -> None:
        """vLLM's ``TokenizeParams.__post_init__``: an output budget above the context is a 400."""
        if max_tokens is not None and max_tokens > self.max_model_len:
            raise errors.InvalidParameter(
                f"{name}={max_tokens} cannot be greater than max_model_len={self.max_model_len}."
                " Please request fewer output tokens.",
                parameter=name,
                value=max_tokens,
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


@dataclass
class PreparedPrompt:
    """One prompt ready to generate: its token ids and (for echo) its text."""

    token_ids: list[int]
    text: str | None


async def generate_sequences(
    ctx: ServingContext,
    *,
    request_id: str,
    prompt: PreparedPrompt,
    params: Any,
    n: int,
    priority: int = 0,
    data_parallel_rank: int | None = None,
    cache_salt: str | None = None,
) -> AsyncGenerator[tuple[int, SequenceOutput, int | None], None]:
    """Run one prompt's ``n`` samples; yield ``(index, output, num_cached_tokens)`` per update.

    Detokenization, stop strings and logprobs run incrementally on every engine output (as
    vLLM's output processor does) whatever the request's output kind; with FINAL_ONLY params
    each sample yields once, when it finishes. A stop string ends its sample and aborts the
    engine request. Leaving early (disconnect) aborts whatever is still running.
    """
    wants_logprobs = params.logprobs is not None or params.prompt_logprobs is not None
    strings = ctx.strings() if wants_logprobs else None
    procs = [
        SequenceProcessor(
            ctx.tokenizer, prompt.token_ids, params, token_strings=strings, request_id=request_id
        )
        for _ in range(n)
    ]
    req = GenerateRequest(
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
    async with ctx.llm.generate(req) as stream:
        async for out in stream:
            proc = procs[out.index]
            lp = out.logprobs[0] if len(out.logprobs) == 1 else _merge_logprobs(out.logprobs)
            plp = out.prompt_logprobs
            code = FINISH_REASONS.index(out.finish_reason) if out.finish_reason else None
            seq = proc.process(
                out.token_ids,
                code,
                out.stop_reason,
                new_logprobs=_triple(lp),
                new_prompt_logprobs=_triple(plp),
            )
            if seq is None:
                continue
            if seq.finish_reason == "error":
                raise GenerationFailed()
            if seq.abort_engine:
                await stream.finish_sample(out.index, "stop")
            yield out.index, seq, out.num_cached_tokens


def _triple(lp: Any) -> tuple[Any, Any, Any] | None:
    if lp is None:
        return None
    ranks = getattr(lp, "sampled_token_ranks", None)
    if ranks is None:
        ranks = lp.selected_token_ranks
    return (_np(lp.logprob_token_ids), _np(lp.logprobs), _np(ranks))


def _np(value: Any) -> Any:
    return value.numpy() if hasattr(value, "numpy") else value


def _merge_logprobs(chunks: Sequence[Any]) -> Any:
    # Only FINAL_ONLY llm streams carry several; the handlers use DELTA (one per output).
    return chunks[0] if chunks else None


_SAMPLING_EPS = 1e-5
_MIN_TEMPERATURE = 0.01
_OPENAI_DEFAULTS = {
    "repetition_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": 0,
    "min_p": 0.0,
}


@dataclass
class SamplingDefaults:
    """Model-level inputs of the lowering: generation-config defaults and EOS ids."""

    defaults: dict[str, Any]
    """vLLM's ``get_diff_sampling_param()`` (generation_config.json sampling keys)."""
    eos_token_id: int | None
    """The tokenizer's EOS id."""
    generation_eos_ids: list[int]
    """``eos_token_id`` of generation_config.json (int or list, as a list)."""
    tokenizer: Tokenizer | None = None


def lower_sampling_params(
    req: Any, *, max_tokens: int, prompt_len: int, chat: bool, model: SamplingDefaults
) -> Any:
    """A request's engine ``SamplingParams``, built like vLLM's ``to_sampling_params`` +
    ``SamplingParams.__post_init__`` + ``update_from_generation_config`` (interim, until the
    text layer's lowering is wired in); invalid values raise ``ValueError``."""
    from vllm_frontend.engine.protocol import RequestOutputKind, SamplingParams
    from vllm_frontend.engine.validate import validate_sampling_params

    values = {
        name: (v if (v := getattr(req, name, None)) is not None else model.defaults.get(name, d))
        for name, d in _OPENAI_DEFAULTS.items()
    }
    stop = getattr(req, "stop", None)
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    stop_ids = list(dict.fromkeys(getattr(req, "stop_token_ids", None) or []))
    ignore_eos = bool(getattr(req, "ignore_eos", False))
    echo = bool(getattr(req, "echo", False))
    if chat:
        top = getattr(req, "top_logprobs", 0)
        logprobs = top if getattr(req, "logprobs", False) else None
        prompt_logprobs = getattr(req, "prompt_logprobs", None)
        if prompt_logprobs is None and echo:
            prompt_logprobs = top
        engine_max = max_tokens
    else:
        logprobs = getattr(req, "logprobs", None)
        prompt_logprobs = getattr(req, "prompt_logprobs", None)
        if prompt_logprobs is None and echo:
            prompt_logprobs = logprobs
        engine_max = 1 if echo and req.max_tokens == 0 else max_tokens
    temperature = float(values["temperature"])
    if 0 < temperature < _MIN_TEMPERATURE:
        temperature = _MIN_TEMPERATURE
    seed = getattr(req, "seed", None)
    if seed == -1:
        seed = None
    include_stop = bool(getattr(req, "include_stop_str_in_output", False))
    params = SamplingParams(
        n=getattr(req, "n", 1) or 1,
        presence_penalty=float(values["presence_penalty"]),
        frequency_penalty=float(values["frequency_penalty"]),
        repetition_penalty=float(values["repetition_penalty"]),
        temperature=temperature,
        top_p=float(values["top_p"]),
        top_k=int(values["top_k"]),
        min_p=float(values["min_p"]),
        seed=seed,
        stop=stops,
        stop_token_ids=stop_ids,
        ignore_eos=ignore_eos,
        max_tokens=engine_max,
        min_tokens=getattr(req, "min_tokens", 0) or 0,
        logprobs=logprobs,
        prompt_logprobs=prompt_logprobs,
        skip_special_tokens=bool(getattr(req, "skip_special_tokens", True)),
        spaces_between_special_tokens=bool(getattr(req, "spaces_between_special_tokens", True)),
        include_stop_str_in_output=include_stop,
        output_kind=RequestOutputKind.DELTA if req.stream else RequestOutputKind.FINAL_ONLY,
        skip_clone=True,
        output_text_buffer_length=(
            max(len(s) for s in stops) - 1 if stops and not include_stop else 0
        ),
        logit_bias=(
            {int(k): float(v) for k, v in req.logit_bias.items()}
            if getattr(req, "logit_bias", None)
            else None
        ),
        allowed_token_ids=getattr(req, "allowed_token_ids", None),
        bad_words=list(getattr(req, "bad_words", None) or []),
        skip_reading_prefix_cache=prompt_logprobs is not None,
    )
    if temperature < _SAMPLING_EPS and params.n > 1:
        raise ValueError(f"n must be 1 when using greedy sampling, got {params.n}.")
    validate_sampling_params(params)
    if temperature < _SAMPLING_EPS:
        params.top_p, params.top_k, params.min_p = 1.0, 0, 0.0
    # update_from_generation_config: the primary EOS ends generation (unless ignore_eos); the
    # generation config's other EOS ids become stop ids; all of them gate min_tokens.
    all_stop = list(stop_ids)
    eos = model.eos_token_id
    if not ignore_eos:
        params.eos_token_id = eos
    if eos is not None and eos not in all_stop:
        all_stop.append(eos)
    extra = [i for i in dict.fromkeys(model.generation_eos_ids) if i != eos]
    if extra:
        for i in extra:
            if i not in all_stop:
                all_stop.append(i)
        if not ignore_eos:
            params.stop_token_ids = list(dict.fromkeys([*extra, *stop_ids]))
    params.all_stop_token_ids = all_stop
    return params

"""Lowering a request's sampling fields into the engine's `SamplingParams`.

Follows vLLM 0.32 step by step, so the engine receives what vLLM's own frontend would send:

1. defaults: request value → generation-config default → OpenAI default
   (`ChatCompletionRequest.to_sampling_params` / `CompletionRequest.to_sampling_params`);
2. `max_tokens`: `get_max_tokens` (vllm/entrypoints/serve/utils/api_utils.py), the smallest of
   what the context leaves, the request (or generation config) value and the server override;
   a prompt longer than the context is refused first with the renderer's message
   (`TokenizeParams._token_len_check`, vllm/renderers/params.py);
3. `SamplingParams.from_optional` + `__post_init__` normalisations (logit_bias keys to ints and
   clamped to ±100, temperature raised to 0.01, seed -1 → None, de-duplicated stop ids and bad
   words, hold-back length, greedy resets) and `_verify_args` (engine/validate.py, vLLM's
   messages);
4. `update_from_generation_config(generation_config, eos)` and `update_from_tokenizer`
   (vllm/v1/engine/input_processor.py): EOS handling and bad-word token ids.

`n > 1` is fanned out by the frontend like vLLM's `ParentRequest`: child `i` gets id `f"{i}_{id}"`,
`n = 1` and seed `seed + i` when seeded.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec

from vllm_frontend.engine.protocol import (
    RequestOutputKind,
    SamplingParams,
    StructuredOutputsParams,
)
from vllm_frontend.engine.tensors import NdArray
from vllm_frontend.engine.validate import (
    InvalidRequestError,
    RequestLimits,
    validate_sampling_params,
)
from vllm_frontend.text.guidance_checks import tekken_vocabulary
from vllm_frontend.text.structured_outputs import resolve_structured_outputs
from vllm_frontend.text.tokenizer import Tokenizer

__all__ = [
    "InvalidRequestError",
    "ModelSamplingInfo",
    "SamplingRequest",
    "check_debug_fields",
    "check_prompt_length",
    "check_prompt_text_length",
    "child_request_id",
    "child_sampling_params",
    "lower_sampling_params",
    "resolve_max_tokens",
    "uses_v2_model_runner",
]

_MIN_TEMPERATURE = 1e-2  # vLLM's _MAX_TEMP: smaller positive temperatures are raised to it
_SAMPLING_EPS = 1e-5  # below this temperature sampling is greedy
# SamplingParams._verify_args checks whose VLLMValidationError carries no `parameter`.
_UNNAMED_CHECKS = (
    "n must",
    "presence_penalty must",
    "frequency_penalty must",
    "repetition_penalty must",
    "top_k must",
    "min_p must",
    "min_tokens must",
    "stop_token_ids must contain",
    "stop cannot",
    "bad_words cannot",
)
_GREEDY_RESET = tuple(
    f.default
    for f in msgspec.structs.fields(SamplingParams)
    if f.name in ("top_p", "top_k", "min_p")
)
# OpenAI defaults vLLM falls back to after the generation config.
_OPENAI_DEFAULTS: dict[str, float | int] = {
    "repetition_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": 0,
    "min_p": 0.0,
}


class SamplingRequest(msgspec.Struct):
    """The sampling-related fields of a completions or chat request, already route-mapped.

    Routes map their own names onto these: chat `logprobs`+`top_logprobs` → `logprobs`
    (None when not requested), `max_completion_tokens`/`max_tokens` → `max_tokens`, and
    `prompt_logprobs` already defaulted for echo.
    """

    n: int | None = 1
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    min_tokens: int = 0
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    logprob_token_ids: list[int] | None = None
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    logit_bias: dict[str, float] | dict[int, float] | None = None
    allowed_token_ids: list[int] | None = None
    bad_words: list[str] | None = None
    extra_args: dict[str, Any] | None = None
    stream: bool = False
    stream_interval: int | None = None
    watermarking: bool | None = None
    thinking_token_budget: int | None = None
    structured_outputs: StructuredOutputsParams | None = None
    """The request's constraint (text.structured_outputs), before the backend is chosen."""
    repetition_detection: Any = None
    skip_reading_prefix_cache: bool | None = None
    prompt_logprob_token_ids: list[list[int]] | None = None
    """Token ids to score per causal prompt row (rows padded with -1 to the longest)."""
    prompt_logprob_start: int | None = None
    """The first causal prompt row scored by ``prompt_logprob_token_ids``."""
    routed_experts_prompt_start: int = 0
    trace_decode_token_ids: list[int] | None = None
    """Trace replay: the engine decodes these tokens instead of sampling."""


class ModelSamplingInfo(msgspec.Struct, frozen=True, kw_only=True):
    """Model-level inputs of the lowering, built once at startup."""

    max_model_len: int
    """The engines' context length (handshake `max_model_len`)."""
    eos_token_id: int | None
    """The tokenizer's primary EOS id."""
    generation_eos_token_ids: list[int] = []
    """`eos_token_id` of the generation config (ModelFiles.generation_eos_token_ids)."""
    sampling_defaults: dict[str, Any] = {}
    """ModelFiles.sampling_defaults (`max_tokens` included when the config sets it)."""
    override_max_tokens: int | None = None
    """A server-wide cap on max_tokens (vLLM's `override_max_tokens`), if any."""
    limits: RequestLimits | None = None
    """Vocabulary size / max_logprobs for the model-dependent checks."""
    structured_outputs_backend: str = "auto"
    """`--structured-outputs-config.backend`: the grammar backend named to the engine."""
    watermarking: bool = False
    """The engines run with a watermark config: vLLM's input processor then resolves a
    request's ``watermarking`` to True unless it opts out (without one, always False)."""
    v2_model_runner: bool = False
    """The engines run vLLM's V2 model runner (:func:`uses_v2_model_runner`): the one that
    scores ``prompt_logprob_token_ids``."""
    trace_replay: bool = False
    """The engines run with ``--enable-trace-replay`` (``trace_decode_token_ids`` allowed)."""
    mistral_tokenizer: str | None = None
    """``tekken`` or ``spm`` for a mistral_common tokenizer (``--tokenizer-mode mistral``:
    vLLM sends its Lark grammars to guidance, and refuses lm-format-enforcer)."""
    thinking_budget: bool = True
    """The engines may take a request's ``thinking_token_budget``: vLLM's input processor
    refuses it unless a reasoning parser or ``--reasoning-config`` configures reasoning."""


def check_prompt_length(num_tokens: int, max_model_len: int, *, from_text: bool) -> None:
    """Refuse a prompt longer than the context, with vLLM's message (HTTP 400, input_tokens).

    vLLM tokenizes text prompts truncated to one token over the limit, so for text it can only
    report "at least <limit + 1>" tokens; token-id prompts report their real length.
    """
    if num_tokens <= max_model_len:
        return
    if from_text:
        num_tokens = max_model_len + 1
    qualifier = "at least " if num_tokens == max_model_len + 1 else ""
    raise InvalidRequestError(
        f"This model's maximum context length is {max_model_len} tokens. However, your prompt "
        f"contains {qualifier}{num_tokens} input tokens, which exceeds this limit even "
        "without any output tokens. Please reduce the length of the input prompt.",
        "input_tokens",
    )


def check_prompt_text_length(text: str, max_model_len: int, tokenizer: Tokenizer) -> None:
    """vLLM's pre-tokenization guard: refuse text that cannot fit even at the longest token."""
    limit = max_model_len * tokenizer.max_chars_per_token
    if len(text) > limit:
        raise InvalidRequestError(
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"prompt contains {len(text)} characters (more than {limit} characters, which is "
            f"the upper bound for {max_model_len} input tokens). Please reduce the length of "
            "the input prompt.",
            "input_text",
        )


def resolve_max_tokens(
    requested: int | None,
    prompt_len: int,
    max_model_len: int,
    *,
    default_max_tokens: int | None = None,
    override_max_tokens: int | None = None,
) -> int:
    """vLLM's `get_max_tokens`: what the context leaves, capped by the request or default."""
    if max_model_len < prompt_len:
        raise InvalidRequestError(
            f"Input length ({prompt_len}) exceeds model's maximum context length ({max_model_len})."
        )
    fallback = requested if requested is not None else default_max_tokens
    # The smallest of the context's rest, the request's (or default) and the override.
    max_tokens = max_model_len - prompt_len
    if fallback is not None and fallback < max_tokens:
        max_tokens = fallback
    if override_max_tokens is not None and override_max_tokens < max_tokens:
        max_tokens = override_max_tokens
    return max_tokens


def lower_sampling_params(
    req: SamplingRequest,
    *,
    max_tokens: int | None,
    model: ModelSamplingInfo,
    tokenizer: Tokenizer | None = None,
    engine_side: bool = True,
) -> SamplingParams:
    """The engine `SamplingParams` vLLM would build for `req` (max_tokens already resolved).

    Raises InvalidRequestError with vLLM's message for any value vLLM refuses. Without
    `engine_side`, only the request-level part (steps 1-3, without the model-dependent checks):
    what vLLM's render routes return, before its engine-side input processing.
    """
    defaults = model.sampling_defaults
    values = {
        name: (v if (v := getattr(req, name)) is not None else defaults.get(name, fallback))
        for name, fallback in _OPENAI_DEFAULTS.items()
    }
    logit_bias = _logit_bias(req.logit_bias)
    temperature = values["temperature"]
    if isinstance(temperature, int | float) and 0 < temperature < _MIN_TEMPERATURE:
        temperature = _MIN_TEMPERATURE
    seed = None if req.seed == -1 else req.seed
    stop = req.stop
    stops = [] if stop is None else [stop] if isinstance(stop, str) else list(stop)
    stop_token_ids = list(dict.fromkeys(req.stop_token_ids or []))
    bad_words = list(dict.fromkeys(req.bad_words or []))
    prompt_logprobs = req.prompt_logprobs
    watermarking = req.watermarking
    watermarking_skipped = False
    if engine_side:  # vLLM's input processor resolves it (apply_watermarking)
        asked = watermarking is not False
        watermarking = model.watermarking and asked and temperature != 0
        watermarking_skipped = model.watermarking and asked and not watermarking
    skip_reading = req.skip_reading_prefix_cache
    if skip_reading is None:
        skip_reading = prompt_logprobs is not None or req.prompt_logprob_token_ids is not None
    params = SamplingParams(
        n=1 if req.n is None else req.n,
        presence_penalty=values["presence_penalty"],
        frequency_penalty=values["frequency_penalty"],
        repetition_penalty=values["repetition_penalty"],
        temperature=temperature,
        watermarking=watermarking,
        watermarking_skipped=watermarking_skipped,
        top_p=values["top_p"],
        top_k=values["top_k"],
        min_p=values["min_p"],
        seed=seed,
        stop=stops,
        stop_token_ids=stop_token_ids,
        ignore_eos=req.ignore_eos,
        max_tokens=max_tokens,
        min_tokens=req.min_tokens,
        logprobs=req.logprobs,
        prompt_logprobs=prompt_logprobs,
        logprob_token_ids=req.logprob_token_ids,
        skip_special_tokens=req.skip_special_tokens,
        spaces_between_special_tokens=req.spaces_between_special_tokens,
        include_stop_str_in_output=req.include_stop_str_in_output,
        output_kind=RequestOutputKind.DELTA if req.stream else RequestOutputKind.FINAL_ONLY,
        stream_interval=req.stream_interval,
        skip_clone=True,
        output_text_buffer_length=(
            max(len(s) for s in stops) - 1 if stops and not req.include_stop_str_in_output else 0
        ),
        logit_bias=logit_bias,
        allowed_token_ids=req.allowed_token_ids,
        extra_args=req.extra_args,
        bad_words=bad_words,
        skip_reading_prefix_cache=skip_reading,
        thinking_token_budget=req.thinking_token_budget,
        repetition_detection=req.repetition_detection,
        prompt_logprob_token_ids=_score_rows(req.prompt_logprob_token_ids),
        prompt_logprob_start=req.prompt_logprob_start,
        routed_experts_prompt_start=req.routed_experts_prompt_start,
        trace_decode_token_ids=req.trace_decode_token_ids,
    )
    limits = model.limits
    if not engine_side:
        limits = RequestLimits(max_n=limits.max_n) if limits is not None else None
    try:
        validate_sampling_params(params, limits)
    except InvalidRequestError as e:
        if str(e).startswith(_UNNAMED_CHECKS):
            # vLLM raises these without naming the parameter, so its error JSON has no param.
            raise InvalidRequestError(str(e)) from None
        raise
    if req.structured_outputs is not None:
        # Checked after the other parameters, as vLLM's SamplingParams.verify does.
        params.structured_outputs = (
            resolve_structured_outputs(
                req.structured_outputs,
                model.structured_outputs_backend,
                mistral_tokenizer=model.mistral_tokenizer,
                tekken=_tekken_vocabulary(tokenizer, model),
            )
            if engine_side
            else req.structured_outputs
        )
    if engine_side and params.thinking_token_budget is not None and not model.thinking_budget:
        raise InvalidRequestError(
            "thinking_token_budget is set but reasoning_config is not configured. Please set "
            "--reasoning-parser and/or --reasoning-config to use thinking_token_budget."
        )
    if params.temperature < _SAMPLING_EPS:
        # Greedy: vLLM resets the truncation knobs (n > 1 was refused by the validation), to
        # the defaults' own objects, which msgspec then omits (it compares floats by identity).
        params.top_p, params.top_k, params.min_p = _GREEDY_RESET
    if not engine_side:
        return params
    _apply_eos(params, model)
    if tokenizer is not None and bad_words:
        params.bad_words_token_ids = _bad_words_token_ids(bad_words, tokenizer)
    return params


def _tekken_vocabulary(tokenizer: Any, model: ModelSamplingInfo) -> Callable[[], Any] | None:
    # guidance's check with a tekken tokenizer's own vocabulary, as vLLM's (built on first use).
    mistral = getattr(tokenizer, "mistral", None)
    if model.mistral_tokenizer != "tekken" or mistral is None:
        return None
    return lambda: tekken_vocabulary(mistral)


def check_debug_fields(
    params: SamplingParams, prompt_len: int, max_model_len: int, model: ModelSamplingInfo
) -> None:
    """vLLM's input-processor steps for the scoring and replay fields of ``params`` (lowered
    engine-side): the model runner and trace-replay gates, the ranges that depend on the
    prompt's length, and trace replay's generation settings (``params`` is updated)."""
    if params.prompt_logprob_token_ids is not None and not model.v2_model_runner:
        # vLLM's VLLMValidationError names its parameter in its text, with no value here
        raise InvalidRequestError(
            "prompt_logprob_token_ids requires the V2 model runner (VLLM_USE_V2_MODEL_RUNNER=1). "
            "(parameter=prompt_logprob_token_ids)",
            "prompt_logprob_token_ids",
        )
    if params.trace_decode_token_ids and not model.trace_replay:
        raise InvalidRequestError(
            "trace_decode_token_ids is set but trace replay is not enabled. Start the engine "
            "with --enable-trace-replay to use it."
        )
    if not 0 <= params.routed_experts_prompt_start <= prompt_len:
        raise InvalidRequestError(
            "routed_experts_prompt_start must be between 0 and the prompt length "
            f"({prompt_len}), inclusive.",
            "routed_experts_prompt_start",
            params.routed_experts_prompt_start,
        )
    rows = params.prompt_logprob_token_ids
    if rows is not None:
        num_rows = max(prompt_len - 1 - (params.prompt_logprob_start or 0), 0)
        if rows.shape[0] != num_rows:
            raise InvalidRequestError(
                f"prompt_logprob_token_ids has {rows.shape[0]} rows, but the prompt has "
                f"{num_rows} scored rows (prompt_len - 1 - prompt_logprob_start).",
                "prompt_logprob_token_ids",
                rows.shape[0],
            )
    trace = params.trace_decode_token_ids
    if trace:  # InputProcessor._normalize_trace_replay_params
        trace = trace[: max(max_model_len - prompt_len, 1)]
        params.trace_decode_token_ids = trace
        params.max_tokens = min(len(trace), params.max_tokens or len(trace))
        params.min_tokens = 0
        params.ignore_eos = True
        params.eos_token_id = None
        params.stop = []
        params.stop_token_ids = []
        params.all_stop_token_ids = []


def _score_rows(rows: list[list[int]] | None) -> NdArray | None:
    """``prompt_logprob_token_ids`` as vLLM's ``SamplingParams`` keeps them: one int32 row per
    scored prompt row, padded with -1 (an empty list is a (0, 0) array, refused later)."""
    if rows is None:
        return None
    import numpy as np

    width = max(map(len, rows), default=0)
    array = np.full((len(rows), width), -1, dtype=np.int64)
    try:
        for i, row in enumerate(rows):
            array[i, : len(row)] = row
    except (TypeError, ValueError, OverflowError):
        raise InvalidRequestError(
            "prompt_logprob_token_ids must contain integer token ids.",
            "prompt_logprob_token_ids",
        ) from None
    if array.size and (int(array.min()) < -1 or int(array.max()) > 2**31 - 1):
        return NdArray.from_numpy(array)  # refused as out of the vocabulary
    return NdArray.from_numpy(array.astype(np.int32))


def uses_v2_model_runner(watermark_configured: bool) -> bool:
    """Whether vLLM's engines run the V2 model runner (``VllmConfig.use_v2_model_runner``), as
    far as the frontend can tell: always with a watermark config, else as
    ``VLLM_USE_V2_MODEL_RUNNER`` says. Without the variable vLLM picks V2 where Triton has an
    active GPU backend, which a frontend cannot see: it assumes V1 (vLLM's CPU engines)."""
    if watermark_configured:
        return True
    value = os.environ.get("VLLM_USE_V2_MODEL_RUNNER")
    return value is not None and value.strip().lower() in ("1", "true")


def _logit_bias(bias: Mapping[Any, Any] | None) -> dict[int, float] | None:
    if bias is None:
        return None
    out: dict[int, float] = {}
    invalid: list[Any] = []
    for key, value in bias.items():
        try:
            token_id = int(key)
        except (TypeError, ValueError):
            invalid.append(key)
            continue
        out[token_id] = min(100.0, max(-100.0, float(value)))
    if invalid:
        raise InvalidRequestError(
            "logit_bias contains key(s) that cannot be converted to integer token IDs: "
            f"{invalid!r}",
            "logit_bias",
            invalid,
        )
    return out


def _apply_eos(params: SamplingParams, model: ModelSamplingInfo) -> None:
    # vLLM's `_all_stop_token_ids` is a set: stop ids first (in __post_init__), then the EOS,
    # then the generation config's other EOS ids. Building the same set in the same order gives
    # the same iteration order, hence the same bytes on the wire.
    stop_ids = params.stop_token_ids or []
    all_stop: set[int] = set(stop_ids)
    eos = model.eos_token_id
    if not params.ignore_eos:
        params.eos_token_id = eos
    if eos is not None:
        all_stop.add(eos)
    extra = set(model.generation_eos_token_ids)
    if eos is not None:
        extra.discard(eos)
    if extra:
        all_stop.update(extra)
        if not params.ignore_eos:
            extra.update(stop_ids)
            params.stop_token_ids = list(extra)
    params.all_stop_token_ids = list(all_stop)


def _bad_words_token_ids(bad_words: Sequence[str], tokenizer: Tokenizer) -> list[list[int]]:
    # vLLM's update_from_tokenizer: each word as given (left-stripped) and with a leading space;
    # the spaced variant only when it is a different first token of the same length.
    max_words = int(os.environ.get("VLLM_MAX_NUM_BAD_WORDS", "128"))
    out: list[list[int]] = []
    for word in bad_words:
        for prefix in ("", " "):
            ids = tokenizer.encode(prefix + word.lstrip(), add_special_tokens=False)
            if not ids:
                if not prefix:
                    raise InvalidRequestError(
                        "bad_words entries must tokenize to at least one token.",
                        "bad_words",
                        list(bad_words),
                    )
                continue
            if not prefix or (ids[0] != out[-1][0] and len(ids) == len(out[-1])):
                out.append(ids)
                if len(out) > max_words:
                    raise InvalidRequestError(
                        f"Too many bad words after tokenization: {len(out)}. "
                        f"The max number is {max_words}.",
                        "bad_words",
                    )
    invalid = [t for ids in out for t in ids if t < 0 or t > tokenizer.max_token_id]
    if invalid:
        raise InvalidRequestError(
            f"The model vocabulary size is {tokenizer.max_token_id + 1}, but the following "
            f"tokens were specified as bad: {invalid}. All token id values should be integers "
            f"satisfying: 0 <= token_id <= {tokenizer.max_token_id}.",
            "bad_words",
        )
    return out


def child_request_id(index: int, request_id: str) -> str:
    """The engine request id of choice `index` of an n > 1 request (vLLM's ParentRequest)."""
    return f"{index}_{request_id}"


def child_sampling_params(params: SamplingParams, index: int) -> SamplingParams:
    """The params of choice `index` of an n > 1 request: n = 1, seed + index when seeded."""
    child = copy.copy(params)
    child.n = 1
    if params.seed is not None:
        child.seed = params.seed + index
    return child

"""Request validation before anything reaches an engine (engine protocol §4.11).

The engine trusts its frontend: its input thread decodes without error handling, so a value its
structs reject (a SamplingParams range, a LoRA id, a wrong type) silently kills the thread or the
whole engine. Every check here mirrors one the engine (or vLLM's own frontend, where the engine
would crash instead) performs, so a frontend bug becomes a clear :class:`InvalidRequestError`
instead of a dead engine. The SamplingParams checks follow ``SamplingParams.__post_init__`` and
``_verify_args`` in vLLM 0.32's ``vllm/sampling_params.py``; the model-dependent ones follow its
``SamplingParams.verify`` and run only when the limit is known.
"""

from __future__ import annotations

import math
import operator
import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Annotated, Any

import msgspec

from vllm_frontend.engine.errors import ProtocolError
from vllm_frontend.engine.protocol import EngineCoreRequest
from vllm_frontend.engine.tensors import NdArray, Tensor, numpy_dtype_for_torch
from vllm_frontend.lazy import LazyModule, loaded

if TYPE_CHECKING:
    import numpy as np
else:
    np = LazyModule("numpy", globals(), "np")  # imported by the first use (vllm_frontend.lazy)

__all__ = ["InvalidRequestError", "PlainValueError", "RequestLimits", "validate_request"]

_SAMPLING_EPS = 1e-5  # vLLM: below this temperature sampling is greedy
_MAX_LOGPROB_TOKEN_IDS = 128  # vLLM's MAX_LOGPROB_TOKEN_IDS
_INT64_MIN = -(2**63)
_INT64_END = 2**63 - 1
_UINT64_END = 2**64
# torch dtypes without a numpy equivalent, with their item sizes.
_TORCH_ONLY_ITEMSIZE = {
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1,
    "float8_e8m0fnu": 1,
}
# SamplingParams fields checked for their type, in vLLM's order: numbers, then flags. Exact
# ``int``/``float``/``bool`` pass at once; anything else goes through the per-field checks.
_NUMBER_FIELDS = (
    "presence_penalty", "frequency_penalty", "repetition_penalty", "temperature", "top_p", "min_p",
)  # fmt: skip
_get_number_fields = operator.attrgetter(*_NUMBER_FIELDS)
_NUMBER_TYPES = frozenset({int, float})
_BOOL_FIELDS = (
    "ignore_eos", "flat_logprobs", "detokenize", "skip_special_tokens",
    "spaces_between_special_tokens", "include_stop_str_in_output", "skip_clone",
    "watermarking_skipped",
)  # fmt: skip
_get_bool_fields = operator.attrgetter(*_BOOL_FIELDS)
_BOOL_TYPE = frozenset({bool})
_STRUCTURED_CONSTRAINTS = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")


class InvalidRequestError(ValueError):
    """A request the engine would reject fatally (or could never serve); nothing was sent.

    ``parameter`` names the offending field when there is one (for a 400 response).
    """

    def __init__(self, message: str, parameter: str | None = None, value: Any = None) -> None:
        super().__init__(message)
        self.parameter = parameter
        self.value = value

    def __str__(self) -> str:
        # vLLM's VLLMValidationError: the checks that carry the rejected value name it and the
        # parameter after the message (vllm/exceptions.py), and API errors show that text.
        base = super().__str__()
        if self.value is None:
            return base
        return f"{base} (parameter={self.parameter}, value={self.value})"


class PlainValueError(InvalidRequestError):
    """A refusal vLLM raises as a plain ``ValueError`` from its engine client's input
    processing: its ``AsyncLLM.generate`` answers it as a failed generation (500)."""


class RequestLimits(msgspec.Struct, frozen=True, gc=False):
    """What the connected engines accept; None means unknown (that check is skipped)."""

    client_index: int = 0
    engine_count: int = 1
    max_model_len: int | None = None
    vocab_size: int | None = None
    max_logprobs: int | None = None  # -1: the whole vocabulary
    supports_lora: bool | None = None
    max_loras: int | None = None
    """Adapters per batch (``--max-loras``) as the engines registered it (None: no LoRA)."""
    supported_tasks: frozenset[str] | None = None
    max_n: int = int(os.environ.get("VLLM_MAX_N_SEQUENCES", "16384"))
    check_sampling: bool = True
    """False where every request's sampling parameters were already checked by
    :func:`validate_sampling_params` on their way here (the text layer lowers them so)."""


def validate_request(request: EngineCoreRequest, limits: RequestLimits) -> None:
    """Raise InvalidRequestError unless ``request`` is safe to send to the engines."""
    if not isinstance(request, EngineCoreRequest):
        raise InvalidRequestError(f"not an EngineCoreRequest: {type(request).__name__}")
    if not isinstance(request.request_id, str) or not request.request_id:
        raise InvalidRequestError("request_id must be a non-empty string", "request_id")
    _check_prompt(request, limits)
    if (request.sampling_params is None) == (request.pooling_params is None):
        raise InvalidRequestError(
            "exactly one of sampling_params and pooling_params must be set", "sampling_params"
        )
    if request.sampling_params is not None:
        if limits.check_sampling:
            validate_sampling_params(request.sampling_params, limits)
    else:
        _check_pooling(request.pooling_params, limits)
    if request.lora_request is not None:
        _check_lora(request.lora_request, limits)
    _int(request.client_index, "client_index")
    if request.client_index != limits.client_index:
        # Outputs go to the socket named by client_index; any other value loses them (or, out
        # of range, kills the engine's output thread).
        raise InvalidRequestError(
            f"client_index must be this frontend's index {limits.client_index}, "
            f"got {request.client_index}",
            "client_index",
        )
    rank = request.data_parallel_rank
    if rank is not None and (not _is_int(rank) or not 0 <= rank < limits.engine_count):
        raise InvalidRequestError(
            f"data_parallel_rank must be in [0, {limits.engine_count}), got {rank!r}",
            "data_parallel_rank",
        )
    _float(request.arrival_time, "arrival_time")
    _int(request.current_wave, "current_wave")
    _int(request.priority, "priority")
    _opt_str(request.cache_salt, "cache_salt")
    _opt_str(request.external_req_id, "external_req_id")
    if request.trace_headers is not None:
        _str_map(request.trace_headers, "trace_headers")
    for name in ("resumable", "abort_immediately"):
        if not isinstance(getattr(request, name), bool):
            raise InvalidRequestError(f"{name} must be a bool", name)


def validate_sampling_params(params: Any, limits: RequestLimits | None = None) -> None:
    """Raise InvalidRequestError where vLLM's SamplingParams would reject ``params``."""
    limits = limits or RequestLimits()
    p = params
    # Types first: the engine's msgspec decoder rejects a mistyped field before any range check.
    n = p.n
    if not _is_int(n):  # (its range, checked below, keeps it within 64 bits)
        raise InvalidRequestError(f"n must be an integer, got {n!r}", "n")
    numbers = _get_number_fields(p)
    if not all(map(_NUMBER_TYPES.__contains__, map(type, numbers))):  # else: find the culprit
        for name, value in zip(_NUMBER_FIELDS, numbers, strict=True):
            _float(value, name)
    top_k = p.top_k
    if not (_is_int(top_k) and top_k < -1):  # (too small: refused below, as vLLM does)
        top_k = _int(top_k, "top_k")
    _opt_bool(p.watermarking, "watermarking")
    _opt_int(p.seed, "seed")
    stop = p.stop
    if stop is None:
        stops: list[str] = []
    elif isinstance(stop, str):
        stops = [stop]
    elif isinstance(stop, list | tuple) and all(isinstance(s, str) for s in stop):
        stops = list(stop)
    else:
        raise InvalidRequestError("stop must be a string or a list of strings", "stop")
    stop_token_ids = _opt_int_list(p.stop_token_ids, "stop_token_ids") or []
    flags = _get_bool_fields(p)
    if not all(map(_BOOL_TYPE.__contains__, map(type, flags))):
        for name, value in zip(_BOOL_FIELDS, flags, strict=True):
            if not isinstance(value, bool):
                raise InvalidRequestError(f"{name} must be a bool", name)
    max_tokens = p.max_tokens
    if not (_is_int(max_tokens) and max_tokens < 1):  # (too small: refused below, as vLLM does)
        max_tokens = _opt_int(max_tokens, "max_tokens")
    min_tokens = p.min_tokens
    if not (_is_int(min_tokens) and min_tokens < 0):  # (negative: refused below, as vLLM does)
        min_tokens = _int(min_tokens, "min_tokens")
    logprobs = _opt_int(p.logprobs, "logprobs")
    prompt_logprobs = _opt_int(p.prompt_logprobs, "prompt_logprobs")
    _opt_int(p.prompt_logprob_start, "prompt_logprob_start")
    logprob_token_ids = _opt_int_list(p.logprob_token_ids, "logprob_token_ids")
    output_kind = getattr(p.output_kind, "value", p.output_kind)
    if not _is_int(output_kind) or output_kind not in (0, 1, 2):
        raise InvalidRequestError("output_kind must be 0, 1 or 2", "output_kind")
    stream_interval = _opt_int(p.stream_interval, "stream_interval")
    _int(p.output_text_buffer_length, "output_text_buffer_length")
    _opt_int(p.eos_token_id, "_eos_token_id")
    all_stop = p.all_stop_token_ids
    if not isinstance(all_stop, set | frozenset | list | tuple) or not all(
        _is_int(t) for t in all_stop
    ):
        raise InvalidRequestError("_all_stop_token_ids must be integers", "_all_stop_token_ids")
    bad_words = p.bad_words
    if bad_words is not None and (
        not isinstance(bad_words, list | tuple) or not all(isinstance(w, str) for w in bad_words)
    ):
        raise InvalidRequestError("bad_words must be a list of strings", "bad_words")
    bad_words_ids = p.bad_words_token_ids
    if bad_words_ids is not None and (
        not isinstance(bad_words_ids, list | tuple)
        or not all(
            isinstance(w, list | tuple) and all(_is_int(t) for t in w) for w in bad_words_ids
        )
    ):
        raise InvalidRequestError(
            "_bad_words_token_ids must be lists of token ids", "_bad_words_token_ids"
        )
    _opt_bool(p.skip_reading_prefix_cache, "skip_reading_prefix_cache")
    _int(p.routed_experts_prompt_start, "routed_experts_prompt_start")
    trace_ids = _opt_int_list(p.trace_decode_token_ids, "trace_decode_token_ids")
    allowed = _opt_int_list(p.allowed_token_ids, "allowed_token_ids")
    logit_bias = p.logit_bias
    if logit_bias is not None and (
        not isinstance(logit_bias, Mapping)
        or not all(_is_int(k) and _is_number(v) for k, v in logit_bias.items())
    ):
        raise InvalidRequestError("logit_bias must map integer token ids to numbers", "logit_bias")

    # __post_init__: thinking_token_budget is validated before _verify_args.
    budget = p.thinking_token_budget
    if budget is not None and (not _is_int(budget) or (budget < 0 and budget != -1)):
        raise InvalidRequestError(
            "`thinking_token_budget` must be a non-negative integer or -1 for unlimited.",
            "thinking_token_budget",
        )

    # _verify_args, in vLLM's order.
    if n < 1:
        raise InvalidRequestError(f"n must be at least 1, got {n}.", "n")
    if n > limits.max_n:
        raise InvalidRequestError(
            f"n must be at most {limits.max_n}, got {n}. To increase this limit, set the "
            "VLLM_MAX_N_SEQUENCES environment variable.",
            "n",
        )
    if p.extra_args:
        _check_extra_args(p.extra_args)
    elif p.extra_args is not None and not isinstance(p.extra_args, Mapping):
        raise InvalidRequestError("extra_args must be a map", "extra_args")
    if not -2.0 <= p.presence_penalty <= 2.0:
        raise InvalidRequestError(
            f"presence_penalty must be in [-2, 2], got {p.presence_penalty}.", "presence_penalty"
        )
    if not -2.0 <= p.frequency_penalty <= 2.0:
        raise InvalidRequestError(
            f"frequency_penalty must be in [-2, 2], got {p.frequency_penalty}.",
            "frequency_penalty",
        )
    if not math.isfinite(p.repetition_penalty):
        raise InvalidRequestError(
            f"repetition_penalty must be a finite number, got {p.repetition_penalty}.",
            "repetition_penalty",
        )
    if p.repetition_penalty <= 0.0:
        raise InvalidRequestError(
            f"repetition_penalty must be greater than zero, got {p.repetition_penalty}.",
            "repetition_penalty",
        )
    temperature = p.temperature
    if not math.isfinite(temperature):
        raise InvalidRequestError(
            f"temperature must be a finite number, got {temperature}.", "temperature", temperature
        )
    if temperature < 0.0:
        raise InvalidRequestError(
            f"temperature must be non-negative, got {temperature}.", "temperature", temperature
        )
    if temperature > 2.0:
        raise InvalidRequestError(
            f"temperature must be in [0, 2], got {temperature}.", "temperature", temperature
        )
    if not 0.0 < p.top_p <= 1.0:
        raise InvalidRequestError(f"top_p must be in (0, 1], got {p.top_p}.", "top_p", p.top_p)
    if top_k < -1:
        raise InvalidRequestError(
            f"top_k must be 0 (disable), or at least 1, got {top_k}.", "top_k"
        )
    if not 0.0 <= p.min_p <= 1.0:
        raise InvalidRequestError(f"min_p must be in [0, 1], got {p.min_p}.", "min_p")
    if max_tokens is not None and max_tokens < 1:
        raise InvalidRequestError(
            f"max_tokens must be at least 1, got {max_tokens}.", "max_tokens", max_tokens
        )
    if min_tokens < 0:
        raise InvalidRequestError(
            f"min_tokens must be greater than or equal to 0, got {min_tokens}.", "min_tokens"
        )
    if max_tokens is not None and min_tokens > max_tokens:
        raise InvalidRequestError(
            f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {min_tokens}.",
            "min_tokens",
        )
    if stream_interval is not None and stream_interval < 1:
        raise InvalidRequestError(
            f"stream_interval must be at least 1, got {stream_interval}.", "stream_interval"
        )
    if logprobs is not None and logprobs != -1 and logprobs < 0:
        raise InvalidRequestError(
            f"logprobs must be non-negative or -1, got {logprobs}.", "logprobs"
        )
    if prompt_logprobs is not None and prompt_logprobs != -1 and prompt_logprobs < 0:
        raise InvalidRequestError(
            f"prompt_logprobs must be non-negative or -1, got {prompt_logprobs}.",
            "prompt_logprobs",
        )
    if any(not s for s in stops):
        raise InvalidRequestError("stop cannot contain an empty string.", "stop")
    if stops and not p.detokenize:
        raise InvalidRequestError(
            "stop strings are only supported when detokenize is True.", "stop"
        )
    if bad_words and any(not w for w in bad_words):
        raise InvalidRequestError(
            f"bad_words cannot contain an empty string. Got bad_words={list(bad_words)}",
            "bad_words",
        )
    if temperature < _SAMPLING_EPS and n > 1:
        raise InvalidRequestError(f"n must be 1 when using greedy sampling, got {n}.", "n")

    # Nested structs the engine validates while decoding.
    if p.structured_outputs is not None:
        _check_structured_outputs(p.structured_outputs)
    if p.repetition_detection is not None:
        _check_repetition_detection(p.repetition_detection)

    # Not validated by the engine, but a nil max_tokens can never succeed (§4.3).
    if max_tokens is None:
        raise InvalidRequestError(
            "max_tokens must be set explicitly (the engine fails requests without it)",
            "max_tokens",
        )

    # Model-dependent checks (vLLM's SamplingParams.verify): out-of-vocabulary ids index the
    # logits tensor and crash the model step, which kills the engine.
    _check_logprob_limits(p, logprobs, prompt_logprobs, logprob_token_ids, limits)
    vocab = limits.vocab_size
    if logit_bias and vocab is not None:
        _check_in_vocab(logit_bias, vocab, "logit_bias")
    if trace_ids is not None and vocab is not None:
        _check_trace_replay(p, trace_ids, n, vocab)
    if vocab is not None and stop_token_ids:
        _check_in_vocab(stop_token_ids, vocab, "stop_token_ids")
    if vocab is not None:
        if allowed is not None and not allowed:
            raise InvalidRequestError(
                "allowed_token_ids is not None and empty!", "allowed_token_ids", allowed
            )
        if allowed and any(not 0 <= t < vocab for t in allowed):
            raise InvalidRequestError(
                "allowed_token_ids contains out-of-vocab token id!",
                "allowed_token_ids",
                [t for t in allowed if not 0 <= t < vocab],
            )
        # What vLLM's input processor adds itself (never out of range there): checked so a
        # hand-made request cannot index past the logits.
        if all_stop:
            _check_vocab(all_stop, vocab, "_all_stop_token_ids")
        eos = p.eos_token_id
        if eos is not None and not 0 <= eos < vocab:
            _check_vocab((eos,), vocab, "_eos_token_id")
        if bad_words_ids:
            _check_vocab([t for w in bad_words_ids for t in w], vocab, "_bad_words_token_ids")


# -- pieces --------------------------------------------------------------------------------------


def _check_prompt(request: EngineCoreRequest, limits: RequestLimits) -> None:
    tokens = request.prompt_token_ids
    embeds = request.prompt_embeds
    if tokens is None:
        if embeds is None:
            raise InvalidRequestError(
                "a request needs prompt_token_ids or prompt_embeds", "prompt_token_ids"
            )
        length = _check_embeds(embeds)
    else:
        if not isinstance(tokens, list | tuple):
            raise InvalidRequestError("prompt_token_ids must be a list of ints", "prompt_token_ids")
        vocab = limits.vocab_size
        # The usual prompt (ints in the vocabulary) passes msgspec's check of types and range in
        # one pass at C speed; anything it refuses goes through the checks below, which decide.
        in_range = _ids_in_range(tokens, vocab)
        if not in_range:
            _check_ids_are_ints(tokens)
        length = len(tokens)
        if embeds is not None and _check_embeds(embeds) != length:
            raise InvalidRequestError(
                "prompt_embeds must have one row per prompt token", "prompt_embeds"
            )
        if not in_range and vocab is not None and tokens and max(tokens) >= vocab:
            # vLLM's renderer check (renderers/base.py validate_token_ids): no parameter named.
            raise InvalidRequestError(f"Token id {max(tokens)} is out of vocabulary")
    if length == 0:
        # vLLM's input processor (v1/engine/input_processor.py), a plain ValueError
        raise InvalidRequestError("The decoder prompt cannot be empty")
    if limits.max_model_len is not None and length > limits.max_model_len:
        raise InvalidRequestError(
            f"the prompt has {length} tokens, more than the engine's maximum context length "
            f"{limits.max_model_len}",
            "prompt_token_ids",
        )
    mask = request.prompt_is_token_ids
    if mask is not None and (
        not isinstance(mask, list | tuple)
        or len(mask) != length
        or not all(isinstance(m, bool) for m in mask)
    ):
        raise InvalidRequestError(
            "prompt_is_token_ids must be one bool per prompt position", "prompt_is_token_ids"
        )


def _ids_in_range(tokens: list[int] | tuple[int, ...], vocab: int | None) -> bool:
    # Whether every id is an int (not a bool) in [0, vocab), by msgspec's validation: a subset
    # of what _check_prompt's own checks accept (numpy integers and ids from 2**63 - 1 on, which
    # msgspec's int64 bounds cannot express, are left to them).
    ids_type = _PROMPT_ID_TYPES.get(vocab)
    if ids_type is None:
        lt = _INT64_END if vocab is None else min(vocab, _INT64_END)
        ids = list[Annotated[int, msgspec.Meta(ge=0, lt=lt)]]
        # In a struct: msgspec looks a struct type up by identity, a typing alias by a hash
        # computed in Python on every call (half the cost of the check).
        ids_type = _PROMPT_ID_TYPES[vocab] = msgspec.defstruct(
            "PromptIds", [("ids", ids)], array_like=True, gc=False
        )
    try:
        msgspec.convert((tokens,), ids_type)
    except msgspec.ValidationError:
        return False
    return True


def _check_ids_are_ints(tokens: list[Any] | tuple[Any, ...]) -> None:
    for t in tokens:
        if not _is_int(t) or t < 0:
            raise InvalidRequestError(
                f"prompt_token_ids must be non-negative ints, got {t!r}", "prompt_token_ids"
            )


def _check_pooling(params: Any, limits: RequestLimits) -> None:
    task = params.task
    if task is not None and not isinstance(task, str):
        raise InvalidRequestError("pooling task must be a string", "task")
    if limits.supported_tasks is not None and task not in limits.supported_tasks:
        # An unsupported pooling task is fatal to the engine (§4.11).
        raise InvalidRequestError(
            f"pooling task {task!r} is not supported by the engine "
            f"(supported: {sorted(limits.supported_tasks)})",
            "task",
        )
    _opt_int(params.dimensions, "dimensions")
    _opt_int_list(params.returned_token_ids, "returned_token_ids")


def _check_lora(lora: Any, limits: RequestLimits) -> None:
    if not isinstance(lora.lora_name, str) or not lora.lora_name:
        raise InvalidRequestError("lora_name must be a non-empty string", "lora_request")
    if not _is_int(lora.lora_int_id) or lora.lora_int_id < 1:
        raise InvalidRequestError(f"LoRA id must be > 0, got {lora.lora_int_id!r}", "lora_request")
    if not isinstance(lora.lora_path, str) or not lora.lora_path:
        raise InvalidRequestError("lora_path cannot be empty", "lora_request")
    if limits.supports_lora is False:
        raise InvalidRequestError(
            "the engine was started without LoRA support (--enable-lora)", "lora_request"
        )


def _check_structured_outputs(so: Any) -> None:
    count = sum(getattr(so, name) is not None for name in _STRUCTURED_CONSTRAINTS)
    if count != 1:
        raise InvalidRequestError(
            "structured outputs need exactly one constraint of "
            f"{', '.join(_STRUCTURED_CONSTRAINTS)}; got {count}",
            "structured_outputs",
        )
    if so.json is not None and not isinstance(so.json, str | Mapping):
        raise InvalidRequestError("structured json must be a string or a map", "json")
    for name in ("regex", "grammar", "whitespace_pattern", "structural_tag"):
        _opt_str(getattr(so, name), name)
    if so.choice is not None and (
        not isinstance(so.choice, list | tuple) or not all(isinstance(c, str) for c in so.choice)
    ):
        raise InvalidRequestError("structured choice must be a list of strings", "choice")
    _opt_bool(so.json_object, "json_object")
    for name in ("disable_any_whitespace", "disable_additional_properties", "backend_was_auto"):
        if not isinstance(getattr(so, name), bool):
            raise InvalidRequestError(f"{name} must be a bool", name)
    if not isinstance(so.backend, str) or not so.backend:
        # Not fatal (the engine fails the request), but always a frontend bug (§4.3).
        raise InvalidRequestError(
            "structured outputs need _backend set to the engine's backend (e.g. 'xgrammar')",
            "structured_outputs",
        )


def _check_repetition_detection(rd: Any) -> None:
    max_size = _int(rd.max_pattern_size, "max_pattern_size")
    min_size = _int(rd.min_pattern_size, "min_pattern_size")
    min_count = _int(rd.min_count, "min_count")
    # (vLLM's RepetitionDetectionParams.__post_init__ words them, naming no parameter)
    if max_size < 0 or min_size < 0 or min_size > max_size:
        raise InvalidRequestError(
            "max_pattern_size, min_pattern_size must be >=0, with "
            "min_pattern_size <= max_pattern_size. "
            "Set both to 0 to disable repetitive pattern detection."
        )
    if max_size > 0 and min_count < 2:
        raise InvalidRequestError(
            "min_count must be >= 2 to detect repetitive patterns in engine output. If you do "
            "not wish to detect repetitive patterns, set max_pattern_size to 0."
        )


def _check_logprob_limits(
    p: Any,
    logprobs: int | None,
    prompt_logprobs: int | None,
    logprob_token_ids: list[int] | None,
    limits: RequestLimits,
) -> None:
    vocab = limits.vocab_size
    max_lp = limits.max_logprobs
    if max_lp == -1:
        max_lp = vocab
    for name, kind, value in (
        ("logprobs", "sample", logprobs),
        ("prompt_logprobs", "prompt", prompt_logprobs),
    ):
        if value and max_lp is not None:
            wanted = vocab if value == -1 else value
            if wanted is not None and wanted > max_lp:
                raise InvalidRequestError(
                    f"Requested {kind} logprobs of {wanted}, which is greater than max allowed: "
                    f"{max_lp}",
                    name,
                    wanted,
                )
    if logprob_token_ids is not None:
        if len(logprob_token_ids) > _MAX_LOGPROB_TOKEN_IDS:
            raise InvalidRequestError(
                f"logprob_token_ids has {len(logprob_token_ids)} entries, more than "
                f"{_MAX_LOGPROB_TOKEN_IDS}",
                "logprob_token_ids",
            )
        if logprobs is not None and logprobs != len(logprob_token_ids):
            raise InvalidRequestError(
                "When both logprobs and logprob_token_ids are set, logprobs must equal "
                "len(logprob_token_ids).",
                "logprob_token_ids",
            )
        if vocab is not None:
            _check_vocab(logprob_token_ids, vocab, "logprob_token_ids")
    wire_ids = p.prompt_logprob_token_ids
    if vocab is None:
        return  # checked with the model's limits (vLLM: SamplingParams.verify, engine side)
    if wire_ids is not None:
        # vLLM's SamplingParams._validate_logprobs, its messages and order.
        ids = _ndarray_values(wire_ids, "prompt_logprob_token_ids")
        if ids.dtype.kind not in "iu" or ids.ndim != 2 or 0 in ids.shape:
            raise InvalidRequestError(
                "prompt_logprob_token_ids must be a non-empty integer array "
                "of shape [num_rows, num_ids].",
                "prompt_logprob_token_ids",
                "list",  # vLLM names the type of the JSON value
            )
        if limits.max_model_len is not None and ids.shape[0] > limits.max_model_len - 1:
            raise InvalidRequestError(
                f"prompt_logprob_token_ids has {ids.shape[0]} rows, but a prompt has at most "
                f"{limits.max_model_len - 1} scored rows (max_model_len - 1).",
                "prompt_logprob_token_ids",
                ids.shape[0],
            )
        if max_lp is not None and ids.shape[1] > max_lp:
            raise InvalidRequestError(
                f"Requested {ids.shape[1]} token ids per row in prompt_logprob_token_ids, "
                f"which is greater than max allowed: {max_lp}. "
                f"Set max_logprobs (--max-logprobs) to at least {ids.shape[1]}.",
                "prompt_logprob_token_ids",
                ids.shape[1],
            )
        if int(ids.min()) < -1 or (vocab is not None and int(ids.max()) >= vocab):
            raise InvalidRequestError(
                "prompt_logprob_token_ids contain out-of-vocab token ids (-1 pads a row). "
                f"Vocabulary size: {vocab}",
                "prompt_logprob_token_ids",
                [int(ids.min()), int(ids.max())],
            )
        start = p.prompt_logprob_start
        if start is not None and start < 0:
            raise InvalidRequestError(
                "prompt_logprob_start must be non-negative.", "prompt_logprob_start", start
            )
    elif p.prompt_logprob_start is not None:
        raise InvalidRequestError(
            "prompt_logprob_start requires prompt_logprob_token_ids.",
            "prompt_logprob_start",
            p.prompt_logprob_start,
        )


def _check_trace_replay(p: Any, trace_ids: list[int], n: int, vocab: int | None) -> None:
    # vLLM's SamplingParams._validate_trace_replay, its messages and order (the speculative
    # decoding check is the engines': a frontend does not know their draft model).
    problem = None
    if not trace_ids:
        problem = "trace_decode_token_ids must be a non-empty list."
    elif n != 1:
        problem = "trace_decode_token_ids requires n=1."
    elif any(t < 0 for t in trace_ids):
        problem = "trace_decode_token_ids must contain non-negative integers."
    else:
        for name, conflict in (
            ("prompt_logprobs", p.prompt_logprobs is not None),
            ("prompt_logprob_token_ids", p.prompt_logprob_token_ids is not None),
            ("structured outputs", p.structured_outputs is not None),
            ("repetition_detection", p.repetition_detection is not None),
            ("thinking_token_budget", p.thinking_token_budget is not None),
            ("bad_words", bool(p.bad_words)),
        ):
            if conflict:
                problem = f"trace_decode_token_ids is not supported with {name}."
                break
    if problem:
        # vLLM raises these as plain ValueErrors, which its AsyncLLM.generate turns into a 500
        raise PlainValueError(problem)
    if vocab is not None:
        bad = [t for t in trace_ids if not 0 <= t < vocab]
        if bad:
            raise InvalidRequestError(
                f"token_id(s) {bad} in trace_decode_token_ids contain out-of-vocab token ids. "
                f"Vocabulary size: {vocab}",
                "trace_decode_token_ids",
                bad,
            )


def _check_extra_args(extra: Any) -> None:
    # The engine's msgpack decoder only takes 64-bit integers and string keys.
    if not isinstance(extra, Mapping):
        raise InvalidRequestError("extra_args must be a map", "extra_args")
    pending: list[Any] = [extra]
    seen: set[int] = set()
    while pending:
        value = pending.pop()
        if _is_int(value) and not _INT64_MIN <= value < _UINT64_END:
            # (vLLM's VLLMValidationError names its parameter, without a value)
            raise InvalidRequestError(
                "extra_args integers must be between -2**63 and 2**64 - 1. (parameter=extra_args)",
                "extra_args",
            )
        if isinstance(value, Mapping | list | tuple) and id(value) not in seen:
            seen.add(id(value))
            if isinstance(value, Mapping):
                if value is extra and not all(isinstance(k, str) for k in value):
                    raise InvalidRequestError("extra_args keys must be strings", "extra_args")
                pending.extend(value.keys())
                pending.extend(value.values())
            else:
                pending.extend(value)


def _check_embeds(embeds: Any) -> int:
    if not isinstance(embeds, Tensor):
        raise InvalidRequestError("prompt_embeds must be a Tensor triple", "prompt_embeds")
    _check_triple(embeds, _torch_itemsize(embeds.dtype), "prompt_embeds")
    if len(embeds.shape) != 2:
        raise InvalidRequestError(
            "prompt_embeds must be a 2-D tensor [num_tokens, hidden_size]", "prompt_embeds"
        )
    return int(embeds.shape[0])


def _torch_itemsize(name: object) -> int | None:
    if not isinstance(name, str):
        return None
    dtype = numpy_dtype_for_torch(name)
    if dtype is not None:
        return dtype.itemsize
    return _TORCH_ONLY_ITEMSIZE.get(name)


def _check_triple(value: Tensor | NdArray, itemsize: int | None, name: str) -> None:
    # A triple whose byte length does not match its shape kills the engine's input thread.
    if itemsize is None:
        raise InvalidRequestError(f"{name} has an unknown dtype {value.dtype!r}", name)
    shape = value.shape
    if not isinstance(shape, tuple | list) or not all(_is_int(d) and d >= 0 for d in shape):
        raise InvalidRequestError(f"{name} has an invalid shape {shape!r}", name)
    if value.nbytes != math.prod(shape) * itemsize:
        raise InvalidRequestError(
            f"{name} holds {value.nbytes} bytes, but shape {tuple(shape)} of {value.dtype} "
            f"needs {math.prod(shape) * itemsize}",
            name,
        )


def _ndarray_values(value: Any, name: str) -> np.ndarray:
    if not isinstance(value, NdArray):
        raise InvalidRequestError(f"{name} must be an NdArray triple", name)
    try:
        dtype = np.dtype(value.dtype)
    except TypeError as exc:
        raise InvalidRequestError(f"{name} has an unknown dtype {value.dtype!r}", name) from exc
    _check_triple(value, dtype.itemsize, name)
    try:
        return value.numpy()
    except (ProtocolError, ValueError, TypeError) as exc:
        raise InvalidRequestError(f"{name} is not a valid array: {exc}", name) from exc


def _check_in_vocab(ids: Iterable[Any], vocab_size: int, name: str) -> None:
    # vLLM's SamplingParams._validate_logit_bias / _validate_stop_token_ids: their message, the
    # parameter and every refused id.
    bad = [t for t in ids if not 0 <= t < vocab_size]
    if bad:
        raise InvalidRequestError(
            f"token_id(s) {bad} in {name} contain out-of-vocab token ids. "
            f"Vocabulary size: {vocab_size}",
            name,
            bad,
        )


def _check_vocab(ids: Iterable[Any], vocab_size: int, name: str) -> None:
    bad = [t for t in ids if not 0 <= t < vocab_size]
    if bad:
        raise InvalidRequestError(
            f"token id(s) {bad[:8]} in {name} are outside the vocabulary [0, {vocab_size})", name
        )


_PROMPT_ID_TYPES: dict[int | None, type[msgspec.Struct]] = {}
"""The msgspec type of a valid prompt (in a one-field struct), per vocabulary size."""


def _is_int(value: object) -> bool:
    if type(value) is int:  # the common case, first
        return True
    if isinstance(value, int):
        return not isinstance(value, bool)
    numpy = loaded("numpy")  # a numpy scalar means numpy is imported
    return numpy is not None and isinstance(value, numpy.integer)


def _is_number(value: object) -> bool:
    if type(value) in _NUMBER_TYPES:  # the common case, first
        return True
    if isinstance(value, int | float):
        return not isinstance(value, bool)
    numpy = loaded("numpy")
    return numpy is not None and isinstance(value, numpy.integer | numpy.floating)


def _int(value: Any, name: str) -> int:
    if type(value) is int and _INT64_MIN <= value < _UINT64_END:  # the common case, first
        return value
    if not _is_int(value):
        raise InvalidRequestError(f"{name} must be an integer, got {value!r}", name)
    if not _INT64_MIN <= value < _UINT64_END:
        raise InvalidRequestError(f"{name} does not fit 64 bits: {value}", name)
    return int(value)


def _opt_int(value: Any, name: str) -> int | None:
    return None if value is None else _int(value, name)


def _float(value: Any, name: str) -> float:
    if type(value) is float:  # the common case, first
        return value
    if not _is_number(value):
        raise InvalidRequestError(f"{name} must be a number, got {value!r}", name)
    return float(value)


def _opt_bool(value: Any, name: str) -> None:
    if value is not None and not isinstance(value, bool):
        raise InvalidRequestError(f"{name} must be a bool or null", name)


def _opt_str(value: Any, name: str) -> None:
    if value is not None and not isinstance(value, str):
        raise InvalidRequestError(f"{name} must be a string or null", name)


def _opt_int_list(value: Any, name: str) -> list[int] | None:
    if value is None:
        return None
    if not isinstance(value, list | tuple) or not all(_is_int(v) for v in value):
        raise InvalidRequestError(f"{name} must be a list of integers", name)
    return list(value)


def _str_map(value: Any, name: str) -> None:
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise InvalidRequestError(f"{name} must map strings to strings", name)

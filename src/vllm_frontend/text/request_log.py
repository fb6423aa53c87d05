"""``--enable-log-requests``: each prompt's request logged as vLLM's ``RequestLogger`` logs it
(vllm/entrypoints/serve/utils/request_logger.py): at INFO its id and sampling parameters; at
DEBUG also its prompt text and token ids, cut to ``--max-log-len``. The sampling parameters
are written as vLLM's ``SamplingParams.__repr__`` writes them."""

from __future__ import annotations

import logging
from typing import Any

import msgspec

from vllm_frontend.engine.protocol import SamplingParams

__all__ = ["RequestLog", "sampling_params_repr"]

logger = logging.getLogger(__name__)

_REPR_FIELDS = (
    "n", "presence_penalty", "frequency_penalty", "repetition_penalty", "temperature",
    "watermarking", "top_p", "top_k", "min_p", "seed", "stop", "stop_token_ids", "bad_words",
    "thinking_token_budget", "include_stop_str_in_output", "ignore_eos", "max_tokens",
    "min_tokens", "logprobs", "prompt_logprobs", "skip_special_tokens",
    "spaces_between_special_tokens", "structured_outputs", "extra_args",
)  # fmt: skip

_STRUCTURED_FIELDS = (
    "json", "regex", "choice", "grammar", "json_object", "disable_any_whitespace",
    "disable_additional_properties", "whitespace_pattern", "structural_tag",
)  # fmt: skip


def _value(name: str, params: SamplingParams) -> Any:
    value = getattr(params, name)
    if name in ("stop", "stop_token_ids", "bad_words") and value is None:
        return []  # vLLM's SamplingParams makes these lists
    if name == "structured_outputs" and value is not None:
        return _Repr(
            "StructuredOutputsParams("
            + ", ".join(f"{f}={getattr(value, f)!r}" for f in _STRUCTURED_FIELDS)
            # the engine's backend is chosen after vLLM logs the request: not yet set there
            + ", _backend=None, _backend_was_auto=False)"
        )
    return value


class _Repr:
    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def sampling_params_repr(params: Any) -> str:
    """``params`` as vLLM's ``repr(SamplingParams)`` (other parameters as their own repr)."""
    if not isinstance(params, SamplingParams):
        return repr(params)
    parts = []
    for name in _REPR_FIELDS:
        value = _value(name, params)
        # f"{x}" of vLLM's fields: str() of the values (lists and dicts show their items' reprs)
        parts.append(f"{name}={value}")
    return "SamplingParams(" + ", ".join(parts) + ")"


class RequestLog:
    """Logs requests as they are sent (built once, only with ``--enable-log-requests``)."""

    __slots__ = ("max_log_len",)

    def __init__(self, max_log_len: int | None = None) -> None:
        self.max_log_len = max_log_len
        if not logger.isEnabledFor(logging.INFO):
            logger.warning(
                "`--enable-log-requests` is set but the minimum log level is higher than INFO. "
                "No request information will be logged."
            )
        elif not logger.isEnabledFor(logging.DEBUG):
            logger.info(
                "`--enable-log-requests` is set but the minimum log level is higher than DEBUG. "
                "Only limited information will be logged to minimize overhead. To view more "
                "details, set `--log-level DEBUG`."
            )

    def log_inputs(
        self,
        request_id: str,
        prompt: str | None,
        prompt_token_ids: list[int],
        params: Any,
        lora_request: Any = None,
        watermarking: bool | None = None,
    ) -> None:
        """Log one prompt's request (DEBUG: with its prompt; INFO: its parameters, with
        ``watermarking`` as the request asked, which vLLM logs before its input processor
        resolves it)."""
        if logger.isEnabledFor(logging.DEBUG):
            ids: list[int] = prompt_token_ids
            if self.max_log_len is not None:
                prompt = prompt[: self.max_log_len] if prompt is not None else None
                ids = ids[: self.max_log_len]
            logger.debug(
                "Request %s details: prompt: %r, prompt_token_ids: %s, prompt_embeds shape: %s.",
                request_id,
                prompt,
                ids,
                None,
            )
        if isinstance(params, SamplingParams) and params.watermarking is not watermarking:
            params = msgspec.structs.replace(params, watermarking=watermarking)
        logger.info(
            "Received request %s: params: %s, lora_request: %s.",
            request_id,
            sampling_params_repr(params),
            lora_request,
        )

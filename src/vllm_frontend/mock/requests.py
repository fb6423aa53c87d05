"""A request inside the mock engine: its decode state, its checks, and its stop condition."""

from __future__ import annotations

import msgspec

from vllm_frontend.engine.protocol import EngineCoreEvent, EngineCoreRequest, FinishReason
from vllm_frontend.mock.options import MockEngineOptions

__all__ = ["MockRequest", "check_stop", "validation_error"]

_encode = msgspec.msgpack.encode


class MockRequest:
    """One admitted request's decode state."""

    __slots__ = (
        "checks_stop",
        "client_index",
        "eos",
        "events",
        "limit",
        "logprobs",
        "mask",
        "min_tokens",
        "num_output",
        "prompt",
        "prompt_len",
        "prompt_logprobs",
        "request_id",
        "scheduled",
        "stop_ids",
        "trace_headers",
        "wire_prefix",
        "wire_suffix",
    )

    def __init__(self, req: EngineCoreRequest, limit: int, options: MockEngineOptions) -> None:
        sp = req.sampling_params
        assert sp is not None and req.prompt_token_ids is not None
        self.request_id = req.request_id
        self.client_index = req.client_index
        self.prompt = req.prompt_token_ids
        self.limit = limit
        self.min_tokens = sp.min_tokens
        self.eos = sp.eos_token_id
        self.stop_ids: frozenset[int] = frozenset(sp.stop_token_ids or ())
        # vLLM masks `_all_stop_token_ids` (which always includes stop_token_ids) while
        # fewer than min_tokens have been generated, so they cannot be sampled then.
        self.mask: frozenset[int] = (
            frozenset(sp.all_stop_token_ids) | self.stop_ids if sp.min_tokens else frozenset()
        )
        cap = options.max_logprobs
        self.logprobs = None if sp.logprobs is None else (cap if sp.logprobs < 0 else sp.logprobs)
        pl = sp.prompt_logprobs
        self.prompt_logprobs = None if pl is None else (cap if pl < 0 else pl)
        self.trace_headers = req.trace_headers
        self.prompt_len = len(self.prompt)
        self.checks_stop = self.eos is not None or bool(self.stop_ids) or bool(self.mask)
        # EngineCoreOutput (18-element array) with only request_id, new_token_ids and the echoed
        # trace_headers set, split around new_token_ids.
        self.wire_prefix = b"\xdc\x00\x12" + _encode(self.request_id)
        self.wire_suffix = (
            b"\xc0" * 8 + _encode(self.trace_headers) + b"\xc0\xc0\x00\xc0\xc0\xc0\xc0"
        )
        self.num_output = 0
        self.scheduled = False
        self.events: list[EngineCoreEvent] | None = None


def validation_error(req: EngineCoreRequest, options: MockEngineOptions) -> str | None:
    """Why the engine could not run ``req`` (it then finishes with ERROR), or None."""
    sp = req.sampling_params
    if req.pooling_params is not None or sp is None:
        return "mock engine only supports the generate task"
    if req.prompt_token_ids is None:
        return "prompt embeddings are not enabled"
    if not req.prompt_token_ids:
        return "empty prompt"
    if sp.max_tokens is None or sp.max_tokens < 1:
        return f"max_tokens must be at least 1, got {sp.max_tokens}"
    if sp.min_tokens < 0 or sp.min_tokens > sp.max_tokens:
        return f"min_tokens must be in [0, max_tokens], got {sp.min_tokens}"
    if any(t < 0 for t in req.prompt_token_ids):
        # The model's vocabulary is unknown here (`vocab_size` only bounds generated ids).
        return "negative prompt token id"
    return None


def check_stop(
    request: MockRequest, toks: list[int], vocab_size: int
) -> tuple[list[int], FinishReason | None, int | None]:
    """``toks`` cut at the first stop (EOS or a stop token id), with the finish it causes."""
    # Mirrors vllm/v1/core/sched/utils.py `check_stop` token by token (several tokens per
    # step behave like accepted speculative tokens: generation ends at the first stop).
    for j, tok in enumerate(toks):
        if request.num_output + j < request.min_tokens and tok in request.mask:
            # The sampler masks these until min_tokens: draw the next allowed id instead.
            while tok in request.mask:
                tok = (tok + 1) % vocab_size
            toks[j] = tok
        if tok == request.eos:
            return toks[: j + 1], FinishReason.STOP, None
        if tok in request.stop_ids:
            return toks[: j + 1], FinishReason.STOP, tok
    return toks, None, None

"""Sampling parameters lowered once per distinct request, shared by the requests that repeat it.

:func:`~vllm_frontend.text.sampling.lower_sampling_params` (the defaults, vLLM's validation, the
EOS ids) is a pure function of the request's sampling values, the resolved ``max_tokens`` and
the model's constants, and was ~10 µs of a short request's ~200 µs of CPU. Clients mostly send
the same few settings, so :class:`LoweredParams` keeps the result per distinct set of values
and hands each request its own shallow copy (the lowering's own lists are never changed in
place, and what a request sets on its copy stays its own). Values that cannot be hashed (a
non-empty list such as ``stop``, ``logit_bias``, a constraint …) are lowered afresh each time;
a refused request is never kept.
"""

from __future__ import annotations

import copy

import msgspec

from vllm_frontend.engine.protocol import SamplingParams
from vllm_frontend.text.sampling import ModelSamplingInfo, SamplingRequest, lower_sampling_params
from vllm_frontend.text.tokenizer import Tokenizer

__all__ = ["LoweredParams"]

MAX_ENTRIES = 256
"""Distinct lowerings kept; the table starts over when it is full."""


_LIST_FIELDS = tuple(
    i
    for i, name in enumerate(SamplingRequest.__struct_fields__)
    if name in ("stop", "stop_token_ids", "logprob_token_ids", "allowed_token_ids", "bad_words")
)


def _empty_lists_as_none(values: tuple[object, ...]) -> tuple[object, ...]:
    """``values`` with the list fields' empty lists as None (the key's types tell them apart);
    a non-empty list stays, and makes the key unhashable."""
    out = list(values)
    for i in _LIST_FIELDS:
        if out[i] == []:
            out[i] = None
    return tuple(out)


class LoweredParams:
    """The lowerings of one model's requests, by their sampling values."""

    __slots__ = ("_model", "_table", "_tokenizer")

    def __init__(self) -> None:
        self._model: ModelSamplingInfo | None = None
        self._tokenizer: Tokenizer | None = None
        self._table: dict[object, SamplingParams] = {}

    def lower(
        self,
        req: SamplingRequest,
        *,
        max_tokens: int,
        model: ModelSamplingInfo,
        tokenizer: Tokenizer | None,
        engine_side: bool,
    ) -> SamplingParams:
        """What :func:`lower_sampling_params` returns for these arguments (a new object each
        call; the same errors)."""
        if model is not self._model or tokenizer is not self._tokenizer:
            self._table.clear()  # another model's constants: nothing kept applies
            self._model, self._tokenizer = model, tokenizer
        values = msgspec.structs.astuple(req)
        # The types too: 1 and 1.0 (or True) are equal keys but not the same wire bytes.
        types = tuple(map(type, values))
        if list in types:  # the routes send empty lists for absent ones: keyed as None
            values = _empty_lists_as_none(values)
        key = (values, types, max_tokens, engine_side)
        try:
            params = self._table.get(key)
        except TypeError:  # an unhashable value (a list, a dict, a constraint)
            return lower_sampling_params(
                req, max_tokens=max_tokens, model=model, tokenizer=tokenizer,
                engine_side=engine_side,
            )  # fmt: skip
        if params is None:
            params = lower_sampling_params(
                req, max_tokens=max_tokens, model=model, tokenizer=tokenizer,
                engine_side=engine_side,
            )  # fmt: skip
            table = self._table
            if len(table) >= MAX_ENTRIES:
                table.clear()
            table[key] = params
        return copy.copy(params)

"""Sampling parameters lowered once per distinct request, shared by the requests that repeat it.

:func:`~vllm_frontend.text.sampling.lower_sampling_params` (the defaults, vLLM's validation, the
EOS ids) is a pure function of the request's sampling values, the resolved ``max_tokens`` and
the model's constants, and was ~10 µs of a short request's ~200 µs of CPU. Clients mostly send
the same few settings, so :class:`LoweredParams` keeps the result per distinct set of values
and hands each request its own shallow copy (the lowering's own lists are never changed in
place, and what a request sets on its copy stays its own), keyed by the values' msgpack
encoding (one C call, and it tells 1, 1.0 and True apart). A request with a non-empty list, a
dict or a constraint (``stop_token_ids``, ``logit_bias``, ``structured_outputs`` …) is lowered
afresh each time; a refused request is never kept.
"""

from __future__ import annotations

import operator
import types
import typing

import msgspec

from vllm_frontend.engine.protocol import SamplingParams
from vllm_frontend.text.sampling import ModelSamplingInfo, SamplingRequest, lower_sampling_params
from vllm_frontend.text.tokenizer import Tokenizer

__all__ = ["LoweredParams"]

MAX_ENTRIES = 256
"""Distinct lowerings kept; the table starts over when it is full."""

_SCALARS = (int, float, str, bool, type(None))
_key_encoder = msgspec.msgpack.Encoder()


def _is_scalar(annotation: object) -> bool:
    args = typing.get_args(annotation)
    if args and typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return all(_is_scalar(a) for a in args)
    return annotation in _SCALARS


_COMPOUND_FIELDS = tuple(
    name
    for name, annotation in typing.get_type_hints(SamplingRequest).items()
    if not _is_scalar(annotation)
)
"""The fields that may hold a list, a dict or a struct (``stop``, ``logit_bias``, ...)."""
_compound_values = operator.attrgetter(*_COMPOUND_FIELDS)


def _keepable(values: tuple[object, ...]) -> bool:
    """Whether the compound fields' values let a lowering be kept: each None, an empty list (the
    routes send absent lists so) or a string (``stop``)."""
    if values.count(None) + values.count([]) == len(values):  # the usual request, at C speed
        return True
    return all(v is None or v == [] or type(v) is str for v in values)


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
        key: object = None
        if _keepable(_compound_values(req)):
            # msgpack tells 1, 1.0 and True apart (equal as Python keys, not as wire bytes), and
            # an empty list from None.
            try:
                key = (_key_encoder.encode(msgspec.structs.astuple(req)), max_tokens, engine_side)
            except (TypeError, OverflowError, msgspec.EncodeError):
                key = None  # left to the lowering to refuse
        if key is None:
            return lower_sampling_params(
                req, max_tokens=max_tokens, model=model, tokenizer=tokenizer,
                engine_side=engine_side,
            )  # fmt: skip
        params = self._table.get(key)
        if params is None:
            params = lower_sampling_params(
                req, max_tokens=max_tokens, model=model, tokenizer=tokenizer,
                engine_side=engine_side,
            )  # fmt: skip
            table = self._table
            if len(table) >= MAX_ENTRIES:
                table.clear()
            table[key] = params
        return params.__copy__()  # type: ignore[attr-defined]  # msgspec.Struct's, without copy.copy

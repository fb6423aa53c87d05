"""The ``POST /inference/v1/generate`` body (vLLM 0.32's ``GenerateRequest``,
vllm/entrypoints/scale_out/token_in_token_out/protocol.py) as a msgspec Struct, decoded with
vLLM's (pydantic's) error reports.

``sampling_params`` is vLLM's ``SamplingParams`` validated as a typed dict: its keys are those
of the engine's ``SamplingParams`` (private ``_`` keys and unknown keys are ignored, as vLLM
ignores them); a mistyped value is reported as pydantic reports it (an ``is-instance`` error,
then the typed dict's). Its ``__post_init__`` checks are the text layer's sampling lowering.
"""

from __future__ import annotations

import contextlib
import itertools
from typing import Annotated, Any, Literal

import msgspec

from vllm_frontend.engine.protocol import SamplingParams

from .messages_protocol import Checked
from .protocol import Int64, StreamOptions, check_cache_salt, schema_of
from .validation import (
    AnyValue,
    DictOf,
    Int,
    LazyModel,
    ListOf,
    Model,
    Optional,
    Spec,
    Str,
    _err,
    convert_body,
    decode_json_object,
    validation_error,
)

__all__ = [
    "GenerateBody",
    "ReasoningParserKwargsBody",
    "parse_generate_request",
    "score_rows",
]

_SCORE_ROWS = "prompt_logprob_token_ids"
"""The ``sampling_params`` key typed ``list[list[StrictInt]]`` in JSON (an int32 array on the
wire: the text layer converts it)."""


class ReasoningParserKwargsBody(msgspec.Struct, forbid_unknown_fields=True):
    """vLLM's ``ReasoningParserKwargs`` (no other keys)."""

    chat_template_kwargs: dict[str, Any] = msgspec.field(default_factory=dict)


class GenerateBody(msgspec.Struct, kw_only=True):
    """vLLM's ``GenerateRequest`` fields, in its order (``sampling_params`` as its raw JSON)."""

    request_id: str | None = None
    token_ids: list[int]
    token_offsets: list[tuple[int, int]] | None = None
    features: Any = None
    content_parts: list[dict[str, Any]] | None = None
    sampling_params: dict[str, Any]
    model: str | None = None
    reasoning_ended: bool | None = None
    reasoning_parser_kwargs: ReasoningParserKwargsBody | None = None
    return_token_ids: bool | None = None
    output_mode: Literal["tokens", "text"] = "tokens"
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    cache_salt: Annotated[str, msgspec.Meta(min_length=1, max_length=1024)] | None = None
    priority: Int64 = 0
    kv_transfer_params: dict[str, Any] | None = None
    ec_transfer_params: dict[str, Any] | None = None


_SAMPLING_WRAPPER = "function-after[_validate_msgspec(), typed-dict]"


class _TokenIds(Spec):
    """``list[int]`` with ``min_length=1`` and vLLM's non-negative check."""

    def __init__(self) -> None:
        self.items = ListOf(Int())

    def errors(self, value: Any, loc: tuple[Any, ...]) -> list[dict[str, Any]]:
        errs = self.items.errors(value, loc)
        if errs:
            return errs
        if not value:
            ctx = {"field_type": "List", "min_length": 1, "actual_length": 0}
            msg = "List should have at least 1 item after validation, not 0"
            return [_err("too_short", loc, msg, value, ctx)]
        return []


def _negative(value: Any) -> str | None:
    if any(int(t) < 0 for t in value):
        return "token_ids must not contain negative values"
    return None


class _StrictInt(Spec):
    """pydantic's ``StrictInt``: an int, nothing converted."""

    def errors(self, value: Any, loc: tuple[Any, ...]) -> list[dict[str, Any]]:
        if isinstance(value, int) and not isinstance(value, bool):
            return []
        return [_err("int_type", loc, "Input should be a valid integer", value)]


def _sampling_fields() -> Model:
    model = schema_of(SamplingParams)
    names = {f.name: f.encode_name for f in msgspec.structs.fields(SamplingParams)}
    fields = {names[k]: v for k, v in model.fields.items() if not names[k].startswith("_")}
    fields[_SCORE_ROWS] = Optional(ListOf(ListOf(_StrictInt())))
    return Model("SamplingParams", fields)


class _SamplingParamsSpec(Spec):
    """vLLM's ``SamplingParams`` field: an instance, or a dict valid as its typed dict."""

    def __init__(self) -> None:
        self.typed = LazyModel(_sampling_fields)

    def errors(self, value: Any, loc: tuple[Any, ...]) -> list[dict[str, Any]]:
        inner_loc = (*loc, _SAMPLING_WRAPPER)
        if isinstance(value, dict):
            inner = self.typed.errors(value, inner_loc)
        else:
            inner = [_err("dict_type", inner_loc, "Input should be a valid dictionary", value)]
        if not inner:
            return []
        head = _err(
            "is_instance_of",
            (*loc, "is-instance[SamplingParams]"),
            "Input should be an instance of SamplingParams",
            value,
            {"class": "SamplingParams"},
        )
        return [head, *inner]


class _Forbidding(Model):
    """A model with ``extra="forbid"``: unknown keys are errors too."""

    def errors(self, value: Any, loc: tuple[Any, ...]) -> list[dict[str, Any]]:
        out = super().errors(value, loc)
        if isinstance(value, dict):
            out += [
                _err("extra_forbidden", (*loc, k), "Extra inputs are not permitted", v)
                for k, v in value.items()
                if k not in self.fields
            ]
        return out


_SAMPLING_SPEC = _SamplingParamsSpec()
_ROWS_SPEC = ListOf(ListOf(_StrictInt()))
_REASONING_KWARGS = Optional(
    _Forbidding("ReasoningParserKwargs", {"chat_template_kwargs": DictOf(AnyValue())})
)


class _Positive(Spec):
    """``int`` with ``gt=0``."""

    def __init__(self) -> None:
        self.int = Int()

    def errors(self, value: Any, loc: tuple[Any, ...]) -> list[dict[str, Any]]:
        errs = self.int.errors(value, loc)
        if errs or self.int.coerce(value) > 0:
            return errs
        return [_err("greater_than", loc, "Input should be greater than 0", value, {"gt": 0})]


def _features_value_error(features: dict[str, Any]) -> str | None:
    """``MultiModalFeatures._validate_parallel_fields``' refusal of a well-typed value."""
    hashes = features["mm_hashes"]
    placeholders = features["mm_placeholders"]
    kwargs_data = features.get("kwargs_data")
    metadata = features.get("mm_metadata")
    modalities = set(hashes)
    if set(placeholders) != modalities:
        return "mm_hashes and mm_placeholders must use the same modalities"
    if kwargs_data is not None and set(kwargs_data) != modalities:
        return "kwargs_data must use the same modalities as mm_hashes"
    if metadata is not None and set(metadata) != modalities:
        return "mm_metadata must use the same modalities as mm_hashes"
    spans: list[tuple[int, int]] = []
    for modality in modalities:
        count = len(hashes[modality])
        if count != len(placeholders[modality]):
            return f"{modality} mm_hashes and mm_placeholders must have the same length"
        if kwargs_data is not None and len(kwargs_data[modality]) != count:
            return f"{modality} kwargs_data and mm_hashes must have the same length"
        if metadata is not None and len(metadata[modality]) != count:
            return f"{modality} mm_metadata and mm_hashes must have the same length"
        spans += [
            (int(p["offset"]), int(p["offset"]) + int(p["length"])) for p in placeholders[modality]
        ]
    spans.sort()
    if any(nxt[0] < cur[1] for cur, nxt in itertools.pairwise(spans)):
        return "mm_placeholders must be globally non-overlapping and sorted"
    return None


_SERIALIZED = Optional(DictOf(ListOf(Optional(Str()))))
_FEATURES = Optional(
    Checked(
        Model(
            "MultiModalFeatures",
            {
                "mm_hashes": DictOf(ListOf(Str())),
                "mm_placeholders": DictOf(
                    ListOf(
                        Model(
                            "PlaceholderRangeInfo",
                            {"offset": Int(ge=0), "length": _Positive()},
                            ["offset", "length"],
                        )
                    )
                ),
                "kwargs_data": _SERIALIZED,
                "mm_metadata": _SERIALIZED,
            },
            ["mm_hashes", "mm_placeholders"],
        ),
        _features_value_error,
    )
)
_SCHEMA = LazyModel(
    lambda: schema_of(
        GenerateBody,
        {
            "token_ids": Checked(_TokenIds(), _negative),
            "sampling_params": _SAMPLING_SPEC,
            "reasoning_parser_kwargs": _REASONING_KWARGS,
            "features": _FEATURES,
        },
    )
)


def _typed_sampling(raw: dict[str, Any]) -> dict[str, Any]:
    """The keys of ``raw`` the engine's ``SamplingParams`` has (private and unknown dropped)."""
    return {k: v for k, v in raw.items() if k in _PUBLIC_SAMPLING_KEYS}


_PUBLIC_SAMPLING_KEYS = frozenset(
    f.encode_name
    for f in msgspec.structs.fields(SamplingParams)
    if not f.encode_name.startswith("_") and f.encode_name != _SCORE_ROWS
)


def parse_generate_request(body: bytes) -> tuple[GenerateBody, SamplingParams]:
    """Decode a ``/inference/v1/generate`` body like vLLM: the request, and its
    ``sampling_params`` typed as the engine's (values as sent, defaults for the rest; the
    post-init normalisations and checks are the text layer's)."""
    data = decode_json_object(body)
    if isinstance(data, dict):
        check_cache_salt(data)
    req = convert_body(data, GenerateBody, _SCHEMA)
    typed = _typed_sampling(req.sampling_params)
    sampling: SamplingParams | None = None
    try:
        sampling = msgspec.convert(typed, SamplingParams, strict=False)
    except msgspec.ValidationError:
        if not _SAMPLING_SPEC.typed.errors(typed, ()):
            # valid for pydantic, refused by msgspec's narrower lax mode: pydantic's values
            with contextlib.suppress(msgspec.ValidationError):
                coerced = _SAMPLING_SPEC.typed.coerce(typed)
                sampling = msgspec.convert(coerced, SamplingParams, strict=False)
    features = req.features
    rows = req.sampling_params.get(_SCORE_ROWS)
    if (
        sampling is None
        or (rows is not None and _ROWS_SPEC.errors(rows, ()))
        or not req.token_ids
        or min(req.token_ids) < 0
        or (features is not None and _FEATURES.errors(features, ()))
    ):
        raise validation_error(_SCHEMA.errors(data, ("body",)))
    if req.content_parts and features is not None:
        _refuse(data, "content_parts and features are mutually exclusive")
    if features is not None and _metadata_only(features) and not req.ec_transfer_params:
        _refuse(data, "metadata-only multimodal items require ec_transfer_params")
    if req.output_mode != "tokens" and not sampling.detokenize:
        # GenerateRequest._check_output_mode_detokenizes
        _refuse(
            data, f"output_mode={req.output_mode!r} requires sampling_params.detokenize to be true"
        )
    if features is not None:
        prompt_len = len(req.token_ids)
        for ranges in features["mm_placeholders"].values():
            if any(int(p["offset"]) + int(p["length"]) > prompt_len for p in ranges):
                _refuse(data, "mm_placeholders must remain within the token_ids sequence")
    return req, sampling


def _refuse(data: Any, message: str) -> None:
    """A ``GenerateRequest`` model validator's ``ValueError``, as pydantic reports it."""
    error = {"error": ValueError(message)}
    raise validation_error([_err("value_error", ("body",), f"Value error, {message}", data, error)])


def _metadata_only(features: dict[str, Any]) -> bool:
    """Some item has metadata but no data (``GenerateRequest._require_ec_for_metadata_only``)."""
    metadata = features.get("mm_metadata") or {}
    kwargs_data = features.get("kwargs_data") or {}
    for modality, items in metadata.items():
        data = kwargs_data.get(modality, [None] * len(items))
        if any(m is not None and k is None for m, k in zip(items, data, strict=False)):
            return True
    return False


def score_rows(req: GenerateBody) -> list[list[int]] | None:
    """The request's ``sampling_params.prompt_logprob_token_ids`` (checked by
    :func:`parse_generate_request`)."""
    rows: list[list[int]] | None = req.sampling_params.get(_SCORE_ROWS)
    return rows

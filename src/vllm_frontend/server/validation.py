"""Decoding JSON request bodies into msgspec Structs with vLLM's (pydantic's) error reports.

The happy path is two C passes: ``msgspec.json.decode`` to plain objects (so vLLM's
"before" model validators can look at the raw dict exactly as pydantic hands it to them), then
``msgspec.convert(..., strict=False)`` into the Struct (lax coercions like pydantic's: "3" -> 3).

Only when conversion fails do we walk a small schema (:class:`Spec` objects mirroring the
pydantic field types) to list every error the way pydantic does and render them the way vLLM's
``validation_exception_handler`` does (vllm/entrypoints/serve/exception_handling/handlers/
validation.py): ``"N validation errors:\\n  {'type': ..., 'loc': 'body.x', 'msg': ..., 'input':
...}"`` with ``param`` = the first error's location and ``type`` "Bad Request".
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import msgspec

from .errors import DetailHttpError, RequestValidationFailed, sanitize_message

T = TypeVar("T")

_decode = msgspec.json.decode

# ---------------------------------------------------------------------------------------------
# schema of pydantic types, used only to describe errors


class Spec:
    """A pydantic field type, able to list the errors pydantic reports for a value."""

    def errors(self, value: Any, loc: tuple[Any, ...]) -> list[dict[str, Any]]:
        raise NotImplementedError

    def coerce(self, value: Any) -> Any:
        """``value`` as pydantic's lax mode converts it (only called on a value without
        errors); the default keeps it."""
        return value


def _err(
    kind: str, loc: tuple[Any, ...], msg: str, value: Any, ctx: dict[str, Any] | None = None
) -> dict[str, Any]:
    e: dict[str, Any] = {"type": kind, "loc": loc, "msg": msg, "input": value}
    if ctx is not None:
        e["ctx"] = ctx
    return e


class AnyValue(Spec):
    """``Any``."""

    def errors(self, value: Any, loc: tuple[Any, ...]) -> list[dict[str, Any]]:
        return []


_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


class Int(Spec):
    """``int`` with optional ``ge``/``le`` (pydantic lax mode: numeric strings, integral floats
    and booleans are accepted)."""

    def __init__(self, ge: int | None = None, le: int | None = None) -> None:
        self.ge, self.le = ge, le

    def errors(self, value: Any, loc: tuple[Any, ...]) -> list[dict[str, Any]]:
        v: Any = value
        if isinstance(value, bool):
            v = int(value)
        elif isinstance(value, float):
            if not math.isfinite(value):
                return [_err("finite_number", loc, "Input should be a finite number", value)]
            if value != int(value):
                return [
                    _err(
                        "int_from_float",
                        loc,
                        "Input should be a valid integer, got a number with a fractional part",
                        value,
                    )
                ]
            if not _I64_MIN < value < _I64_MAX:
                # pydantic converts an integral float only within i64 (its bounds excluded,
                # as floats): 1e19 is "too large", even for an unbounded int
                return [_err("int_parsing_size", loc, _INT_TOO_LARGE, value)]
            v = int(value)
        elif isinstance(value, str):
            parsed = _lax_int(value)
            if parsed is None:
                return [
                    _err(
                        "int_parsing",
                        loc,
                        "Input should be a valid integer, unable to parse string as an integer",
                        value,
                    )
                ]
            v = parsed
        elif not isinstance(value, int):
            return [_err("int_type", loc, "Input should be a valid integer", value)]
        if self.ge is not None and v < self.ge:
            return [
                _err(
                    "greater_than_equal",
                    loc,
                    f"Input should be greater than or equal to {self.ge}",
                    value,
                    {"ge": self.ge},
                )
            ]
        if self.le is not None and v > self.le:
            return [
                _err(
                    "less_than_equal",
                    loc,
                    f"Input should be less than or equal to {self.le}",
                    value,
                    {"le": self.le},
                )
            ]
        return []

    def coerce(self, value: Any) -> Any:
        if isinstance(value, str):
            return _lax_int(value)
        return int(value)


_INT_TOO_LARGE = "Unable to parse input string as an integer, exceeded maximum size"
_ZERO_FRACTION = re.compile(r"\.0+$")


def _lax_int(text: str) -> int | None:
    """Pydantic's integer from a string: surrounding whitespace and a zero fraction ("5.00")
    allowed, ASCII digits only; None when it does not parse."""
    text = _ZERO_FRACTION.sub("", text.strip(), count=1)
    if not text.isascii():
        return None
    try:
        return int(text)
    except ValueError:
        return None


def lax_int(value: Any) -> int | None:
    """``value`` as pydantic's lax mode reads an integer (booleans, integral floats, numeric
    strings), or None where it refuses it."""
    if isinstance(value, str):
        return _lax_int(value)
    if isinstance(value, int):
        return int(value)
    if (
        isinstance(value, float)
        and math.isfinite(value)
        and value == int(value)
        and _I64_MIN < value < _I64_MAX
    ):
        return int(value)
    return None


def _lax_float(text: str) -> float | None:
    """Pydantic's number from a string (surrounding whitespace allowed, ASCII only)."""
    if not text.isascii():
        return None
    try:
        return float(text.strip())
    except ValueError:
        return None


class Float(Spec):
    """``float`` with optional ``ge``/``le`` (lax: ints, booleans and numeric strings
    accepted)."""

    def __init__(self, ge: float | None = None, le: float | None = None) -> None:
        self.ge, self.le = ge, le

    def errors(self, value: Any, loc: tuple[Any, ...]) -> list[dict[str, Any]]:
        if isinstance(value, (int, float)):
            return self._bounds(float(value), value, loc)
        if isinstance(value, str):
            if (number := _lax_float(value)) is not None:
                return self._bounds(number, value, loc)
            return [
                _err(
                    "float_parsing",
                    loc,
                    "Input should be a valid number, unable to parse string as a number",
                    value,
                )
            ]
        return [_err("float_type", loc, "Input should be a valid number", value)]

    def coerce(self, value: Any) -> Any:
        if isinstance(value, str):
            return _lax_float(value)
        return float(value)

    def _bounds(self, number: float, value: Any, loc: tuple[Any, ...]) -> list[dict[str, Any]]:
        # pydantic names an integral bound without its fraction ("less than or equal to 2")
        if self.ge is not None and number < self.ge:
            bound = _number(self.ge)
            msg = f"Input should be greater than or equal to {bound}"
            return [_err("greater_than_equal", loc, msg, value, {"ge": self.ge})]
        if self.le is not None and number > self.le:
            bound = _number(self.le)
            msg = f"Input should be less than or equal to {bound}"
            return [_err("less_than_equal", loc, msg, value, {"le": self.le})]
        return []


def _number(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else repr(bound)


_BOOL_PARSING = "Input should be a valid boolean, unable to interpret input"
_TRUE_STRINGS = {"1", "on", "t", "true", "y", "yes"}
_BOOL_STRINGS = {"0", "off", "f", "false", "n", "no", *_TRUE_STRINGS}


class Bool(Spec):
    """``bool`` (lax: 0/1 and pydantic's true/false words accepted)."""

    def errors(self, value: Any, loc: tuple[Any, ...]) -> list[dict[str, Any]]:
        if isinstance(value, bool):
            return []
        if isinstance(value, (int, float)):
            if value in (0, 1):
                return []
            # pydantic reads a number as an i64 first: one that is not one (a fraction, out of
            # range) is the wrong type, an i64 other than 0/1 cannot be interpreted
            if _I64_MIN <= value <= _I64_MAX and value == int(value):
                return [_err("bool_parsing", loc, _BOOL_PARSING, value)]
            return [_err("bool_type", loc, "Input should be a valid boolean", value)]
        if isinstance(value, str):
            if value.lower() in _BOOL_STRINGS:
                return []
            return [_err("bool_parsing", loc, _BOOL_PARSING, value)]
        return [_err("bool_type", loc, "Input should be a valid boolean", value)]

    def coerce(self, value: Any) -> Any:
        if isinstance(value, str):
            return value.lower() in _TRUE_STRINGS
        return bool(value)


class Str(Spec):
    """``str`` with optional length bounds (no coercion from numbers, like pydantic)."""

    def __init__(self, min_length: int | None = None, max_length: int | None = None) -> None:
        self.min_length, self.max_length = min_length, max_length

    def errors(self, value: Any, loc: tuple[Any, ...]) -> list[dict[str, Any]]:
        if not isinstance(value, str):
            return [_err("string_type", loc, "Input should be a valid string", value)]
        n = self.min_length
        if n is not None and len(value) < n:
            unit = "character" if n == 1 else "characters"
            return [
                _err(
                    "string_too_short",
                    loc,
                    f"String should have at least {n} {unit}",
                    value,
                    {"min_length": n},
                )
            ]
        n = self.max_length
        if n is not None and len(value) > n:
            unit = "character" if n == 1 else "characters"
            return [
                _err(
                    "string_too_long",
                    loc,
                    f"String should have at most {n} {unit}",
                    value,
                    {"max_length": n},
                )
            ]
        return []


class Bytes(Spec):
    """``bytes`` (in JSON a string: pydantic takes any string for one)."""

    def errors(self, value: Any, loc: tuple[Any, ...]) -> list[dict[str, Any]]:
        if isinstance(value, str):
            return []
        return [_err("bytes_type", loc, "Input should be a valid bytes", value)]


class Literal(Spec):
    """``Literal[...]`` of strings."""

    def __init__(self, *values: str) -> None:
        self.values = values
        quoted = [repr(v) for v in values]
        self.expected = (
            quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]
        )

    def errors(self, value: Any, loc: tuple[Any, ...]) -> list[dict[str, Any]]:
        if isinstance(value, str) and value in self.values:
            return []
        return [
            _err(
                "literal_error",
                loc,
                f"Input should be {self.expected}",
                value,
                {"expected": self.expected},
            )
        ]


class ListOf(Spec):
    """``list[item]`` with an optional ``max_length``."""

    def __init__(self, item: Spec, max_length: int | None = None) -> None:
        self.item, self.max_length = item, max_length

    def errors(self, value: Any, loc: tuple[Any, ...]) -> list[dict[str, Any]]:
        if not isinstance(value, list):
            return [_err("list_type", loc, "Input should be a valid list", value)]
        out: list[dict[str, Any]] = []
        for i, v in enumerate(value):
            out.extend(self.item.errors(v, (*loc, i)))
        if self.max_length is not None and len(value) > self.max_length:
            out.append(
                _err(
                    "too_long",
                    loc,
                    f"List should have at most {self.max_length} items after validation, "
                    f"not {len(value)}",
                    value,
                    {
                        "field_type": "List",
                        "max_length": self.max_length,
                        "actual_length": len(value),
                    },
                )
            )
        return out

    def coerce(self, value: Any) -> Any:
        return [self.item.coerce(v) for v in value]


class DictOf(Spec):
    """``dict[str, value]``."""

    def __init__(self, value: Spec) -> None:
        self.value = value

    def errors(self, value: Any, loc: tuple[Any, ...]) -> list[dict[str, Any]]:
        if not isinstance(value, dict):
            return [_err("dict_type", loc, "Input should be a valid dictionary", value)]
        out: list[dict[str, Any]] = []
        for k, v in value.items():
            out.extend(self.value.errors(v, (*loc, k)))
        return out

    def coerce(self, value: Any) -> Any:
        return {k: self.value.coerce(v) for k, v in value.items()}


class Union(Spec):
    """``A | B | ...`` (pydantic's smart union reports every branch's errors, in order)."""

    def __init__(self, *branches: Spec) -> None:
        self.branches = branches

    def errors(self, value: Any, loc: tuple[Any, ...]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for b in self.branches:
            errs = b.errors(value, loc)
            if not errs:
                return []
            out.extend(errs)
        return out

    def coerce(self, value: Any) -> Any:
        # Smart mode: a branch that takes the value as it is wins over the first lax one.
        valid = [b for b in self.branches if not b.errors(value, ())]
        for b in valid:
            converted = b.coerce(value)
            if type(converted) is type(value) and converted == value:
                return converted
        return valid[0].coerce(value) if valid else value


class Optional(Spec):
    """``X | None``."""

    def __init__(self, inner: Spec) -> None:
        self.inner = inner

    def errors(self, value: Any, loc: tuple[Any, ...]) -> list[dict[str, Any]]:
        return [] if value is None else self.inner.errors(value, loc)

    def coerce(self, value: Any) -> Any:
        return None if value is None else self.inner.coerce(value)


class Model(Spec):
    """A pydantic model / TypedDict / dataclass: named fields, some required."""

    def __init__(
        self,
        name: str,
        fields: dict[str, Spec],
        required: Sequence[str] = (),
    ) -> None:
        self.name, self.fields, self.required = name, fields, set(required)

    def errors(self, value: Any, loc: tuple[Any, ...]) -> list[dict[str, Any]]:
        if not isinstance(value, dict):
            # FastAPI validates the decoded JSON in python mode: pydantic says this for
            # nested models too
            msg = "Input should be a valid dictionary or object to extract fields from"
            return [_err("model_attributes_type", loc, msg, value)]
        out: list[dict[str, Any]] = []
        for name, spec in self.fields.items():
            if name not in value:
                if name in self.required:
                    out.append(_err("missing", (*loc, name), "Field required", value))
                continue
            out.extend(spec.errors(value[name], (*loc, name)))
        return out

    def coerce(self, value: Any) -> Any:
        fields = self.fields
        return {k: fields[k].coerce(v) if k in fields else v for k, v in value.items()}


class TypedDict(Model):
    """A ``TypedDict``: as :class:`Model`, but a non-object is "not a valid dictionary"."""

    def errors(self, value: Any, loc: tuple[Any, ...]) -> list[dict[str, Any]]:
        if not isinstance(value, dict):
            return [_err("dict_type", loc, "Input should be a valid dictionary", value)]
        return super().errors(value, loc)


class Dataclass(Model):
    """A pydantic dataclass: as :class:`Model`, but a non-object is "not a dictionary or an
    instance of" the class."""

    def errors(self, value: Any, loc: tuple[Any, ...]) -> list[dict[str, Any]]:
        if not isinstance(value, dict):
            msg = f"Input should be a dictionary or an instance of {self.name}"
            return [_err("dataclass_type", loc, msg, value, {"class_name": self.name})]
        return super().errors(value, loc)


class Iterable(Spec):
    """``Iterable[X]``: pydantic checks only that the value iterates (a JSON string, array or
    object); its items are validated later, as they are read."""

    def errors(self, value: Any, loc: tuple[Any, ...]) -> list[dict[str, Any]]:
        if isinstance(value, str | list | dict):
            return []
        return [_err("iterable_type", loc, "Input should be iterable", value)]


class TaggedUnion(Spec):
    """A union of named models: as :class:`Union`, each branch's errors located under its
    name (as pydantic locates them for a union of models and TypedDicts)."""

    def __init__(self, *branches: Model) -> None:
        self.branches = branches

    def errors(self, value: Any, loc: tuple[Any, ...]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for b in self.branches:
            errs = b.errors(value, (*loc, b.name))
            if not errs:
                return []
            out.extend(errs)
        return out


class LazyModel(Model):
    """A :class:`Model` built by ``build`` on first use: schemas only describe errors, so
    building them (``msgspec.inspect`` over the request Structs) waits for the first bad body."""

    def __init__(self, build: Callable[[], Model]) -> None:
        self._build = build

    def __getattr__(self, attr: str) -> Any:
        # Only called while ``name``, ``fields`` and ``required`` are still unset.
        if attr not in ("name", "fields", "required"):
            raise AttributeError(attr)
        model = self._build()
        self.name, self.fields, self.required = model.name, model.fields, model.required
        return getattr(self, attr)


# ---------------------------------------------------------------------------------------------
# rendering like vLLM's validation_exception_handler

_MAX_REPORTED_ERRORS = 10
_MAX_ERROR_INPUT_CHARS = 200
_MAX_ERROR_CHARS = 1000


def _summarize_input(value: Any) -> Any:
    if isinstance(value, str):
        if len(value) > _MAX_ERROR_INPUT_CHARS:
            return value[:_MAX_ERROR_INPUT_CHARS] + "...[truncated]"
        return value
    if isinstance(value, (list, tuple, dict)):
        return f"<{type(value).__name__} of {len(value)} items>"
    text = str(value)
    if len(text) > _MAX_ERROR_INPUT_CHARS:
        return text[:_MAX_ERROR_INPUT_CHARS] + "...[truncated]"
    return text


_INTERNAL_LOC_MARKERS = frozenset(
    {
        "function-wrap", "function-after", "function-before", "function-plain",
        "json-or-python", "lax-or-strict", "chain", "default", "nullable", "tagged-union",
        "union", "call", "arguments", "is-instance", "is-subclass", "callable", "str", "int",
        "float", "bool", "bytes", "bytearray", "list", "tuple", "dict", "set", "frozenset",
        "complex", "none", "nonetype",
    }
)  # fmt: skip


def _internal_loc_segment(segment: str) -> bool:
    return any(c in segment for c in "[]{}()") or segment.lower() in _INTERNAL_LOC_MARKERS


def _loc_str(loc: tuple[Any, ...]) -> str:
    # vLLM's clean_loc_for_param: pydantic's wrapper and union-branch markers are dropped.
    parts = [str(p) for p in loc]
    kept = [p for p in parts if not _internal_loc_segment(p)]
    return ".".join(kept or parts)


def validation_error(errors: list[dict[str, Any]] | list[str]) -> RequestValidationFailed:
    """The 400 vLLM sends for a FastAPI RequestValidationError with these errors."""
    param = None
    if errors and isinstance(errors[0], dict):
        param = _loc_str(errors[0]["loc"])
    if not errors:
        return RequestValidationFailed("Validation error")
    count = len(errors)
    label = "error" if count == 1 else "errors"
    lines = []
    for err in errors[:_MAX_REPORTED_ERRORS]:
        if isinstance(err, dict):
            err = dict(err)
            err["input"] = _summarize_input(err["input"])
            err["loc"] = _loc_str(err["loc"])
        text = str(err)
        if len(text) > _MAX_ERROR_CHARS:
            text = text[:_MAX_ERROR_CHARS] + "...[truncated]"
        lines.append(f"  {text}\n")
    message = f"{count} validation {label}:\n" + "".join(lines)
    if count > _MAX_REPORTED_ERRORS:
        message += f"  ...and {count - _MAX_REPORTED_ERRORS} more {label}\n"
    return RequestValidationFailed(sanitize_message(message.rstrip()), param=param)


# ---------------------------------------------------------------------------------------------
# decoding


BODY_PARSE_ERROR = "There was an error parsing the body"
"""FastAPI's message for a body it cannot read as JSON for a reason other than its syntax."""


def decode_json_object(body: bytes) -> Any:
    """The JSON value of a request body, or FastAPI's error for an empty or malformed body."""
    if body:
        value = _decode_json(body)
        if value is not None:
            return value
    # FastAPI takes a JSON null body for no body at all: the required body is missing
    return _raise(validation_error([_err("missing", ("body",), "Field required", None)]))


def _json_media_type(content_type: str) -> bool:
    # email.message's reading of the header, as FastAPI reads it: one "/" in the part before
    # any ";", application/json or application/*+json (any case)
    media = content_type.partition(";")[0].strip().lower()
    if media.count("/") != 1:
        return False
    main, _, sub = media.partition("/")
    return main == "application" and (sub == "json" or sub.endswith("+json"))


def decode_embedded_body(body: bytes, content_type: str | None) -> Any:
    """The body FastAPI hands its ``Body(embed=True)`` parameters: None when empty, the JSON
    value under a JSON media type (FastAPI's errors for malformed JSON), else the raw bytes
    (also without a content type: FastAPI's strict content type)."""
    if not body or content_type is None or not _json_media_type(content_type):
        return body or None
    return _decode_json(body)


def _decode_json(body: bytes) -> Any:
    try:
        return _decode(body)
    except (msgspec.DecodeError, RecursionError):
        pass
    # slow path, for the exact message and position Python's json module reports (FastAPI's)
    try:
        return json.loads(body)
    except json.JSONDecodeError as e:
        err = _err("json_invalid", ("body", e.pos), "JSON decode error", {}, {"error": e.msg})
        raise validation_error([err]) from None
    except Exception:
        # FastAPI's answer to any other failure to read the body (invalid UTF-8, nesting too
        # deep, an integer over Python's digit limit): HTTPException(400), answered as
        # {"detail": ...}
        raise DetailHttpError(400, BODY_PARSE_ERROR) from None


def _raise(exc: Exception) -> Any:
    raise exc


Validator = Callable[[dict[str, Any]], None]

_INTEGER_FIELDS: dict[type, frozenset[str]] = {}


def integer_fields(struct: type) -> frozenset[str]:
    """The fields ``struct`` types as an integer or a list of integers (optional or not)."""
    if (known := _INTEGER_FIELDS.get(struct)) is not None:
        return known
    import msgspec.inspect as mi

    def integral(t: Any) -> bool:
        return isinstance(t, mi.IntType) or (
            isinstance(t, mi.ListType) and isinstance(t.item_type, mi.IntType)
        )

    names = set()
    for field in mi.type_info(struct).fields:  # type: ignore[attr-defined]
        types = field.type.types if isinstance(field.type, mi.UnionType) else (field.type,)
        if any(integral(t) for t in types) and all(
            integral(t) or isinstance(t, mi.NoneType) for t in types
        ):
            names.add(field.name)
    _INTEGER_FIELDS[struct] = known = frozenset(names)
    return known


def lax_strings_refused(data: dict[str, Any], fields: frozenset[str]) -> bool:
    """Whether ``data`` gives one of its integer ``fields`` (:func:`integer_fields`: typed as
    an integer or a list of them) a string that msgspec's lax mode reads as one and pydantic
    does not: msgspec reads an exponent ("1e3", "1E1"), pydantic only digits with an optional
    zero fraction."""
    for key in fields.intersection(data):  # (in C: most bodies give one or two of them)
        value = data[key]
        kind = type(value)
        if kind is str:
            if _lax_int(value) is None:
                return True
        elif kind is list:
            for item in value:
                if type(item) is str and _lax_int(item) is None:
                    return True
    return False


def convert_body(
    data: Any,
    struct: type[T],
    spec: Model,
    before: Sequence[Validator] = (),
    unconverted: Sequence[tuple[str, Callable[[Any], bool]]] = (),
) -> T:
    """Validate a decoded body like pydantic would and convert it into ``struct``.

    ``before`` are vLLM's ``mode="before"`` model validators, already in the order pydantic runs
    them (the reverse of their definition order); they see the raw dict and raise
    ``InvalidParameter``/``BadRequest``. ``unconverted`` lists fields the Struct types as
    ``Any``, each with a fast predicate accepting its common valid values; a value it does not
    accept is checked against the schema.
    """
    if not isinstance(data, dict):
        raise validation_error(spec.errors(data, ("body",)))
    for check in before:
        check(data)
    for name, fast_ok in unconverted:
        if (
            name in data
            and not fast_ok(data[name])
            and spec.fields[name].errors(data[name], ("body", name))
        ):
            raise validation_error(spec.errors(data, ("body",)))
    if lax_strings_refused(data, integer_fields(struct)) and (
        errors := spec.errors(data, ("body",))
    ):
        raise validation_error(errors)
    try:
        return msgspec.convert(data, struct, strict=False)
    except msgspec.ValidationError as exc:
        errors = spec.errors(data, ("body",))
        if errors:
            raise validation_error(errors) from None
        failure = exc
    # Valid for pydantic, refused by msgspec's narrower lax mode ("yes" for a bool, "5.0" for
    # an int): convert the values as pydantic does, then again.
    try:
        return msgspec.convert(spec.coerce(data), struct, strict=False)
    except msgspec.ValidationError:
        raise RequestValidationFailed(f"1 validation error:\n  {failure}") from None


_PYDANTIC_DOCS = "https://errors.pydantic.dev/2.14/v/"
"""pydantic's error pages, as vLLM 0.32's pydantic (2.14) links them."""


def pydantic_report(title: str, errors: list[dict[str, Any]]) -> str:
    """``str(pydantic.ValidationError)`` for ``errors`` (locations without ``body``) raised
    validating ``title``: vLLM's message where such an error escapes to a 400."""
    count = len(errors)
    lines = [f"{count} validation error{'s' if count != 1 else ''} for {title}"]
    for err in errors:
        value = err["input"]
        text = repr(value)
        if len(text) > 50:
            text = text[:25] + "..." + text[-24:]
        lines.append(".".join(str(p) for p in err["loc"]))
        lines.append(
            f"  {err['msg']} [type={err['type']}, input_value={text}, "
            f"input_type={type(value).__name__}]"
        )
        lines.append(f"    For further information visit {_PYDANTIC_DOCS}{err['type']}")
    return "\n".join(lines)

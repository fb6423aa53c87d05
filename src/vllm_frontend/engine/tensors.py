"""Array and tensor triples of the wire protocol (engine-protocol.md §6).

vLLM writes every ``numpy.ndarray`` and ``torch.Tensor`` as ``[dtype, shape, data]``; the two
differ only in how ``dtype`` is spelled (``"<f4"`` for numpy fields, ``"float32"`` for torch
fields, §6.3), and the engine rejects the wrong spelling. So each kind gets its own struct:
:class:`NdArray` for numpy-typed fields and :class:`Tensor` for torch-typed fields.

``data`` holds the raw C-order element bytes: a ``msgspec.msgpack.Ext`` (code 3) for bytes that
travel inline in the payload, an int aux-frame index on the wire, or a numpy array (the caller's
array when building a message, or a view of the received aux frame after decoding). When
encoding, a numpy ``data`` goes inline below 256 bytes and out-of-band otherwise (vLLM's rule,
§6.4); an ``Ext`` is always written inline. ``numpy()`` returns zero-copy read-only views, except
for ``bfloat16`` which is widened.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, TypeGuard

import msgspec

from vllm_frontend.engine.errors import ProtocolError
from vllm_frontend.lazy import LazyModule, loaded

__all__ = [
    "RAW_VIEW_EXT_CODE",
    "NdArray",
    "Tensor",
    "numpy_dtype_for_torch",
    "raw_bytes",
    "to_bfloat16_words",
    "torch_dtype_for_numpy",
]

if TYPE_CHECKING:
    import numpy as np
else:
    np = LazyModule("numpy", globals(), "np")  # imported by the first use (vllm_frontend.lazy)

RAW_VIEW_EXT_CODE = 3
"""msgpack extension code of inline raw array bytes (vLLM ``CUSTOM_TYPE_RAW_VIEW``)."""

_Ext = msgspec.msgpack.Ext

# What a triple's ``data`` holds. msgspec decodes the wire form (``Ext`` for inline bytes, int for
# an aux-frame index) natively, without a Python hook per array: that is what keeps decoding 256
# outputs with logprobs cheap. At runtime the codec and the constructors may also store a numpy
# array (raw element buffer, encoded inline or out-of-band by size), which only the type checker
# needs to know about.
if TYPE_CHECKING:
    TripleData = _Ext | int | np.ndarray
else:
    TripleData = _Ext | int

# torch dtype names (without the "torch." prefix) that have an exact numpy equivalent.
_TORCH_TO_NUMPY: dict[str, str] = {
    "float32": "<f4",
    "float": "<f4",
    "float64": "<f8",
    "double": "<f8",
    "float16": "<f2",
    "half": "<f2",
    "int64": "<i8",
    "long": "<i8",
    "int32": "<i4",
    "int": "<i4",
    "int16": "<i2",
    "short": "<i2",
    "int8": "|i1",
    "uint8": "|u1",
    "uint16": "<u2",
    "uint32": "<u4",
    "uint64": "<u8",
    "bool": "|b1",
    "complex64": "<c8",
    "complex128": "<c16",
}
# torch dtypes without a numpy equivalent, with their item sizes (for length validation).
_TORCH_ONLY_ITEMSIZE: dict[str, int] = {
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1,
    "float8_e8m0fnu": 1,
}
# The canonical torch spelling for each numpy dtype (what vLLM writes for a torch tensor).
_NUMPY_TO_TORCH: dict[str, str] = {
    "<f4": "float32",
    "<f8": "float64",
    "<f2": "float16",
    "<i8": "int64",
    "<i4": "int32",
    "<i2": "int16",
    "|i1": "int8",
    "|u1": "uint8",
    "<u2": "uint16",
    "<u4": "uint32",
    "<u8": "uint64",
    "|b1": "bool",
    "<c8": "complex64",
    "<c16": "complex128",
}
_NUMERIC_KINDS = frozenset("biufc")
# Parsed numpy dtypes by wire string; only valid numeric dtypes are cached, so it stays small.
_numpy_dtype_cache: dict[str, np.dtype[Any]] = {}


def _parse_numpy_dtype(name: object) -> np.dtype[Any]:
    if isinstance(name, str):
        cached = _numpy_dtype_cache.get(name)
        if cached is not None:
            return cached
        try:
            dt = np.dtype(name)
        except Exception:
            dt = None
        if dt is not None and dt.kind in _NUMERIC_KINDS and dt.fields is None and dt.shape == ():
            _numpy_dtype_cache[name] = dt
            return dt
    raise ProtocolError(f"unsupported numpy dtype {name!r} in array triple")


def numpy_dtype_for_torch(name: str) -> np.dtype[Any] | None:
    """The numpy dtype with the same layout as torch dtype ``name``, or None (e.g. bfloat16)."""
    spelled = _TORCH_TO_NUMPY.get(name)
    return None if spelled is None else _parse_numpy_dtype(spelled)


def torch_dtype_for_numpy(dtype: np.dtype[Any] | str) -> str:
    """The torch dtype name vLLM writes for a tensor of numpy dtype ``dtype``."""
    name = _NUMPY_TO_TORCH.get(np.dtype(dtype).str)
    if name is None:
        raise ValueError(f"numpy dtype {dtype!r} has no torch equivalent")
    return name


def raw_bytes(array: np.ndarray) -> memoryview:
    """The element bytes of ``array`` as a flat byte memoryview, copying only if not contiguous."""
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    if array.size == 0:
        return memoryview(b"")
    return memoryview(array).cast("B")  # type: ignore[arg-type]  # ndarray is a buffer


_BUFFER_TYPES = (bytes, memoryview, bytearray)


def _is_ndarray(value: object) -> TypeGuard[np.ndarray]:
    numpy = loaded("numpy")
    return numpy is not None and isinstance(value, numpy.ndarray)


def _raw_buffer(data: object) -> Any:
    """The raw element buffer behind a triple's ``data``; ProtocolError if there is none."""
    if type(data) is _Ext:
        if data.code != RAW_VIEW_EXT_CODE:
            raise ProtocolError(f"array data uses msgpack extension {data.code}, expected 3")
        return data.data
    if isinstance(data, _BUFFER_TYPES) or _is_ndarray(data):
        return data
    if isinstance(data, int) and not isinstance(data, bool):
        raise ProtocolError(f"array data refers to aux frame {data}, which was not received")
    raise ProtocolError(f"array data must be raw bytes, got {type(data).__name__}")


def _buffer_view(data: object, dtype: np.dtype[Any], shape: tuple[int, ...]) -> np.ndarray:
    """View ``data`` (raw element bytes) as an array, validating its length against ``shape``."""
    buf = _raw_buffer(data)
    try:
        # frombuffer rejects a length that is not a multiple of the item size, reshape one
        # whose element count differs from the shape's.
        array = np.frombuffer(buf, dtype=dtype).reshape(shape)
    except (TypeError, ValueError, OverflowError, MemoryError) as exc:
        raise ProtocolError(f"cannot view array data as {dtype} {list(shape)}: {exc}") from None
    if array.shape != shape and array.shape != tuple(shape):  # a -1 dimension was inferred
        raise ProtocolError(f"invalid array shape {list(shape)}")
    return array


# struct-module formats of little-endian numpy dtypes, for numpy-free ``tolist()``.
_LIST_FORMATS: dict[str, str] = (
    {
        "<i4": "i",
        "<i8": "q",
        "<f4": "f",
        "<f8": "d",
        "<f2": "e",
        "<i2": "h",
        "<u2": "H",
        "<u4": "I",
        "<u8": "Q",
        "|i1": "b",
        "|u1": "B",
        "|b1": "?",
    }
    if sys.byteorder == "little"
    else {}
)


def _to_list(data: object, spelled: str, shape: tuple[int, ...]) -> Any:
    fmt = _LIST_FORMATS.get(spelled)
    if fmt is None or not shape or min(shape) < 0:
        return _buffer_view(data, _parse_numpy_dtype(spelled), shape).tolist()
    view = memoryview(_raw_buffer(data))
    if 0 in shape:  # memoryview.cast refuses empty shapes
        if view.nbytes:
            raise ProtocolError(f"array data of {view.nbytes} bytes for the empty {list(shape)}")
        return _empty_lists(shape)
    try:
        if view.format != "B":
            view = view.cast("B")
        return view.cast(fmt, shape).tolist()  # type: ignore[call-overload]
    except (TypeError, ValueError) as exc:
        raise ProtocolError(f"cannot view array data as {spelled} {list(shape)}: {exc}") from None


def _empty_lists(shape: tuple[int, ...]) -> list[Any]:
    """The nested lists of an array of ``shape`` with no elements (a dimension is 0)."""
    if len(shape) == 1 or shape[0] == 0:
        return []
    return [_empty_lists(shape[1:]) for _ in range(shape[0])]


def _as_raw(array: np.ndarray) -> np.ndarray:
    """``array`` as a C-contiguous array (copied once only if it is not contiguous already)."""
    # np.ascontiguousarray would turn a 0-d array into a 1-d one.
    return array if array.flags.c_contiguous else np.ascontiguousarray(array)


class NdArray(msgspec.Struct, array_like=True, gc=False):
    """A numpy-typed array on the wire: ``[dtype.str, shape, data]`` (e.g. ``"<i4"``).

    Used for ``LogprobsLists`` members, ``routed_experts``, ``SamplingMaskLists`` members and
    ``SamplingParams.prompt_logprob_token_ids``. ``data`` is the raw element buffer (see the
    module docstring); use :meth:`numpy` to get a zero-copy, read-only view.
    """

    dtype: str
    shape: tuple[int, ...]
    data: TripleData

    @classmethod
    def from_numpy(cls, array: np.ndarray) -> NdArray:
        """Wrap a numpy array without copying (a non-contiguous array is made contiguous)."""
        array = _as_raw(array)
        return cls(array.dtype.str, tuple(array.shape), array)

    def numpy(self) -> np.ndarray:
        """The array as a read-only numpy view of the received bytes; ProtocolError if garbled."""
        return _buffer_view(self.data, _parse_numpy_dtype(self.dtype), self.shape)

    def tolist(self) -> Any:
        """The elements as nested Python lists (a scalar for 0-d), without creating a numpy
        array (fast for the small per-output logprobs arrays); ProtocolError if garbled."""
        return _to_list(self.data, self.dtype, self.shape)

    @property
    def nbytes(self) -> int:
        """Size of the raw element buffer in bytes."""
        return _nbytes(self.data)


class Tensor(msgspec.Struct, array_like=True, gc=False):
    """A torch-typed tensor on the wire: ``[torch dtype name, shape, data]`` (e.g. ``"float32"``).

    Used for ``prompt_embeds``, ``PlaceholderRange.is_embed``, multimodal kwargs,
    ``pooling_output``, ``LogprobsTensors`` members and ``prompt_token_id_logprobs``.
    ``bfloat16`` and float8 tensors are carried as raw bytes (numpy has no such dtype).
    """

    dtype: str
    shape: tuple[int, ...]
    data: TripleData

    @classmethod
    def from_numpy(cls, array: np.ndarray, dtype: str | None = None) -> Tensor:
        """Wrap a numpy array without copying.

        ``dtype`` overrides the torch dtype name, e.g. ``"bfloat16"`` for an array of raw
        16-bit words; its item size must match the array's.
        """
        array = _as_raw(array)
        name = torch_dtype_for_numpy(array.dtype) if dtype is None else dtype
        if dtype is not None and _torch_itemsize(name) != array.dtype.itemsize:
            raise ValueError(f"torch dtype {name!r} does not match array dtype {array.dtype}")
        return cls(name, tuple(array.shape), array)

    def numpy(self) -> np.ndarray:
        """The tensor as a numpy array: a zero-copy read-only view of the received bytes.

        ``bfloat16`` is widened to float32 (a copy, exact). Other dtypes without a numpy
        equivalent (float8) and garbled triples raise ProtocolError.
        """
        spelled = _TORCH_TO_NUMPY.get(self.dtype)
        if spelled is not None:
            return _buffer_view(self.data, _parse_numpy_dtype(spelled), self.shape)
        if self.dtype == "bfloat16":
            words = _buffer_view(self.data, np.dtype("<u2"), self.shape)
            return (words.astype("<u4") << 16).view("<f4")
        raise ProtocolError(f"unsupported torch dtype {self.dtype!r} in tensor triple")

    def tolist(self) -> Any:
        """The elements as nested Python lists (bfloat16 widened); ProtocolError if garbled."""
        spelled = _TORCH_TO_NUMPY.get(self.dtype)
        if spelled is None:
            return self.numpy().tolist()
        return _to_list(self.data, spelled, self.shape)

    @property
    def nbytes(self) -> int:
        """Size of the raw element buffer in bytes."""
        return _nbytes(self.data)


def to_bfloat16_words(values: np.ndarray) -> np.ndarray:
    """``values`` rounded to bfloat16 like torch's ``.to(torch.bfloat16)``, as raw uint16 words.

    Round to nearest, ties to even; every NaN becomes 0x7FC0 (as on torch's scalar path; its
    vectorized path writes 0xFFFF, also a NaN). Wrap the result with
    ``Tensor.from_numpy(words, dtype="bfloat16")`` (e.g. prompt embeddings for a bf16 model).
    """
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    # Adding 0x7FFF plus the lowest kept bit rounds to nearest-even in the upper 16 bits. No
    # finite or infinite value overflows uint32 here; NaNs (which could) are replaced below.
    words = ((bits + (np.uint32(0x7FFF) + ((bits >> 16) & 1))) >> 16).astype(np.uint16)
    nan = (bits & 0x7FFFFFFF) > 0x7F800000
    if nan.any():
        words[nan] = 0x7FC0
    return words


def _torch_itemsize(name: str) -> int:
    spelled = _TORCH_TO_NUMPY.get(name)
    if spelled is not None:
        return np.dtype(spelled).itemsize
    size = _TORCH_ONLY_ITEMSIZE.get(name)
    if size is None:
        raise ValueError(f"unknown torch dtype {name!r}")
    return size


def _nbytes(data: object) -> int:
    if _is_ndarray(data):
        return int(data.nbytes)
    if isinstance(data, _Ext):
        data = data.data
    try:
        return memoryview(data).nbytes  # type: ignore[arg-type]
    except TypeError:
        return 0

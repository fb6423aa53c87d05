"""Precomputed embeddings (``image_embeds``, ``audio_embeds``, ``video_embeds``) as vLLM 0.32
reads them, without torch: a base64 ``.npy`` file (images and videos), or a dense tensor saved
by ``torch.save`` read by a restricted unpickler that knows only a tensor's parts (no code runs,
as with torch's ``weights_only=True``). Sparse tensors are not read here."""

from __future__ import annotations

import io
import pickle
import zipfile
from typing import TYPE_CHECKING, Any

import msgspec

from .dataurl import b64decode
from .errors import MediaError

if TYPE_CHECKING:
    import numpy as np

NUMPY_MAGIC = b"\x93NUMPY"
"""How a ``.npy`` file starts (anything else is read as a ``torch.save`` file, as vLLM does)."""

# torch storage class -> (torch dtype name, numpy dtype of its raw values)
_STORAGES: dict[str, tuple[str, str]] = {
    "DoubleStorage": ("float64", "<f8"),
    "FloatStorage": ("float32", "<f4"),
    "HalfStorage": ("float16", "<f2"),
    "BFloat16Storage": ("bfloat16", "<u2"),
    "LongStorage": ("int64", "<i8"),
    "IntStorage": ("int32", "<i4"),
    "ShortStorage": ("int16", "<i2"),
    "CharStorage": ("int8", "i1"),
    "ByteStorage": ("uint8", "u1"),
    "BoolStorage": ("bool", "?"),
}


class Embeds(msgspec.Struct, frozen=True):
    """A tensor of embeddings: its values (``bfloat16`` ones as their raw 16-bit patterns in a
    ``uint16`` array, numpy having no bfloat16) and its torch dtype name."""

    array: np.ndarray
    dtype: str


class _Storage(msgspec.Struct, frozen=True):
    name: str


class _Tensor(msgspec.Struct, frozen=True):
    storage: Any
    offset: int
    size: tuple[int, ...]
    stride: tuple[int, ...]


def _rebuild_tensor(
    storage: Any, offset: int, size: tuple[int, ...], stride: tuple[int, ...], *_: Any
) -> _Tensor:
    return _Tensor(storage, offset, tuple(size), tuple(stride))


def _ordered_dict(*args: Any) -> dict[Any, Any]:
    return dict(*args)


class _TensorUnpickler(pickle.Unpickler):
    """Knows a tensor's rebuild function, its storage classes and OrderedDict; nothing else."""

    def __init__(self, data: bytes, archive: zipfile.ZipFile, prefix: str) -> None:
        super().__init__(io.BytesIO(data))
        self.archive = archive
        self.prefix = prefix

    def find_class(self, module: str, name: str) -> Any:
        """Stand-ins for the few globals a saved tensor names; UnpicklingError otherwise."""
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild_tensor
        if (module, name) == ("collections", "OrderedDict"):
            return _ordered_dict
        if module == "torch" and name in _STORAGES:
            return _Storage(name)
        raise pickle.UnpicklingError(f"unsupported global in a tensor file: {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        """A storage record: (storage class name, its values read from the archive)."""
        import numpy as np

        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise pickle.UnpicklingError("unsupported persistent id in a tensor file")
        _, storage, key, _location, numel = pid
        if not isinstance(storage, _Storage):
            raise pickle.UnpicklingError("unsupported storage in a tensor file")
        raw = self.archive.read(f"{self.prefix}/data/{key}")
        values = np.frombuffer(raw, dtype=_STORAGES[storage.name][1], count=int(numel))
        return (storage.name, values)


def _from_torch_file(data: bytes, parameter: str, max_bytes: int) -> Embeds:
    import numpy as np

    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        pickles = [n for n in archive.namelist() if n.endswith("/data.pkl")]
        if len(pickles) != 1:
            raise pickle.UnpicklingError("not a torch.save file")
        prefix = pickles[0][: -len("/data.pkl")]
        order = (
            archive.read(f"{prefix}/byteorder")
            if f"{prefix}/byteorder" in archive.namelist()
            else b"little"
        )
        if order != b"little":
            raise pickle.UnpicklingError("big-endian tensor files are not supported")
        tensor = _TensorUnpickler(archive.read(pickles[0]), archive, prefix).load()
    if not isinstance(tensor, _Tensor):
        raise MediaError.invalid(
            f"`{parameter}` payload did not deserialize to a torch.Tensor.", parameter=parameter
        )
    storage_name, values = tensor.storage
    dtype = _STORAGES[storage_name][0]
    numel = int(np.prod(tensor.size, dtype=np.int64))
    dense_bytes = numel * values.itemsize
    if max_bytes > 0 and dense_bytes > max_bytes:
        raise MediaError.invalid(
            f"`{parameter}` declares shape {tensor.size}, which would allocate {dense_bytes} "
            f"bytes ({dense_bytes / (1024 * 1024):.0f} MiB) once densified, exceeding the "
            f"{max_bytes} byte limit. Set VLLM_MAX_EMBED_DECODE_BYTES to increase this limit.",
            parameter=parameter,
            value=dense_bytes,
        )
    if numel and (
        tensor.offset < 0
        or any(s < 0 for s in tensor.stride)
        or tensor.offset + sum((n - 1) * s for n, s in zip(tensor.size, tensor.stride, strict=True))
        >= values.size
    ):
        raise MediaError.bad_request("tensor view out of its storage's bounds")
    item = values.itemsize
    array = np.lib.stride_tricks.as_strided(
        values[tensor.offset :] if numel else values[:0],
        shape=tensor.size,
        strides=tuple(s * item for s in tensor.stride),
        writeable=False,
    )
    return Embeds(array, dtype)


def decode_embeds(payload: str, parameter: str, max_bytes: int) -> Embeds:
    """A base64 ``.npy`` file or ``torch.save`` tensor (blocking; on a worker thread).
    ``parameter`` names the field in errors (``image_embeds``...)."""
    import numpy as np

    data = b64decode(payload)
    try:
        # vLLM reads audio embeddings with torch.load alone (an .npy payload fails there)
        if data[:6] == NUMPY_MAGIC and parameter != "audio_embeds":
            array = np.load(io.BytesIO(data))  # allow_pickle stays False
            return Embeds(array, array.dtype.name)
        return _from_torch_file(data, parameter, max_bytes)
    except MediaError:
        raise
    except Exception as exc:
        MediaError.raise_from(exc)

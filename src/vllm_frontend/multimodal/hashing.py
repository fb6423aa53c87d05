"""Multimodal item hashes, the engine's processor- and encoder-cache keys, as vLLM 0.32 computes
them (``vllm/multimodal/hasher.py``, ``processing/inputs.py`` ``get_mm_hashes``).

The digest (blake3 by default) is fed a uniquely decodable stream: every byte chunk goes with its
8-byte little-endian length in front, and every container with a one-byte kind tag (none,
sequence, mapping, leaf) and its length. The top-level keyword arguments are taken in sorted
order, each as its framed name followed by its value. An image loaded from bytes is hashed by
those bytes (with the mode-conversion settings when the image was converted), so equal files
give equal keys whatever their pixels decode to; an image carrying an EXIF ``ImageID`` UUID is
hashed by that UUID.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

__all__ = [
    "HashAlgorithm",
    "hash_kwargs",
    "image_hash_value",
    "image_id",
    "item_hash",
    "video_hash_value",
]

HashAlgorithm = str
"""``"blake3"`` (vLLM's default), ``"sha256"`` or ``"sha512"`` (``--mm-hasher-algorithm``)."""

_TAG_NONE = b"\x00"
_TAG_SEQUENCE = b"\x01"
_TAG_MAPPING = b"\x02"
_TAG_LEAF = b"\x03"


class Framed:
    """A leaf hashed as a nested ``key``/``value`` pair (vLLM's ``iter_item_to_bytes``): how an
    image or tensor item serializes itself inside the digest stream."""

    __slots__ = ("key", "value")

    def __init__(self, key: str, value: Any) -> None:
        self.key = key
        self.value = value


def _length(n: int) -> bytes:
    return n.to_bytes(8, "little")


def _chunk(data: bytes | memoryview) -> Iterator[bytes | memoryview]:
    yield _length(data.nbytes if isinstance(data, memoryview) else len(data))
    yield data


def _leaf(obj: Any) -> Iterator[bytes | memoryview]:
    if isinstance(obj, bytes | memoryview):
        yield from _chunk(obj)
    elif isinstance(obj, str):
        yield from _chunk(obj.encode("utf-8"))
    elif isinstance(obj, bool | int | float):
        yield from _chunk(np.array(obj).tobytes())
    elif isinstance(obj, Framed):
        yield from _pair(obj.key, obj.value)
    elif isinstance(obj, np.ndarray):
        if obj.ndim == 0:
            data: Any = obj.item()
        elif obj.flags.c_contiguous:
            data = obj.view(np.uint8).data
        else:
            data = obj.tobytes()
        yield from _pair("ndarray", {"dtype": obj.dtype.str, "shape": obj.shape, "data": data})
    else:
        raise TypeError(f"cannot hash a {type(obj).__name__}")


def _value(obj: Any) -> Iterator[bytes | memoryview]:
    if obj is None:
        yield _TAG_NONE
    elif isinstance(obj, list | tuple):
        yield _TAG_SEQUENCE
        yield _length(len(obj))
        for elem in obj:
            yield from _value(elem)
    elif isinstance(obj, dict):
        yield _TAG_MAPPING
        yield _length(len(obj))
        for k, v in obj.items():
            yield from _chunk(str(k).encode("utf-8"))
            yield from _value(v)
    else:
        yield _TAG_LEAF
        yield from _leaf(obj)


def _pair(key: str, value: Any) -> Iterator[bytes | memoryview]:
    yield from _chunk(key.encode("utf-8"))
    yield from _value(value)


def _hasher(algorithm: HashAlgorithm) -> Callable[[], Any]:
    if algorithm == "blake3":
        from blake3 import blake3

        return blake3
    if algorithm == "sha256":
        return hashlib.sha256
    if algorithm == "sha512":
        return hashlib.sha512
    raise ValueError(f"Unsupported hash algorithm: {algorithm}")


def hash_kwargs(algorithm: HashAlgorithm, /, **kwargs: Any) -> str:
    """vLLM's ``MultiModalHasher.hash_kwargs``: the hex digest of the keyword arguments."""
    hasher = _hasher(algorithm)()
    for key, value in sorted(kwargs.items(), key=lambda kv: kv[0]):
        for chunk in _pair(key, value):
            hasher.update(chunk)
    return str(hasher.hexdigest())


_EXIF_IMAGE_ID = 0xA420


def image_id(image: Any) -> bytes | None:
    """The EXIF ``ImageID`` UUID's bytes of a ``PIL.Image.Image``, when it carries one (vLLM
    then hashes the image by it)."""
    import uuid

    try:
        value = image.getexif().get(_EXIF_IMAGE_ID)
    except Exception:  # malformed EXIF: hashed by its bytes, as vLLM does
        return None
    return value.bytes if isinstance(value, uuid.UUID) else None


def image_hash_value(
    original: bytes, io_config: Mapping[str, Any] | None, image_id: bytes | None
) -> Any:
    """What an image loaded from ``original`` bytes contributes to its hash: the EXIF ImageID
    UUID's bytes if it has one, else the bytes, with ``io_config`` (mode conversion settings)
    when loading converted the image."""
    if image_id is not None:
        return image_id
    if io_config:
        return Framed("image", {"io_config": dict(io_config), "data": original})
    return Framed("image", original)


def video_hash_value(
    original: bytes, frames: np.ndarray, metadata: Mapping[str, Any] | None
) -> Any:
    """What a video loaded from ``original`` bytes contributes to its hash: its decoded frames
    when they take fewer bytes than the file, else the file's bytes, paired with the loader's
    metadata (sampled frame indices, fps...) when it has some (vLLM's
    ``VideoProcessorItems.get_item_for_hash``)."""
    media = Framed("video", frames if frames.nbytes < len(original) else original)
    if metadata is None:
        return media
    return (media, dict(metadata))


def item_hash(
    algorithm: HashAlgorithm,
    *,
    model_id: str,
    modality: str,
    value: Any,
    uuid: str | None,
    media_io_kwargs: Mapping[str, Any] | None,
    mm_processor_kwargs: Mapping[str, Any] | None,
) -> str:
    """One item's ``mm_hash`` (vLLM's ``ProcessorInputs.get_mm_hashes``).

    ``value`` is what the item hashes as (:func:`image_hash_value`); ``uuid`` is the request
    part's ``uuid``, which is the hash itself when no media-io or processor options apply and
    otherwise stands in for ``value``. ``media_io_kwargs`` are this modality's options and
    ``mm_processor_kwargs`` the processor options that apply to it.
    """
    factors: dict[str, Any] = {}
    if media_io_kwargs:
        factors["media_io_kwargs"] = {modality: dict(media_io_kwargs)}
    if mm_processor_kwargs:
        factors["mm_processor_kwargs"] = dict(mm_processor_kwargs)
    if uuid is not None and not factors:
        return uuid
    item = uuid if uuid is not None else value
    return hash_kwargs(algorithm, model_id=model_id, **{modality: item}, **factors)

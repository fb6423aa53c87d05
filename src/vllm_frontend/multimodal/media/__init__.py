"""Fetching and decoding the media requests name (images, audio, video), as vLLM 0.32 does:
``data:``, ``http(s)://`` and ``file://`` URLs under a :class:`MediaPolicy`, decoded off the
event loop by a :class:`MediaLoader`; every failure is a :class:`MediaError` carrying vLLM's
status and message.

The names below are imported on first use: the server imports ``errors`` and ``policy`` at
startup, and the loader's modules (aiohttp, Pillow, OpenCV... are imported later still) are not
loaded until something loads media."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .embeds import Embeds
    from .errors import MediaError
    from .image import ImageItem
    from .kwargs import merge_media_io_kwargs
    from .loader import MediaLoader, input_audio_url
    from .policy import MediaPolicy
    from .video import VideoItem

_HOMES = {
    "Embeds": "embeds",
    "ImageItem": "image",
    "MediaError": "errors",
    "MediaLoader": "loader",
    "MediaPolicy": "policy",
    "VideoItem": "video",
    "input_audio_url": "loader",
    "merge_media_io_kwargs": "kwargs",
}

__all__ = [
    "Embeds",
    "ImageItem",
    "MediaError",
    "MediaLoader",
    "MediaPolicy",
    "VideoItem",
    "input_audio_url",
    "merge_media_io_kwargs",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value

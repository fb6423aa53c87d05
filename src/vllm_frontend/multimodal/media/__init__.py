"""Fetching and decoding the media requests name (images, audio, video), as vLLM 0.32 does:
``data:``, ``http(s)://`` and ``file://`` URLs under a :class:`MediaPolicy`, decoded off the
event loop by a :class:`MediaLoader`; every failure is a :class:`MediaError` carrying vLLM's
status and message."""

from .embeds import Embeds
from .errors import MediaError
from .image import ImageItem
from .kwargs import merge_media_io_kwargs
from .loader import MediaLoader, input_audio_url
from .policy import MediaPolicy
from .video import VideoItem

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

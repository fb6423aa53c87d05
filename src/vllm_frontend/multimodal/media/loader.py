"""``MediaLoader``: an image, audio clip or video named by a request (``data:``, ``http(s)://``
or ``file://`` URL) fetched and decoded as vLLM 0.32's ``MediaConnector`` does, with the bytes
fetched on the event loop and the decoding on worker threads, so that running streams go on."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from . import dataurl, local
from .audio import AudioOptions, check_base64_size, decode_audio
from .embeds import Embeds, decode_embeds
from .errors import MediaError
from .http import HttpFetcher, check_domain
from .image import ImageItem, ImageOptions, decode_image
from .policy import MediaPolicy
from .video import VideoItem, VideoOptions, decode_jpeg_sequence, decode_video

if TYPE_CHECKING:
    import numpy as np
    from PIL import Image

_T = TypeVar("_T")

MediaIOKwargs = Mapping[str, Mapping[str, Any]]
"""``media_io_kwargs`` keyed by modality (``{"image": {...}, "video": {...}}``)."""


class MediaLoader:
    """Loads media under one :class:`MediaPolicy` (one per server process)."""

    def __init__(self, policy: MediaPolicy) -> None:
        self.policy = policy
        self._root = policy.local_root()
        self._http = HttpFetcher(policy)
        self._pool: ThreadPoolExecutor | None = None

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                max_workers=max(self.policy.loading_threads, 1), thread_name_prefix="media"
            )
        return self._pool

    async def aclose(self) -> None:
        """Close the HTTP session and stop the decoding threads."""
        await self._http.aclose()
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None

    async def _off_loop(self, fn: Callable[..., _T], *args: Any) -> _T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor(), fn, *args)

    def _kwargs(self, media_io_kwargs: MediaIOKwargs | None, modality: str) -> Mapping[str, Any]:
        chosen = media_io_kwargs if media_io_kwargs is not None else self.policy.media_io_kwargs
        return chosen.get(modality) or {}

    async def _load(
        self,
        url: str,
        decode: Callable[[bytes], _T],
        *,
        timeout: float,
        max_bytes: int | None = None,
        decode_data: Callable[[str, str], _T | None] | None = None,
        decode_file: Callable[[Path], _T] | None = None,
    ) -> _T:
        """Fetch ``url``'s bytes and decode them off the loop (vLLM's ``load_from_url``);
        ``decode_data(media_type, payload)`` may decode a ``data:`` URL's payload itself
        (None: it does not)."""
        if dataurl.is_data_url(url):

            def from_data_url() -> _T:
                media_type, payload = dataurl.split_data_url(url)
                if decode_data is not None:
                    decoded = decode_data(media_type, payload)
                    if decoded is not None:
                        return decoded
                return decode(dataurl.b64decode(payload))

            return await self._off_loop(from_data_url)
        from urllib3.util import parse_url

        try:
            spec = parse_url(url)
        except ValueError as exc:
            MediaError.raise_from(exc)
        if spec.scheme and spec.scheme.startswith("http"):
            check_domain(self.policy, spec.hostname)
            if spec.scheme not in ("http", "https"):
                # vLLM's HTTPConnection refuses it; its fetch wrapper words it so.
                raise MediaError.unprocessable(
                    "Failed to fetch media from URL: Invalid URL", parameter="image_url", value=url
                )
            data = await self._http.fetch(spec.url, timeout=timeout, max_bytes=max_bytes, named=url)
            return await self._off_loop(decode, data)
        if spec.scheme == "file":
            netloc, path, root = spec.netloc or "", spec.path or "", self._root
            if decode_file is not None:
                return await self._off_loop(
                    lambda: decode_file(local.local_path(netloc, path, root))
                )
            return await self._off_loop(lambda: decode(local.read_local(netloc, path, root)))
        raise MediaError.bad_request("The URL must be either a HTTP, data or file URL.")

    async def load_image_item(
        self, url: str, media_io_kwargs: MediaIOKwargs | None = None
    ) -> ImageItem:
        """The image at ``url`` with the bytes and settings vLLM hashes it by."""
        try:
            options = ImageOptions.from_kwargs(self._kwargs(media_io_kwargs, "image"))
            max_pixels = self.policy.max_image_pixels
            return await self._load(
                url,
                lambda data: decode_image(data, options, max_pixels),
                timeout=self.policy.image_fetch_timeout,
            )
        except Exception as exc:
            MediaError.raise_from(exc)

    async def load_image(
        self, url: str, media_io_kwargs: MediaIOKwargs | None = None
    ) -> Image.Image:
        """The image at ``url``, decoded and converted as vLLM converts it (RGB by default;
        ``media_io_kwargs["image"]`` may set ``image_mode`` and ``rgba_background_color``).
        ``media_io_kwargs`` is the request's, already merged over ``--media-io-kwargs`` by
        :func:`merge_media_io_kwargs` (None: the server's). MediaError for anything that cannot
        be loaded."""
        return (await self.load_image_item(url, media_io_kwargs)).image

    async def load_video_item(
        self,
        url: str,
        media_io_kwargs: MediaIOKwargs | None = None,
        *,
        video_processor: str | None = None,
    ) -> VideoItem:
        """The video at ``url`` with the bytes vLLM hashes it by."""
        try:
            kwargs = media_io_kwargs if media_io_kwargs is not None else self.policy.media_io_kwargs
            options = VideoOptions.from_kwargs(
                kwargs.get("video"),
                ImageOptions.from_kwargs(kwargs.get("image")),
                self.policy.video_loader_backend,
                video_processor,
            )
            max_pixels = self.policy.max_image_pixels

            def jpeg_frames(media_type: str, payload: str) -> VideoItem | None:
                if media_type.lower() != "video/jpeg":
                    return None
                return decode_jpeg_sequence(payload, options, max_pixels)

            return await self._load(
                url,
                lambda data: decode_video(data, options, max_pixels),
                timeout=self.policy.video_fetch_timeout,
                decode_data=jpeg_frames,
            )
        except Exception as exc:
            MediaError.raise_from(exc)

    async def load_video(
        self,
        url: str,
        media_io_kwargs: MediaIOKwargs | None = None,
        *,
        video_processor: str | None = None,
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """The sampled frames (``uint8 [T, H, W, 3]``, RGB) and metadata of the video at ``url``,
        as vLLM's video loader gives them: ``media_io_kwargs["video"]`` may set ``num_frames``
        (default 32), ``fps``, ``video_backend`` (a loader), ``frame_recovery``; the model's
        ``video_processor`` class name picks its loader as vLLM does (Qwen2-VL, Qwen3-VL)."""
        item = await self.load_video_item(url, media_io_kwargs, video_processor=video_processor)
        return item.frames, item.metadata

    async def load_audio(
        self, url: str, media_io_kwargs: MediaIOKwargs | None = None
    ) -> tuple[np.ndarray, float]:
        """The samples (float32, channels averaged to mono) and sample rate (the file's own:
        vLLM resamples later, in the processor) of the audio at ``url``. An ``input_audio``
        part is the URL ``data:audio/<format>;base64,<data>`` (see :func:`input_audio_url`).
        ``media_io_kwargs["audio"]["audio_backend"]`` may pick ``soundfile`` or ``pyav``."""
        try:
            kwargs = media_io_kwargs if media_io_kwargs is not None else self.policy.media_io_kwargs
            options = AudioOptions.from_kwargs(
                kwargs.get("audio"),
                max_clip_mb=self.policy.max_audio_clip_mb,
                max_duration_s=self.policy.max_audio_decode_duration_s,
                max_decode_bytes=self.policy.max_audio_decode_bytes,
            )

            def from_base64(_media_type: str, payload: str) -> tuple[np.ndarray, float]:
                check_base64_size(payload, options)
                return decode_audio(dataurl.b64decode(payload), options)

            return await self._load(
                url,
                lambda data: decode_audio(data, options),
                timeout=self.policy.audio_fetch_timeout,
                max_bytes=options.max_bytes,
                decode_data=from_base64,
                decode_file=lambda path: decode_audio(path, options),
            )
        except Exception as exc:
            MediaError.raise_from(exc)

    async def load_embeds(self, data: str, modality: str = "image") -> Embeds:
        """A base64 embeddings payload (``.npy`` or ``torch.save``) of ``modality`` (image,
        audio, video), decoded off the loop as vLLM's ``fetch_*_embedding_async``."""
        try:
            limit = self.policy.max_embed_decode_bytes
            return await self._off_loop(decode_embeds, data, f"{modality}_embeds", limit)
        except Exception as exc:
            MediaError.raise_from(exc)

    async def load_image_embeds(self, data: str | Mapping[str, Any]) -> Embeds | dict[str, Any]:
        """``image_embeds`` as vLLM accepts it: a base64 payload, or a mapping whose string
        values are base64 payloads (decoded concurrently) and whose other values pass as they
        are (numbers, lists)."""
        if isinstance(data, str):
            return await self.load_embeds(data, "image")
        keys = [key for key, value in data.items() if isinstance(value, str)]
        tensors = await asyncio.gather(*(self.load_embeds(data[key], "image") for key in keys))
        return {**data, **dict(zip(keys, tensors, strict=True))}


def input_audio_url(data: str, audio_format: str) -> str:
    """The URL vLLM makes of an ``input_audio`` content part (``{"data", "format"}``)."""
    return f"data:audio/{audio_format};base64,{data}"

"""What the server lets media loading do: local paths, domains, private addresses, timeouts and
size limits. Built once at startup (``MediaPolicy.from_env`` reads vLLM 0.32's environment
variables the way vLLM reads them) and carried by the server to whoever loads media."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

MIB = 1024 * 1024
"""Bytes in a MiB (vLLM's ``_MB`` limits are MiB)."""


def _env_int(environ: Mapping[str, str], name: str, default: str) -> int:
    # vLLM's envs.py: int(os.getenv(name, default)); a bad value stops startup.
    try:
        return int(environ.get(name, default))
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {environ.get(name)!r}") from None


def _env_float(environ: Mapping[str, str], name: str, default: str) -> float:
    try:
        return float(environ.get(name, default))
    except ValueError:
        raise ValueError(f"{name} must be a number, got {environ.get(name)!r}") from None


class MediaPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """Limits and permissions for loading media (images, audio, video) named by requests
    (immutable; a ``msgspec.Struct`` rather than a dataclass, which costs ~1 ms at startup)."""

    allowed_local_media_path: str = ""
    """``--allowed-local-media-path``: ``file://`` URLs are served only from under this
    directory (resolved, symlinks included); empty refuses every ``file://`` URL."""
    allowed_media_domains: tuple[str, ...] = ()
    """``--allowed-media-domains``: when non-empty, http(s) URLs must name one of these hosts
    (checked on every redirect too)."""
    allow_private_addresses: bool = False
    """``--allow-private-media-addresses`` (ours): http(s) fetches may connect to loopback,
    private, link-local and other non-global addresses; refused by default."""
    image_fetch_timeout: float = 5.0
    """``VLLM_IMAGE_FETCH_TIMEOUT`` seconds for the first attempt (x4 per retry, as vLLM)."""
    video_fetch_timeout: float = 30.0
    """``VLLM_VIDEO_FETCH_TIMEOUT``."""
    audio_fetch_timeout: float = 10.0
    """``VLLM_AUDIO_FETCH_TIMEOUT``."""
    fetch_max_retries: int = 3
    """``VLLM_MEDIA_FETCH_MAX_RETRIES``: attempts for transient failures (at least 1)."""
    allow_redirects: bool = True
    """``VLLM_MEDIA_URL_ALLOW_REDIRECTS``."""
    max_download_mb: int = 256
    """``VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB``: no response body is read past this (0: no limit)."""
    max_audio_clip_mb: int = 25
    """``VLLM_MAX_AUDIO_CLIP_FILESIZE_MB``: the largest encoded audio clip."""
    max_audio_decode_duration_s: int = 600
    """``VLLM_MAX_AUDIO_DECODE_DURATION_S``."""
    max_audio_decode_bytes: int = 268435456
    """``VLLM_MAX_AUDIO_DECODE_BYTES``."""
    max_embed_decode_bytes: int = 2147483648
    """``VLLM_MAX_EMBED_DECODE_BYTES``: the largest tensor a ``torch.save`` embeds payload may
    declare (0 or less: no limit)."""
    max_image_pixels: int = 178_956_970
    """``VLLM_MAX_IMAGE_PIXELS`` (0 or less: no limit of ours; Pillow's own still applies)."""
    loading_threads: int = 8
    """``VLLM_MEDIA_LOADING_THREAD_COUNT``: threads that decode media off the event loop."""
    video_loader_backend: str = "opencv"
    """``VLLM_VIDEO_LOADER_BACKEND``."""
    media_io_kwargs: Mapping[str, Mapping[str, Any]] = msgspec.field(default_factory=dict)
    """``--media-io-kwargs``: per-modality defaults, merged with a request's own."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **flags: Any) -> MediaPolicy:
        """The policy from vLLM's environment variables (parsed as vLLM 0.32 parses them) and
        the given flag values (field names)."""
        env = os.environ if environ is None else environ
        policy = cls(
            image_fetch_timeout=_env_int(env, "VLLM_IMAGE_FETCH_TIMEOUT", "5"),
            video_fetch_timeout=_env_int(env, "VLLM_VIDEO_FETCH_TIMEOUT", "30"),
            audio_fetch_timeout=_env_int(env, "VLLM_AUDIO_FETCH_TIMEOUT", "10"),
            fetch_max_retries=_env_int(env, "VLLM_MEDIA_FETCH_MAX_RETRIES", "3"),
            allow_redirects=bool(_env_int(env, "VLLM_MEDIA_URL_ALLOW_REDIRECTS", "1")),
            max_download_mb=_env_int(env, "VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB", "256"),
            max_audio_clip_mb=_env_int(env, "VLLM_MAX_AUDIO_CLIP_FILESIZE_MB", "25"),
            max_audio_decode_duration_s=_env_int(env, "VLLM_MAX_AUDIO_DECODE_DURATION_S", "600"),
            max_audio_decode_bytes=_env_int(env, "VLLM_MAX_AUDIO_DECODE_BYTES", "268435456"),
            max_embed_decode_bytes=_env_int(env, "VLLM_MAX_EMBED_DECODE_BYTES", "2147483648"),
            max_image_pixels=_env_int(env, "VLLM_MAX_IMAGE_PIXELS", "178956970"),
            loading_threads=_env_int(env, "VLLM_MEDIA_LOADING_THREAD_COUNT", "8"),
            video_loader_backend=env.get("VLLM_VIDEO_LOADER_BACKEND", "opencv"),
        )
        return msgspec.structs.replace(policy, **flags) if flags else policy

    def local_root(self) -> Path | None:
        """The resolved ``--allowed-local-media-path`` (None when unset); ``ValueError`` with
        vLLM's wording when it is not an existing directory."""
        if not self.allowed_local_media_path:
            return None
        root = Path(self.allowed_local_media_path).resolve()
        if not root.exists():
            raise ValueError(
                f"Invalid `--allowed-local-media-path`: The path {root} does not exist."
            )
        if not root.is_dir():
            raise ValueError(
                f"Invalid `--allowed-local-media-path`: The path {root} must be a directory."
            )
        return root

    @property
    def max_download_bytes(self) -> int | None:
        """``VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB`` in bytes, None when unlimited."""
        return self.max_download_mb * MIB if self.max_download_mb > 0 else None

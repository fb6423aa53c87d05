"""Merging a request's ``media_io_kwargs`` over the server's ``--media-io-kwargs``, per
modality, as vLLM 0.32 merges them (``merge_media_io_kwargs``): a shallow merge, except that
for video a request cannot pick decoder resources or a GPU codec the server did not set up,
and overriding one of ``fps``/``num_frames`` drops the other's default."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_GPU_VIDEO = frozenset({"pynvvideocodec", "deepstream"})
_STARTUP_ONLY = ("hw_decoders", "pool_size", "device")
_CODEC_OPTIONS: dict[str, frozenset[str]] = {
    "opencv": frozenset(),
    "torchcodec": frozenset({"num_ffmpeg_threads", "seek_mode", "device"}),
    "pynvvideocodec": frozenset({"hw_decoders"}),
    "deepstream": frozenset({"pool_size", "timeout_sec"}),
}


def _merge_video(defaults: Mapping[str, Any] | None, request: Mapping[str, Any] | None) -> dict:
    static = dict(defaults or {})
    if not request:
        return static
    runtime = {k: v for k, v in request.items() if k not in _STARTUP_ONLY}
    for key in ("video_backend", "backend"):
        asked = runtime.get(key)
        if asked and asked in _GPU_VIDEO and static.get(key) != asked:
            runtime.pop(key)
    merged = static | runtime
    if "num_frames" in runtime and "fps" not in runtime:
        merged.pop("fps", None)
    elif "fps" in runtime and "num_frames" not in runtime:
        merged.pop("num_frames", None)
    codec, static_codec = runtime.get("backend"), static.get("backend")
    if codec and codec != static_codec:
        dropped = _CODEC_OPTIONS.get(static_codec or "", frozenset()) - _CODEC_OPTIONS.get(
            codec, frozenset()
        )
        for name in dropped:
            merged.pop(name, None)
    return merged


def merge_media_io_kwargs(
    defaults: Mapping[str, Mapping[str, Any]] | None,
    request: Mapping[str, Mapping[str, Any]] | None,
) -> dict[str, dict[str, Any]] | None:
    """The effective per-modality kwargs (None when neither side has any)."""
    if not defaults and not request:
        return None
    merged: dict[str, dict[str, Any]] = {}
    for modality in set(defaults or {}) | set(request or {}):
        static = (defaults or {}).get(modality)
        runtime = (request or {}).get(modality)
        if modality == "video":
            merged[modality] = _merge_video(static, runtime)
        else:
            merged[modality] = dict(static or {}) | dict(runtime or {})
    return merged or None

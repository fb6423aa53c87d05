"""Video decoding as vLLM 0.32's video loaders decode it: OpenCV over the bytes in memory, the
frames to keep chosen by the loader's sampling rule (uniform for ``opencv``; the Qwen2-VL and
Qwen3-VL rules for those processors), read in one forward pass and converted to RGB; or a
``video/jpeg`` data URL of comma-separated base64 JPEG frames. The result is what vLLM hands
the processor: frames ``uint8 [T, H, W, 3]`` and Hugging Face-style metadata."""

from __future__ import annotations

import io
import itertools
import logging
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import msgspec

from .dataurl import b64decode
from .errors import MediaError
from .image import ImageOptions, decode_image

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)


class VideoItem(msgspec.Struct, frozen=True):
    """Decoded frames, their metadata, and the bytes vLLM hashes the video by (it hashes the
    frames instead when they are smaller than these bytes)."""

    frames: np.ndarray
    metadata: dict[str, Any]
    original_bytes: bytes


class Source(NamedTuple):
    """What the container says: frame count, frame rate, duration in seconds."""

    total_frames: int
    fps: float
    duration: float


class Target(NamedTuple):
    """What the request asks for (``num_frames``, ``fps``; -1: no limit)."""

    num_frames: int
    fps: float


def uniform_indices(source: Source, target: Target, **_: Any) -> list[int]:
    """vLLM's ``opencv`` loader: as many frames as ``num_frames`` and ``duration * fps`` allow
    (at least one), spread evenly from the first frame to the last."""
    import numpy as np

    total = source.total_frames
    count = total
    if target.num_frames > 0:
        count = min(target.num_frames, total)
    if target.fps > 0:
        count = min(count, math.floor(source.duration * target.fps))
    count = max(1, count)
    if count == total:
        return list(range(count))
    return np.linspace(0, total - 1, count, dtype=int).tolist()


def _float32_arange_int(total: int, step: float) -> list[int]:
    # torch.arange(0, total, step).int() on CPU (what vLLM and transformers compute): the
    # length and each value i * step in double, each value rounded to float32, then truncated.
    import numpy as np

    # torch's own refusals (a RuntimeError there, a 500 from vLLM): OpenCV reports a still
    # image's frame count as a huge negative number.
    if step == 0:
        raise ValueError("step must be nonzero")
    if (step > 0 and total < 0) or (step < 0 and total > 0):
        raise ValueError("upper bound and lower bound inconsistent with step sign")
    size = math.ceil(total / step)
    values = np.arange(size, dtype=np.float64) * step
    return values.astype(np.float32).astype(np.int32).tolist()


def qwen2_vl_indices(source: Source, target: Target, **kwargs: Any) -> list[int]:
    """vLLM's ``qwen2_vl`` loader (transformers' Qwen2VLVideoProcessor sampling): ``fps``
    frames per second of video, clamped to [min_frames, max_frames], a multiple of the
    temporal patch size; ``num_frames`` is ignored."""
    total, original_fps = source.total_frames, source.fps
    patch = kwargs.get("temporal_patch_size", 2)
    min_frames = kwargs.get("min_frames", 4)
    max_frames = min(kwargs.get("max_frames", 768), 768)
    if original_fps <= 0:
        raise ValueError(
            "Qwen2-VL video sampling needs a known source fps, but the container reported 0 "
            "(variable or unknown frame rate)."
        )
    max_frames = math.floor(min(max_frames, total) / patch) * patch
    n = total / original_fps * min(target.fps, 30)
    n = min(max(n, min_frames), max_frames, total)
    n = math.floor(n / patch) * patch
    return [min(i, total - 1) for i in _float32_arange_int(total, total / n)]


def qwen3_vl_source(source: Source) -> Source:
    """Qwen3-VL takes an unknown frame rate for 24 fps (kept in the metadata)."""
    return source if source.fps > 0 else Source(source.total_frames, 24.0, source.duration)


def qwen3_vl_indices(source: Source, target: Target, **kwargs: Any) -> list[int]:
    """vLLM's ``qwen3_vl`` loader (transformers' Qwen3VLVideoProcessor sampling)."""
    import numpy as np

    source = qwen3_vl_source(source)
    min_frames = kwargs.get("min_frames", 4)
    max_frames = min(kwargs.get("max_frames", 768), 768)
    n = int(source.total_frames / source.fps * min(target.fps, 30))
    n = min(max(n, min_frames), max_frames, source.total_frames)
    return np.linspace(0, source.total_frames - 1, n).round().astype(int).tolist()


class Loader(NamedTuple):
    """A vLLM video loader: its sampling rule, metadata hook and default ``fps``."""

    indices: Callable[..., list[int]]
    prepare: Callable[[Source], Source]
    default_fps: float


LOADERS: dict[str, Loader] = {
    "opencv": Loader(uniform_indices, lambda s: s, -1),
    "qwen2_vl": Loader(qwen2_vl_indices, lambda s: s, 2),
    "qwen3_vl": Loader(qwen3_vl_indices, qwen3_vl_source, 2),
}
"""The vLLM 0.32 video loaders implemented here, by ``VLLM_VIDEO_LOADER_BACKEND`` name."""

VLLM_LOADERS = frozenset(
    {
        "clef_omni", "embedding_gemma2", "glm46v", "glm5next", "glmga", "molmo2", "nemotron_vl",
        "opencv", "opencv_dynamic", "openpangu", "pynvvideocodec", "qwen2_vl", "qwen3_vl",
    }
)  # fmt: skip
"""Every loader name vLLM 0.32 registers (the others answer 501 here)."""

PROCESSOR_LOADERS: dict[str, str] = {
    "Qwen3VLVideoProcessor": "qwen3_vl",
    "Cosmos3EdgeVideoProcessor": "qwen3_vl",
    "EmbeddingGemma2VideoProcessor": "embedding_gemma2",
    "Qwen2VLVideoProcessor": "qwen2_vl",
    "Glm4vVideoProcessor": "opencv_dynamic",
    "Glm46VVideoProcessor": "glm46v",
    "Glm5NextVideoProcessor": "glm5next",
    "Glm5nextVideoProcessor": "glm5next",
    "GlmgaVideoProcessor": "glmga",
    "Molmo2VideoProcessor": "molmo2",
}
"""The loader vLLM picks for a model's Hugging Face video processor class."""

_CODEC_OPTIONS = {
    "num_ffmpeg_threads", "seek_mode", "device", "hw_decoders", "pool_size", "timeout_sec",
}  # fmt: skip
_CODECS = ("opencv", "torchcodec", "pynvvideocodec", "deepstream")


class VideoOptions(msgspec.Struct, frozen=True):
    """How a video is decoded: ``media_io_kwargs["video"]`` over vLLM's defaults."""

    loader: str
    num_frames: int
    fps: float
    frame_recovery: bool
    sampling: dict[str, Any]
    jpeg: dict[str, Any]
    image: ImageOptions
    codec_error: MediaError | None = None
    """Why the codec options cannot decode a video file (raised when one is decoded: a
    ``video/jpeg`` sequence does not use them)."""

    @classmethod
    def from_kwargs(
        cls,
        video: Mapping[str, Any] | None,
        image: ImageOptions,
        default_loader: str,
        video_processor: str | None = None,
    ) -> VideoOptions:
        """Options as vLLM's ``VideoMediaIO`` and loader read them; MediaError for a loader
        or codec this frontend does not implement (501) or vLLM does not know (500)."""
        kwargs = dict(video or {})
        if "video_backend" not in kwargs and video_processor in PROCESSOR_LOADERS:
            kwargs["video_backend"] = PROCESSOR_LOADERS[video_processor]
        num_frames = kwargs.pop("num_frames", 32)
        name = kwargs.pop("video_backend", None) or default_loader
        if name not in VLLM_LOADERS:
            raise MediaError(500, "InternalServerError", f"Extension class {name} not found")
        if name not in LOADERS:
            raise MediaError(
                501, "NotImplementedError", f"the {name!r} video loader is not implemented"
            )
        jpeg = dict(kwargs)
        fps = kwargs.pop("fps", LOADERS[name].default_fps)
        kwargs.pop("max_duration", None)
        frame_recovery = bool(kwargs.pop("frame_recovery", False))
        codec = kwargs.pop("backend", "opencv")
        codec_error = None
        misplaced = sorted(kwargs.keys() & _CODEC_OPTIONS)
        if codec not in _CODECS:
            valid = ", ".join(repr(c) for c in _CODECS)
            codec_error = MediaError.bad_request(
                f"Unknown video codec backend {codec!r}; valid options: {valid}."
            )
        elif codec != "opencv":
            codec_error = MediaError(
                501, "NotImplementedError", f"the {codec!r} video codec is not implemented"
            )
        elif misplaced:
            codec_error = MediaError.bad_request(
                f"{', '.join(misplaced)} is not supported by the 'opencv' backend"
            )
        return cls(name, num_frames, fps, frame_recovery, kwargs, jpeg, image, codec_error)


def _open(stream: io.BytesIO) -> Any:
    import cv2
    import cv2.videoio_registry as registry

    api = None
    for backend in registry.getStreamBufferedBackends():
        if not registry.hasBackend(backend):
            continue
        if not registry.isBackendBuiltIn(backend):
            _, abi, api_version = registry.getStreamBufferedBackendPluginVersion(backend)
            if abi < 1 or (abi == 1 and api_version < 2):
                continue
        api = backend
        break
    capture = cv2.VideoCapture(stream, api, [])  # type: ignore[call-overload]
    if not capture.isOpened():
        raise MediaError.bad_request("Could not open video stream")
    return capture


def _source(capture: Any) -> Source:
    import cv2

    total = int(capture.get(cv2.CAP_PROP_FRAME_COUNT))
    fps = capture.get(cv2.CAP_PROP_FPS)
    # An mp4 edit list can hide leading samples the frame count includes: a seek to the end
    # tells the presentable count (trusted only when the stream really ends there).
    if total > 0 and capture.set(cv2.CAP_PROP_POS_AVI_RATIO, 1.0):
        visible = int(capture.get(cv2.CAP_PROP_POS_FRAMES))
        at_end = not capture.grab()
        capture.set(cv2.CAP_PROP_POS_FRAMES, 0)
        if at_end and 0 < visible < total - 1:
            logger.warning("video header claims %d frames, %d are presentable", total, visible)
            total = visible
    return Source(total, fps, total / fps if fps > 0 else 0)


def _read(capture: Any, wanted: list[int]) -> tuple[np.ndarray, list[int]]:
    """The wanted frames in one forward pass; unreadable ones are skipped."""
    import cv2
    import numpy as np

    width = int(capture.get(cv2.CAP_PROP_FRAME_WIDTH))
    height = int(capture.get(cv2.CAP_PROP_FRAME_HEIGHT))
    targets = set(wanted)
    frames = np.empty((len(targets), height, width, 3), dtype=np.uint8)
    valid: list[int] = []
    for index in range(max(wanted) + 1):
        if not capture.grab():
            continue
        if index in targets:
            ok, frame = capture.retrieve()
            if ok:
                frames[len(valid)] = cv2.cvtColor(frame, cv2.COLOR_BGR2RGB)
                valid.append(index)
    return frames[: len(valid)], valid


def _read_recovering(capture: Any, wanted: list[int], total: int) -> tuple[np.ndarray, list[int]]:
    """The wanted frames, a frame that fails replaced by the next readable one before the next
    wanted frame (vLLM's ``frame_recovery``)."""
    import cv2
    import numpy as np

    width = int(capture.get(cv2.CAP_PROP_FRAME_WIDTH))
    height = int(capture.get(cv2.CAP_PROP_FRAME_HEIGHT))
    if not (width > 0 and height > 0):
        raise MediaError(
            500, "InternalServerError", f"Invalid video frame size: width={width}, height={height}"
        )
    targets = set(wanted)
    window_end = dict(itertools.pairwise(wanted))
    window_end[wanted[-1]] = total
    frames: list[np.ndarray] = []
    valid: list[int] = []
    failed: list[int] = []
    for index in range((wanted[-1] if wanted else 0) + 1):
        is_target = index in targets
        if not capture.grab():
            if is_target:
                failed.append(index)
            continue
        recovers = bool(failed) and index < window_end.get(failed[0], total)
        if is_target or recovers:
            ok, frame = capture.retrieve()
            if ok and frame is not None and frame.size > 0:
                frames.append(cv2.cvtColor(frame, cv2.COLOR_BGR2RGB))
                valid.append(index)
                if recovers:
                    failed.pop(0)
            elif is_target:
                failed.append(index)
    if frames:
        return np.stack(frames), valid
    return np.empty((0, height, width, 3), dtype=np.uint8), valid


def decode_video(data: bytes, options: VideoOptions, max_pixels: int) -> VideoItem:
    """Decode and sample a video file's bytes (blocking; on a worker thread)."""
    import cv2

    if options.codec_error is not None:
        raise options.codec_error
    # The stream must outlive the capture: releasing a capture whose stream was collected
    # crashes OpenCV 5.
    stream = io.BytesIO(data)
    try:
        capture = _open(stream)
        try:
            width = int(capture.get(cv2.CAP_PROP_FRAME_WIDTH))
            height = int(capture.get(cv2.CAP_PROP_FRAME_HEIGHT))
            if max_pixels > 0 and width * height > max_pixels:
                raise MediaError.bad_request(
                    f"Video frame dimensions {width}x{height} ({width * height} pixels) exceed "
                    f"the maximum of {max_pixels} pixels. Set VLLM_MAX_IMAGE_PIXELS to "
                    "increase this limit."
                )
            loader = LOADERS[options.loader]
            source = loader.prepare(_source(capture))
            wanted = loader.indices(
                source, Target(options.num_frames, options.fps), **options.sampling
            )
            if options.frame_recovery:
                frames, valid = _read_recovering(capture, wanted, source.total_frames)
            else:
                frames, valid = _read(capture, wanted)
        finally:
            capture.release()
    except MediaError:
        raise
    except Exception as exc:
        MediaError.raise_from(exc)
    if len(valid) < len(wanted):
        logger.warning("video loading: expected %d frames, got %d", len(wanted), len(valid))
    metadata = {
        "total_num_frames": source.total_frames,
        "fps": source.fps,
        "duration": source.duration,
        "video_backend": "opencv",
        "frames_indices": valid,
        "do_sample_frames": len(valid) == source.total_frames,
    }
    return VideoItem(frames, metadata, data)


def decode_jpeg_sequence(payload: str, options: VideoOptions, max_pixels: int) -> VideoItem:
    """A ``video/jpeg`` data URL's payload: base64 JPEG frames separated by commas, each decoded
    as an image (blocking; on a worker thread)."""
    import numpy as np

    try:
        if options.num_frames > 0:
            parts = payload.split(",", options.num_frames)[: options.num_frames]
        elif options.num_frames == 0:
            raise MediaError.bad_request("num_frames must be greater than 0 or -1")
        else:
            parts = payload.split(",")
        frames = np.stack(
            [np.asarray(decode_image(b64decode(p), options.image, max_pixels).image) for p in parts]
        )
        total = int(frames.shape[0])
        kwargs = options.jpeg
        fps = float(kwargs.get("fps", 1))
        indices = kwargs.get("frames_indices")
        if indices is not None:
            if not (isinstance(indices, list) and all(isinstance(i, int) for i in indices)):
                raise MediaError.bad_request("frames_indices must be a list of integers")
            if len(indices) != total:
                raise MediaError.bad_request(
                    f"frames_indices length ({len(indices)}) must match number of frames sent "
                    f"({total})"
                )
        else:
            indices = list(range(total))
        total_frames = kwargs.get("total_num_frames", total)
        if not isinstance(total_frames, int) or total_frames < 1:
            raise MediaError.bad_request("total_num_frames must be a positive integer")
        if total_frames < total:
            raise MediaError.bad_request(
                f"total_num_frames ({total_frames}) must be >= number of frames sent ({total})"
            )
        duration = kwargs.get("duration")
        if duration is not None:
            if not isinstance(duration, (int, float)) or duration < 0:
                raise MediaError.bad_request("duration must be a non-negative number")
        else:
            duration = total_frames / fps if fps > 0 else 0.0
    except MediaError:
        raise
    except Exception as exc:
        MediaError.raise_from(exc)
    metadata = {
        "total_num_frames": total_frames,
        "fps": fps,
        "duration": duration,
        "video_backend": "jpeg_sequence",
        "frames_indices": indices,
        "do_sample_frames": kwargs.get("do_sample_frames", False),
    }
    return VideoItem(frames, metadata, payload.encode())

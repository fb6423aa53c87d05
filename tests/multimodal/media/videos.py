"""Small test videos made with OpenCV: every frame's pixels encode its index."""

from __future__ import annotations

import pathlib
import tempfile

import cv2
import numpy as np


def frame(index: int, width: int, height: int) -> np.ndarray:
    """An RGB frame whose left half is ``index * 7 % 256`` (survives lossy coding)."""
    image = np.zeros((height, width, 3), np.uint8)
    image[:, : width // 2] = (index * 7) % 256
    image[:, width // 2 :, 1] = 255 - (index * 7) % 256
    return image


def make_video(
    frames: int = 30, fps: float = 10.0, size: tuple[int, int] = (64, 48), fourcc: str = "MJPG"
) -> bytes:
    """An encoded video of ``frames`` frames (``MJPG`` in AVI, or ``mp4v`` in MP4)."""
    suffix = ".avi" if fourcc == "MJPG" else ".mp4"
    with tempfile.TemporaryDirectory() as directory:
        path = pathlib.Path(directory) / f"video{suffix}"
        writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*fourcc), fps, size)
        assert writer.isOpened()
        for index in range(frames):
            writer.write(cv2.cvtColor(frame(index, *size), cv2.COLOR_RGB2BGR))
        writer.release()
        return path.read_bytes()


def index_of(decoded: np.ndarray) -> int:
    """The index a decoded frame carries (mod 256 / 7 steps)."""
    value = round(float(decoded[:, : decoded.shape[1] // 4].mean()))
    return next(i for i in range(37) if abs((i * 7) % 256 - value) <= 3)

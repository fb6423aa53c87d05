"""Encoded test images of many modes and formats, made with Pillow, for the media tests."""

from __future__ import annotations

import base64
import functools
import io

import numpy as np
from PIL import Image


def encode(image: Image.Image, fmt: str, **params: object) -> bytes:
    """``image`` encoded as ``fmt``."""
    buffer = io.BytesIO()
    image.save(buffer, fmt, **params)
    return buffer.getvalue()


def data_url(data: bytes, media_type: str = "image/png") -> str:
    """A base64 ``data:`` URL of ``data``."""
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def noise(mode: str, size: tuple[int, int], seed: int = 0) -> Image.Image:
    """A random image of ``mode`` (8 bits per channel modes, plus P with a random palette)."""
    rng = np.random.default_rng(seed)
    width, height = size
    if mode == "P":
        image = Image.fromarray(rng.integers(0, 256, (height, width), dtype=np.uint8), "L")
        image = image.convert("P")
        image.putpalette(rng.integers(0, 256, 768, dtype=np.uint8).tobytes())
        return image
    bands = len(Image.new(mode, (1, 1)).getbands())
    shape = (height, width) if bands == 1 else (height, width, bands)
    array = rng.integers(0, 256, shape, dtype=np.uint8)
    return Image.fromarray(array, mode if mode in ("L", "RGB", "RGBA", "LA", "CMYK") else None)


def corpus() -> dict[str, bytes]:
    """Named encoded images covering the mode conversions vLLM does."""
    rgba = noise("RGBA", (37, 23), 1)
    palette_with_transparency = noise("P", (20, 30), 2)
    palette_with_transparency.info["transparency"] = 7
    rotated = noise("RGB", (40, 16), 3)
    exif = rotated.getexif()
    exif[0x0112] = 6  # Orientation: rotate 90° clockwise to display
    cases = {
        "rgb.png": encode(noise("RGB", (33, 17)), "PNG"),
        "rgb.jpg": encode(noise("RGB", (64, 48), 4), "JPEG", quality=90),
        "rgba.png": encode(rgba, "PNG"),
        "la.png": encode(noise("LA", (19, 29), 5), "PNG"),
        "l.png": encode(noise("L", (25, 25), 6), "PNG"),
        "p.png": encode(noise("P", (21, 11), 7), "PNG"),
        "p_transparent.png": encode(palette_with_transparency, "PNG", transparency=7),
        "p_transparent.gif": encode(palette_with_transparency, "GIF", transparency=7),
        "cmyk.jpg": encode(noise("CMYK", (16, 16), 8), "JPEG"),
        "exif_rotated.jpg": encode(rotated, "JPEG", exif=exif.tobytes()),
        "rgba.webp": encode(rgba, "WEBP", lossless=True),
        "rgb.bmp": encode(noise("RGB", (9, 7), 9), "BMP"),
        "rgba.tiff": encode(rgba, "TIFF"),
        "one_bit.png": encode(noise("L", (30, 10), 10).convert("1"), "PNG"),
    }
    return cases


@functools.cache
def png_declaring(width: int, height: int) -> bytes:
    """A valid 1-bit greyscale PNG of ``width`` x ``height`` (zlib squeezes its zero rows to
    a few KB: how a decompression bomb arrives). Made once per size and process: squeezing the
    30000 x 30000 one's 112 MB of rows takes ~0.5 CPU-s, and test_media_errors_leave_no_cycles
    builds its every case's payload in each of its 13 tests."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    rows = b"\0" * (height * (1 + (width + 7) // 8))
    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows, 9))
        + chunk(b"IEND", b"")
    )


def animated(fmt: str, frames: int = 3, size: tuple[int, int] = (10, 8)) -> bytes:
    """An animated GIF or WebP of distinct random frames."""
    images = [noise("RGB", size, seed) for seed in range(frames)]
    buffer = io.BytesIO()
    extra: dict[str, object] = {"lossless": True} if fmt == "WEBP" else {}
    images[0].save(
        buffer, fmt, save_all=True, append_images=images[1:], duration=100, loop=0, **extra
    )
    return buffer.getvalue()


def unusual() -> dict[str, bytes]:
    """Images in modes, formats, orientations and shapes an untrusted client may send."""
    sixteen = Image.fromarray((np.arange(120).reshape(10, 12) * 500).astype(np.uint16))
    cases = {
        "I;16 png": encode(sixteen, "PNG"),
        "animated gif": animated("GIF"),
        "animated webp": animated("WEBP"),
        "ico": encode(noise("RGBA", (16, 16), 12), "ICO"),
        "1x1": encode(noise("RGB", (1, 1), 13), "PNG"),
        "1x4000": encode(noise("RGB", (1, 4000), 14), "PNG"),
        "4000x1": encode(noise("RGB", (4000, 1), 15), "PNG"),
        "la.tiff": encode(noise("LA", (9, 7), 16), "TIFF"),
        "avif": encode(noise("RGB", (16, 12), 17), "AVIF"),
        "jpeg2000": encode(noise("RGB", (16, 12), 18), "JPEG2000"),
        "rgba.avif": encode(noise("RGBA", (16, 12), 19), "AVIF"),
    }
    for orientation in range(1, 9):
        image = noise("RGB", (12, 7), 20 + orientation)
        exif = image.getexif()
        exif[0x0112] = orientation
        cases[f"exif orientation {orientation}"] = encode(image, "JPEG", exif=exif.tobytes())
    return cases

"""Images decoded as vLLM 0.32's ``ImageMediaIO`` decodes them, keeping what the item hash needs
(the encoded bytes and whether the mode was converted).

Decoding: Pillow with vLLM's format allowlist, the ``VLLM_MAX_IMAGE_PIXELS`` guard, EXIF
orientation applied, then conversion to RGB (transparent images composited on the background
colour). Only ``data:`` URLs are read here for now; the media fetcher takes over the others.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import io
import os
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from vllm_frontend.text.errors import BadInput

if TYPE_CHECKING:
    from PIL.Image import Image

__all__ = ["LoadedImage", "MediaError", "decode_image", "load_image_url"]

# vllm/multimodal/image.py ALLOWED_IMAGE_FORMATS: Pillow readers that decode in-process.
_ALLOWED_FORMATS = (
    "AVIF", "BLP", "BMP", "CUR", "DCX", "DDS", "DIB", "FITS", "FLI", "FTEX", "GBR", "GIF",
    "ICNS", "ICO", "IM", "IMT", "IPTC", "JPEG", "JPEG2000", "MCIDAS", "MSP", "PCD", "PCX",
    "PIXAR", "PNG", "PPM", "PSD", "QOI", "SGI", "SPIDER", "SUN", "TGA", "TIFF", "WEBP", "XBM",
    "XPM", "XVTHUMB",
)  # fmt: skip
_EXIF_IMAGE_ID = 0xA420


class MediaError(BadInput):
    """A media item that cannot be loaded (HTTP 400)."""


class LoadedImage(msgspec.Struct, gc=False):
    """A decoded image and what its hash is computed from."""

    image: Any
    """The ``PIL.Image.Image``, in the target mode."""
    original: bytes
    """The encoded bytes it was decoded from."""
    io_config: dict[str, Any] | None
    """The conversion settings when decoding changed the mode (they enter the hash)."""
    image_id: bytes | None
    """The EXIF ``ImageID`` UUID's bytes, when the image carries one (then the hash)."""


def _background(kwargs: Mapping[str, Any]) -> tuple[int, int, int]:
    value = kwargs.get("rgba_background_color", (255, 255, 255))
    if isinstance(value, list):
        value = tuple(value)
    if not (
        isinstance(value, tuple)
        and len(value) == 3
        and all(isinstance(c, int) and 0 <= c <= 255 for c in value)
    ):
        raise MediaError(
            "rgba_background_color must be a list or tuple of 3 integers in the range [0, 255]."
        )
    return value


def _to_mode(image: Image, mode: str, background: tuple[int, int, int]) -> Image:
    from PIL import Image as PILImage

    if image.mode == mode:
        return image
    transparent = image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info
    if mode == "RGB" and transparent:
        if image.mode != "RGBA":
            image = image.convert("RGBA")
        out = PILImage.new("RGB", image.size, background)
        out.paste(image, mask=image.split()[3])
        return out
    return image.convert(mode)


def _image_id(image: Image) -> bytes | None:
    try:
        value = image.getexif().get(_EXIF_IMAGE_ID)
    except Exception:
        return None
    return value.bytes if isinstance(value, uuid.UUID) else None


def decode_image(data: bytes, media_io_kwargs: Mapping[str, Any] | None = None) -> LoadedImage:
    """Decode image bytes as vLLM does (RGB); :class:`MediaError` when they are no image."""
    from PIL import Image as PILImage
    from PIL import ImageOps

    kwargs = media_io_kwargs or {}
    background = _background(kwargs)
    mode = kwargs.get("image_mode", "RGB")
    try:
        image: Image = PILImage.open(io.BytesIO(data), formats=_ALLOWED_FORMATS)
        width, height = image.size
        max_pixels = int(os.environ.get("VLLM_MAX_IMAGE_PIXELS", "0") or 0)
        if max_pixels > 0 and width * height > max_pixels:
            raise MediaError(
                f"Image dimensions {width}x{height} ({width * height} pixels) exceed the maximum "
                f"of {max_pixels} pixels. Set VLLM_MAX_IMAGE_PIXELS to increase this limit."
            )
        with contextlib.suppress(Exception):
            image = ImageOps.exif_transpose(image)
        image.load()
        converted = image if mode is None else _to_mode(image, mode, background)
    except (OSError, PILImage.UnidentifiedImageError) as e:
        raise MediaError(f"Failed to load image: {e}") from None
    io_config = None
    if converted is not image:
        io_config = {"image_mode": mode, "rgba_background_color": background}
    return LoadedImage(converted, data, io_config, _image_id(converted))


def load_image_url(url: str, media_io_kwargs: Mapping[str, Any] | None = None) -> LoadedImage:
    """Load an image from a ``data:`` URL."""
    if not url.startswith("data:"):
        raise MediaError(f"Only data: image URLs are supported by this frontend yet, got {url!r}")
    header, sep, payload = url[5:].partition(",")
    if not sep or not header.endswith(";base64"):
        raise MediaError("Only base64 data URLs are supported.")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise MediaError("Non-base64 digit found") from None  # pybase64's word, as vLLM
    return decode_image(data, media_io_kwargs)

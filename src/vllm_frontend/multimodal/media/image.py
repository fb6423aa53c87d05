"""Image decoding with Pillow, as vLLM 0.32's ``ImageMediaIO`` decodes: a format allowlist, a
pixel-count limit, EXIF orientation applied, and conversion to the requested mode (``RGB`` by
default, transparent pixels laid over a background colour). Runs on a worker thread: Pillow
decodes in C and releases the GIL."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from .errors import MediaError

if TYPE_CHECKING:
    from PIL import Image

# Pillow's still-image readers that decode in-process, the list vLLM 0.32 opens untrusted bytes
# with (vllm/multimodal/image.py); formats that call out to other programs (EPS), identify-only
# formats and stub drivers are not on it.
ALLOWED_IMAGE_FORMATS: tuple[str, ...] = (
    "AVIF", "BLP", "BMP", "CUR", "DCX", "DDS", "DIB", "FITS", "FLI", "FTEX", "GBR", "GIF",
    "ICNS", "ICO", "IM", "IMT", "IPTC", "JPEG", "JPEG2000", "MCIDAS", "MSP", "PCD", "PCX",
    "PIXAR", "PNG", "PPM", "PSD", "QOI", "SGI", "SPIDER", "SUN", "TGA", "TIFF", "WEBP", "XBM",
    "XPM", "XVTHUMB",
)  # fmt: skip
"""The image formats Pillow may open for a request (vLLM 0.32's allowlist)."""

_WHITE = (255, 255, 255)


class ImageOptions(msgspec.Struct, frozen=True):
    """How an image is decoded (``media_io_kwargs["image"]`` merged over the defaults)."""

    mode: str | None = "RGB"
    """Target mode; None keeps the decoded mode (alpha included)."""
    background: tuple[int, int, int] = _WHITE
    """``rgba_background_color``: what transparent pixels become in RGB."""

    @classmethod
    def from_kwargs(cls, kwargs: Mapping[str, Any] | None) -> ImageOptions:
        """Options from ``media_io_kwargs["image"]``; 400 with vLLM's message for a bad
        ``rgba_background_color`` (unknown keys are ignored, as vLLM ignores them)."""
        merged: dict[str, Any] = {"image_mode": "RGB"} | dict(kwargs or {})
        background = merged.get("rgba_background_color", _WHITE)
        if isinstance(background, list):
            background = tuple(background)
        if not (
            isinstance(background, tuple)
            and len(background) == 3
            and all(isinstance(c, int) and 0 <= c <= 255 for c in background)
        ):
            raise MediaError.bad_request(
                "rgba_background_color must be a list or tuple of 3 integers in the range [0, 255]."
            )
        return cls(merged["image_mode"], background)

    def io_config(self) -> dict[str, Any]:
        """What vLLM hashes beside the original bytes when decoding changed the mode."""
        return {"image_mode": self.mode, "rgba_background_color": self.background}


class ImageItem(msgspec.Struct, frozen=True):
    """A decoded image with what vLLM's item hash is computed from: the bytes it was decoded
    from and, when the mode was converted, the conversion settings (``io_config``)."""

    image: Image.Image
    original_bytes: bytes
    io_config: dict[str, Any] | None


def _has_alpha(image: Image.Image) -> bool:
    return image.mode in ("RGBA", "LA", "PA") or "transparency" in getattr(image, "info", {})


def _over_background(image: Image.Image, background: tuple[int, int, int]) -> Image.Image:
    from PIL import Image

    rgba = image if image.mode == "RGBA" else image.convert("RGBA")
    flat = Image.new("RGB", rgba.size, background)
    flat.paste(rgba, mask=rgba.getchannel("A"))
    return flat


def convert_mode(image: Image.Image, options: ImageOptions) -> Image.Image:
    """``image`` in ``options.mode``: the same object when nothing changes; transparent images
    going to RGB are composited over the background colour; anything else is Pillow's
    ``convert``."""
    mode = options.mode
    if mode is None or image.mode == mode:
        return image
    if mode == "RGB" and _has_alpha(image):
        return _over_background(image, options.background)
    return image.convert(mode)


def decode_image(data: bytes, options: ImageOptions, max_pixels: int) -> ImageItem:
    """Decode ``data`` (blocking; call it on a worker thread). MediaError as vLLM answers:
    400 ``Failed to load image: ...`` for what Pillow cannot read, 400 for too many pixels,
    500 for Pillow's decompression-bomb refusal."""
    from PIL import Image, ImageOps

    try:
        try:
            image: Image.Image = Image.open(io.BytesIO(data), formats=ALLOWED_IMAGE_FORMATS)
            width, height = image.size
            if max_pixels > 0 and width * height > max_pixels:
                raise MediaError.bad_request(
                    f"Image dimensions {width}x{height} ({width * height} pixels) exceed the "
                    f"maximum of {max_pixels} pixels. Set VLLM_MAX_IMAGE_PIXELS to increase "
                    "this limit."
                )
            # In place: the same pixels as vLLM's copying call, without a copy of the whole
            # decoded image when there is nothing to transpose (the usual case).
            with contextlib.suppress(Exception):
                ImageOps.exif_transpose(image, in_place=True)
            image.load()
            converted = convert_mode(image, options)
        except OSError as exc:  # UnidentifiedImageError and truncated data are OSErrors
            raise MediaError.bad_request(f"Failed to load image: {exc}") from exc
    except MediaError:
        raise
    except Exception as exc:
        MediaError.raise_from(exc)
    return ImageItem(converted, data, None if converted is image else options.io_config())

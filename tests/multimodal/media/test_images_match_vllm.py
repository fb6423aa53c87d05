"""Images decoded exactly as vLLM 0.32's MediaConnector decodes them (same pixels, mode, size,
hashing inputs) and bad payloads answered with its status and message."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import numpy as np
import pytest

from tests.multimodal.media.images import (
    corpus,
    data_url,
    encode,
    noise,
    png_declaring,
    unusual,
)
from tests.multimodal.media.vllm_reference import our_error, vllm_connector, vllm_outcome
from vllm_frontend.multimodal.media import MediaError, MediaLoader, MediaPolicy

pytestmark = pytest.mark.oracle  # imports vLLM as the reference

KWARGS: list[dict[str, Any] | None] = [
    None,
    {"image": {"image_mode": None}},
    {"image": {"image_mode": "L"}},
    {"image": {"rgba_background_color": [12, 200, 99]}},
    {"image": {"image_mode": "RGBA"}},
]


def ours(url: str, kwargs: dict[str, Any] | None) -> tuple[str, Any]:
    async def run() -> Any:
        loader = MediaLoader(MediaPolicy())
        try:
            return await loader.load_image_item(url, kwargs)
        finally:
            await loader.aclose()

    try:
        return "ok", asyncio.run(run())
    except MediaError as exc:
        return "error", our_error(exc)


def theirs(url: str, kwargs: dict[str, Any] | None) -> tuple[str, Any]:
    return vllm_outcome(vllm_connector(media_io_kwargs=kwargs).fetch_image_async(url))


@pytest.mark.parametrize("kwargs", KWARGS, ids=lambda k: str(k))
def test_every_corpus_image_decodes_to_vllms_pixels(kwargs: dict[str, Any] | None) -> None:
    for name, data in corpus().items():
        url = data_url(data)
        (ok, item), (their_ok, media) = ours(url, kwargs), theirs(url, kwargs)
        assert ok == their_ok == "ok", (name, item, media)
        assert item.image.mode == media.media.mode, name
        assert item.image.size == media.media.size, name
        assert np.array_equal(np.asarray(item.image), np.asarray(media.media)), name
        assert item.original_bytes == media.original_bytes, name
        assert item.io_config == media.io_config, name


def _truncated_png() -> bytes:
    data = encode(noise("RGB", (64, 64)), "PNG")
    return data[: len(data) // 2]


def _png_with_a_bad_crc() -> bytes:
    data = bytearray(encode(noise("RGB", (8, 8)), "PNG"))
    data[29] ^= 0xFF  # inside the IHDR chunk's CRC
    return bytes(data)


BAD = {
    "no comma": "data:image/png;base64",
    "not base64": "data:image/png,abc",
    "BASE64 upper case": "data:image/png;BASE64,iVBORw0KGgo=",
    "bad base64": "data:image/png;base64,not*base64",
    "bad padding": "data:image/png;base64,abc",
    "non-ascii base64": "data:image/png;base64,é",
    "pdf": data_url(b"%PDF-1.4 not an image"),
    "empty": "data:image/png;base64,",
    "truncated png": data_url(_truncated_png()),
    "bad crc": data_url(_png_with_a_bad_crc()),
    "eps (not allowed)": data_url(b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 1 1\n"),
    "unknown scheme": "ftp://example.com/a.png",
    "no scheme": "a.png",
    "file without allowed path": "file:///etc/hostname",
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_images_get_vllms_status_and_message(name: str) -> None:
    url = BAD[name]
    assert ours(url, None) == theirs(url, None)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"image": {"rgba_background_color": [1, 2]}},
        {"image": {"rgba_background_color": "white"}},
        {"image": {"image_mode": "XYZ"}},
        {"image": {"image_mode": "P"}},
    ],
    ids=str,
)
def test_bad_image_options_get_vllms_answer(kwargs: dict[str, Any]) -> None:
    url = data_url(encode(noise("RGBA", (4, 4)), "PNG"))
    mine, reference = ours(url, kwargs), theirs(url, kwargs)
    if mine[0] == "ok":
        assert reference[0] == "ok"
        assert np.array_equal(np.asarray(mine[1].image), np.asarray(reference[1].media))
    else:
        assert mine == reference


def test_the_pixel_limit_matches_vllms(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_MAX_IMAGE_PIXELS", "199")
    import vllm.envs

    if hasattr(vllm.envs, "disable_envs_cache"):
        vllm.envs.disable_envs_cache()
    url = data_url(encode(noise("RGB", (20, 10)), "PNG"))
    policy = MediaPolicy.from_env()
    assert policy.max_image_pixels == 199

    async def run() -> Any:
        loader = MediaLoader(policy)
        try:
            return await loader.load_image(url)
        finally:
            await loader.aclose()

    with pytest.raises(MediaError) as caught:
        asyncio.run(run())
    assert ("error", our_error(caught.value)) == theirs(url, None)


def test_a_large_base64_payload_decodes_the_same() -> None:
    data = encode(noise("RGB", (300, 200)), "JPEG", quality=75)
    url = "data:image/jpeg;base64," + base64.b64encode(data).decode()
    (_, item), (_, media) = ours(url, None), theirs(url, None)
    assert np.array_equal(np.asarray(item.image), np.asarray(media.media))


def _same_item(url: str, kwargs: dict[str, Any] | None = None) -> None:
    mine, reference = ours(url, kwargs), theirs(url, kwargs)
    assert mine[0] == reference[0], (mine, reference)
    if mine[0] == "error":
        assert mine == reference
        return
    item, media = mine[1], reference[1]
    assert (item.image.mode, item.image.size) == (media.media.mode, media.media.size)
    assert np.array_equal(np.asarray(item.image), np.asarray(media.media))
    assert item.original_bytes == media.original_bytes
    assert item.io_config == media.io_config


@pytest.mark.parametrize("name", list(unusual()))
def test_unusual_images_decode_as_vllm(name: str) -> None:
    # 16-bit, animated (the first frame), ICO, every EXIF orientation, 1x1 and 1x4000.
    _same_item(data_url(unusual()[name]))


def test_a_16_bit_image_kept_in_its_mode_as_vllm() -> None:
    _same_item(data_url(unusual()["I;16 png"]), {"image": {"image_mode": None}})


HOSTILE = {
    # 30000 x 30000 in 1 KB: over Pillow's MAX_IMAGE_PIXELS, refused before any pixel is
    # decoded (vLLM answers 500 for Pillow's DecompressionBombError; a 400 here, same message).
    "decompression bomb": png_declaring(30000, 30000),
    "past VLLM_MAX_IMAGE_PIXELS, under twice Pillow's": png_declaring(20000, 10000),
    "zero-size png": png_declaring(0, 0),
    "svg": b'<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"/>',
    "heic signature": b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + bytes(40),
    "avif signature": b"\x00\x00\x00\x1cftypavif\x00\x00\x00\x00avifmif1miaf" + bytes(40),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_images_get_vllms_answer(name: str) -> None:
    _same_item(data_url(HOSTILE[name]))


_PNG = encode(noise("RGB", (6, 5), 40), "PNG")
_B64 = base64.b64encode(_PNG).decode()
DATA_URLS = {
    "declared jpeg": "data:image/jpeg;base64," + _B64,
    "no media type": "data:;base64," + _B64,
    "text/plain": "data:text/plain;base64," + _B64,
    "svg media type": "data:image/svg+xml;base64," + _B64,
    "with a parameter": "data:image/png;charset=utf-8;base64," + _B64,
    "upper-case scheme": "DATA:image/png;base64," + _B64,
    "a newline inside": "data:image/png;base64," + _B64[:12] + "\n" + _B64[12:],
    "a space inside": "data:image/png;base64," + _B64[:12] + " " + _B64[12:],
    "padding dropped": "data:image/png;base64," + _B64.rstrip("="),
    "padding added": "data:image/png;base64," + _B64 + "==",
    "urlsafe alphabet": "data:image/png;base64," + base64.urlsafe_b64encode(_PNG).decode(),
    "percent-encoded": "data:image/png;base64," + _B64.replace("+", "%2B").replace("/", "%2F"),
}


@pytest.mark.parametrize("name", list(DATA_URLS))
def test_data_url_spellings_get_vllms_answer(name: str) -> None:
    _same_item(DATA_URLS[name])

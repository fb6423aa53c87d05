"""Images from ``data:`` URLs: decoding, mode conversion and the errors for bad payloads."""

from __future__ import annotations

import asyncio
import base64
import threading

import numpy as np
import pytest
from PIL import Image

from tests.multimodal.media.images import corpus, data_url, encode, noise
from vllm_frontend.multimodal.media import MediaError, MediaLoader, MediaPolicy


def load(url: str, kwargs: dict | None = None, **policy: object) -> Image.Image:
    async def run() -> Image.Image:
        loader = MediaLoader(MediaPolicy(**policy))  # type: ignore[arg-type]
        try:
            return await loader.load_image(url, kwargs)
        finally:
            await loader.aclose()

    return asyncio.run(run())


def error(url: str, kwargs: dict | None = None, **policy: object) -> MediaError:
    with pytest.raises(MediaError) as caught:
        load(url, kwargs, **policy)
    return caught.value


def test_an_rgb_png_comes_back_with_its_pixels() -> None:
    original = noise("RGB", (31, 17))
    image = load(data_url(encode(original, "PNG")))
    assert image.mode == "RGB"
    assert image.size == (31, 17)
    assert np.array_equal(np.asarray(image), np.asarray(original))


def test_every_corpus_image_becomes_rgb_by_default() -> None:
    for name, data in corpus().items():
        image = load(data_url(data))
        assert image.mode == "RGB", name


def test_transparent_pixels_take_the_background_colour() -> None:
    pixels = np.zeros((2, 2, 4), np.uint8)
    pixels[0, 0] = (10, 20, 30, 255)  # opaque: kept
    url = data_url(encode(Image.fromarray(pixels, "RGBA"), "PNG"))
    white = np.asarray(load(url))
    assert white[0, 0].tolist() == [10, 20, 30]
    assert white[1, 1].tolist() == [255, 255, 255]
    red = np.asarray(load(url, {"image": {"rgba_background_color": [200, 0, 0]}}))
    assert red[1, 1].tolist() == [200, 0, 0]
    assert red[0, 0].tolist() == [10, 20, 30]


def test_image_mode_none_keeps_the_alpha_channel_and_other_modes_convert() -> None:
    url = data_url(encode(noise("RGBA", (5, 4)), "PNG"))
    assert load(url, {"image": {"image_mode": None}}).mode == "RGBA"
    assert load(url, {"image": {"image_mode": "L"}}).mode == "L"


def test_exif_orientation_is_applied() -> None:
    data = corpus()["exif_rotated.jpg"]  # stored 40x16, displayed rotated by 90°
    assert load(data_url(data, "image/jpeg")).size == (16, 40)


def test_a_data_url_without_a_comma_is_a_400() -> None:
    err = error("data:image/png;base64")
    assert (err.status, err.err_type) == (400, "BadRequestError")
    assert "missing ',' separator" in err.message


def test_a_data_url_that_is_not_base64_is_a_501() -> None:
    err = error("data:image/png,rawbytes")
    assert (err.status, err.err_type) == (501, "NotImplementedError")


def test_bad_base64_is_a_400() -> None:
    err = error("data:image/png;base64,not*base64")
    assert (err.status, err.err_type, err.param) == (400, "BadRequestError", None)


def test_bytes_that_are_no_image_are_a_400() -> None:
    err = error(data_url(b"%PDF-1.4 definitely not an image"))
    assert (err.status, err.err_type) == (400, "BadRequestError")
    assert err.message.startswith("Failed to load image: cannot identify image file")


def test_a_truncated_png_is_a_400() -> None:
    data = encode(noise("RGB", (64, 64)), "PNG")
    err = error(data_url(data[: len(data) // 2]))
    assert (err.status, err.err_type) == (400, "BadRequestError")
    assert err.message.startswith("Failed to load image:")


def test_too_many_pixels_is_a_400_before_decoding() -> None:
    url = data_url(encode(noise("RGB", (20, 10)), "PNG"))
    err = error(url, max_image_pixels=199)
    assert (err.status, err.err_type) == (400, "BadRequestError")
    assert "Image dimensions 20x10 (200 pixels) exceed the maximum of 199 pixels" in err.message
    assert load(url, max_image_pixels=200).size == (20, 10)


@pytest.mark.parametrize("colour", [[1, 2], [0, 0, 256], "white", [1.0, 2, 3]])
def test_a_bad_background_colour_is_a_400(colour: object) -> None:
    url = data_url(encode(noise("RGB", (2, 2)), "PNG"))
    err = error(url, {"image": {"rgba_background_color": colour}})
    assert (err.status, err.err_type) == (400, "BadRequestError")
    assert err.message.startswith("rgba_background_color must be")


def test_the_item_carries_the_original_bytes_and_the_conversion_settings() -> None:
    async def run() -> None:
        loader = MediaLoader(MediaPolicy())
        rgb = encode(noise("RGB", (3, 3)), "PNG")
        item = await loader.load_image_item(data_url(rgb))
        assert (item.original_bytes, item.io_config) == (rgb, None)
        rgba = encode(noise("RGBA", (3, 3)), "PNG")
        item = await loader.load_image_item(data_url(rgba))
        assert item.original_bytes == rgba
        assert item.io_config == {"image_mode": "RGB", "rgba_background_color": (255, 255, 255)}
        await loader.aclose()

    asyncio.run(run())


def test_decoding_runs_off_the_event_loop_thread() -> None:
    seen: list[str] = []
    original = Image.Image.load

    def spy(self: Image.Image):  # type: ignore[no-untyped-def]
        seen.append(threading.current_thread().name)
        return original(self)

    url = data_url(encode(noise("RGB", (4, 4)), "PNG"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Image.Image, "load", spy)
        load(url)
    assert seen
    assert all(name.startswith("media") for name in seen), seen


def test_the_loop_keeps_running_while_a_large_image_decodes() -> None:
    big = encode(noise("RGB", (3000, 2000)), "PNG", compress_level=9)
    url = data_url(big)

    async def run() -> tuple[int, Image.Image]:
        loader = MediaLoader(MediaPolicy())
        ticks = 0
        task = asyncio.ensure_future(loader.load_image(url))
        while not task.done():
            ticks += 1
            await asyncio.sleep(0.001)
        await loader.aclose()
        return ticks, task.result()

    ticks, image = asyncio.run(run())
    assert image.size == (3000, 2000)
    assert ticks >= 5


def test_an_unknown_scheme_is_a_400() -> None:
    err = error("ftp://example.com/a.png")
    assert (err.status, err.err_type) == (400, "BadRequestError")
    assert err.message == "The URL must be either a HTTP, data or file URL."


def test_a_data_url_with_an_odd_scheme_case_is_still_a_data_url() -> None:
    payload = base64.b64encode(encode(noise("RGB", (2, 2)), "PNG")).decode()
    assert load(f"DATA:image/png;base64,{payload}").size == (2, 2)

"""``file://`` URLs: served from under ``--allowed-local-media-path`` only, links and ``..``
resolved first."""

from __future__ import annotations

import asyncio
import pathlib

import numpy as np
import pytest
from PIL import Image

from tests.multimodal.media.images import encode, noise
from vllm_frontend.multimodal.media import MediaError, MediaLoader, MediaPolicy

IMAGE = noise("RGB", (12, 9), 21)


@pytest.fixture
def tree(tmp_path: pathlib.Path) -> pathlib.Path:
    """root/ with an image, a link out of it, and an image outside it."""
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "a.png").write_bytes(encode(IMAGE, "PNG"))
    (tmp_path / "outside.png").write_bytes(encode(IMAGE, "PNG"))
    (root / "link.png").symlink_to(tmp_path / "outside.png")
    (root / "inner_link.png").symlink_to(root / "sub" / "a.png")
    return root


def load(url: str, root: str) -> Image.Image:
    async def run() -> Image.Image:
        loader = MediaLoader(MediaPolicy(allowed_local_media_path=root))
        try:
            return await loader.load_image(url)
        finally:
            await loader.aclose()

    return asyncio.run(run())


def error(url: str, root: str) -> MediaError:
    with pytest.raises(MediaError) as caught:
        load(url, root)
    return caught.value


def test_a_file_under_the_allowed_path_loads(tree: pathlib.Path) -> None:
    image = load(f"file://{tree}/sub/a.png", str(tree))
    assert np.array_equal(np.asarray(image), np.asarray(IMAGE))
    assert load(f"file://{tree}/inner_link.png", str(tree)).size == (12, 9)


def test_without_the_flag_file_urls_are_refused(tree: pathlib.Path) -> None:
    err = error(f"file://{tree}/sub/a.png", "")
    assert (err.status, err.err_type) == (400, "BadRequestError")  # vLLM answers 500
    assert err.message == "Cannot load local files without `--allowed-local-media-path`."


@pytest.mark.parametrize("name", ["../outside.png", "sub/../../outside.png", "link.png"])
def test_paths_that_lead_outside_are_refused(tree: pathlib.Path, name: str) -> None:
    err = error(f"file://{tree}/{name}", str(tree))
    assert (err.status, err.err_type) == (400, "BadRequestError")
    assert err.message == (
        f"The file path {tree}/{name} must be a subpath of "
        f"`--allowed-local-media-path {tree.resolve()}`."
    )


def test_the_root_itself_is_not_a_file_under_it(tree: pathlib.Path) -> None:
    assert error(f"file://{tree}", str(tree)).status == 400


def test_a_missing_file_is_a_400_not_vllms_500(tree: pathlib.Path) -> None:
    err = error(f"file://{tree}/sub/missing.png", str(tree))
    assert (err.status, err.err_type) == (400, "BadRequestError")
    assert "No such file or directory" in err.message


def test_an_allowed_path_that_is_no_directory_stops_the_loader(tree: pathlib.Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        MediaLoader(MediaPolicy(allowed_local_media_path=str(tree / "nope")))
    with pytest.raises(ValueError, match="must be a directory"):
        MediaLoader(MediaPolicy(allowed_local_media_path=str(tree / "sub" / "a.png")))

"""http(s) and file:// media answered as vLLM 0.32's MediaConnector answers: the same pixels,
and for every failure the same status, error type, message and param."""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from tests.multimodal.media.http_server import MediaServer
from tests.multimodal.media.images import encode, noise
from tests.multimodal.media.vllm_reference import our_error, vllm_connector, vllm_outcome
from vllm_frontend.multimodal.media import MediaError, MediaLoader, MediaPolicy

pytestmark = pytest.mark.oracle  # imports vLLM as the reference


@pytest.fixture(scope="module")
def server() -> Iterator[MediaServer]:
    media = MediaServer()
    media.files["a.png"] = encode(noise("RGBA", (40, 30), 31), "PNG")
    media.files["big.png"] = encode(noise("RGB", (800, 600), 32), "PNG", compress_level=0)
    media.files["text"] = b"hello"
    with media.running() as running:
        yield running


@pytest.fixture(autouse=True)
def one_attempt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_MEDIA_FETCH_MAX_RETRIES", "1")


def ours(url: str, **policy: Any) -> tuple[str, Any]:
    async def run() -> Any:
        loader = MediaLoader(
            MediaPolicy.from_env(allow_private_addresses=True, **policy)  # env as vLLM reads it
        )
        try:
            return await loader.load_image_item(url)
        finally:
            await loader.aclose()

    try:
        return "ok", asyncio.run(run())
    except MediaError as exc:
        return "error", our_error(exc)


def theirs(url: str, **kwargs: Any) -> tuple[str, Any]:
    if "allowed_media_domains" in kwargs:
        kwargs["allowed_media_domains"] = list(kwargs["allowed_media_domains"])
    return vllm_outcome(vllm_connector(**kwargs).fetch_image_async(url))


def same(url: str, **kwargs: Any) -> None:
    mine, reference = ours(url, **kwargs), theirs(url, **kwargs)
    if mine[0] == reference[0] == "ok":
        assert np.array_equal(np.asarray(mine[1].image), np.asarray(reference[1].media))
        assert mine[1].original_bytes == reference[1].original_bytes
        assert mine[1].io_config == reference[1].io_config
    else:
        assert mine == reference


def test_an_image_over_http(server: MediaServer) -> None:
    same(server.url("files/a.png"))


@pytest.mark.parametrize(
    "path", ["status/404", "status/403", "status/408", "status/500", "files/text"]
)
def test_failed_fetches(server: MediaServer, path: str) -> None:
    same(server.url(path))


def test_unreachable_host() -> None:
    same("http://127.0.0.1:9/a.png")


def test_a_scheme_that_only_starts_with_http() -> None:
    same("httpx://example.com/a.png")


def test_disallowed_domain(server: MediaServer) -> None:
    same(server.url("files/a.png"), allowed_media_domains=("example.com", "b.org"))
    same(server.url("files/a.png"), allowed_media_domains=("127.0.0.1",))


@pytest.mark.parametrize("follow", ["1", "0"])
def test_redirects(server: MediaServer, monkeypatch: pytest.MonkeyPatch, follow: str) -> None:
    monkeypatch.setenv("VLLM_MEDIA_URL_ALLOW_REDIRECTS", follow)
    same(server.url("redirect?to=/files/a.png"))


def test_download_limit_from_content_length(
    server: MediaServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB", "0")
    same(server.url("files/big.png"))
    monkeypatch.setenv("VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB", "1")
    assert len(server.files["big.png"]) > 1024 * 1024
    same(server.url("files/big.png"))


def test_local_files(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.png").write_bytes(encode(noise("LA", (7, 5), 33), "PNG"))
    (tmp_path / "b.png").write_bytes(encode(noise("RGB", (7, 5), 34), "PNG"))
    (root / "link.png").symlink_to(tmp_path / "b.png")
    for name in ["a.png", "../b.png", "link.png", "missing.png", "", "a.png/x"]:
        same(f"file://{root}/{name}", allowed_local_media_path=str(root))
    same(f"file://{root}/a.png")


@pytest.mark.parametrize("fault", ["long", "reset", "gzip", "false-gzip", "html", "loop"])
def test_servers_that_lie_get_vllms_answer(server: MediaServer, fault: str) -> None:
    # A Content-Length past the body, a connection reset mid-body, a gzip body (decoded, as
    # aiohttp decodes it for vLLM), a false gzip header, a text/html content type (ignored,
    # as vLLM ignores it) and an endless redirect loop (aiohttp's limit of 10).
    same(server.url(f"faulty/{fault}/a.png"))


def test_a_server_slower_than_the_fetch_timeout(
    server: MediaServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # vLLM answers 500 with TimeoutError's empty message; a 400 here that says what happened.
    monkeypatch.setenv("VLLM_IMAGE_FETCH_TIMEOUT", "1")
    url = server.url("faulty/slow/a.png?delay=2.5")
    assert theirs(url) == ("error", (400, "BadRequestError", "", None))  # its 500, as a 400
    assert ours(url) == (
        "error",
        (400, "BadRequestError", "Failed to fetch media from URL: timed out after 1 s", None),
    )

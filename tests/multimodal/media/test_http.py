"""Images over http(s): fetched with vLLM's timeouts, redirects, size limits and statuses, never
from a private address unless allowed, never from a domain or redirect outside the allowlist,
and without stalling the event loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from PIL import Image

from tests.multimodal.media.http_server import MediaServer
from tests.multimodal.media.images import data_url, encode, noise
from vllm_frontend.multimodal.media import MediaError, MediaLoader, MediaPolicy

PNG_IMAGE = noise("RGB", (40, 30), 11)
PNG = encode(PNG_IMAGE, "PNG")


@pytest.fixture(scope="module")
def server() -> Iterator[MediaServer]:
    media = MediaServer()
    media.files["a.png"] = PNG
    media.files["big.png"] = encode(noise("RGB", (600, 400), 12), "PNG", compress_level=0)
    with media.running() as running:
        yield running


def load(url: str, **policy: Any) -> Image.Image:
    policy.setdefault("allow_private_addresses", True)
    policy.setdefault("fetch_max_retries", 1)

    async def run() -> Image.Image:
        loader = MediaLoader(MediaPolicy(**policy))
        try:
            return await loader.load_image(url)
        finally:
            await loader.aclose()

    return asyncio.run(run())


def error(url: str, **policy: Any) -> MediaError:
    with pytest.raises(MediaError) as caught:
        load(url, **policy)
    return caught.value


def test_an_image_over_http_decodes(server: MediaServer) -> None:
    image = load(server.url("files/a.png"))
    assert np.array_equal(np.asarray(image), np.asarray(PNG_IMAGE))


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::1]", "127.0.0.2"])
def test_loopback_is_refused_unless_allowed(server: MediaServer, host: str) -> None:
    url = server.url("files/a.png").replace("127.0.0.1", host)
    before = len(server.requests)
    err = error(url, allow_private_addresses=False)
    assert (err.status, err.err_type, err.param) == (400, "BadRequestError", None)
    assert "--allow-private-media-addresses" in err.message
    assert len(server.requests) == before  # nothing reached the server


def test_a_redirect_to_a_private_address_is_refused(server: MediaServer) -> None:
    # The first hop is refused too here (everything is on loopback); the check is the same
    # socket-level one for every connection, whatever name or redirect led to it.
    url = server.url("redirect?to=" + server.url("files/a.png"))
    assert "--allow-private-media-addresses" in error(url, allow_private_addresses=False).message


def test_domains_outside_the_allowlist_are_refused(server: MediaServer) -> None:
    err = error(server.url("files/a.png"), allowed_media_domains=("example.com",))
    assert (err.status, err.err_type) == (400, "BadRequestError")
    assert err.message == (
        "The URL must be from one of the allowed domains: ['example.com']. "
        "Input URL domain: 127.0.0.1"
    )
    assert load(server.url("files/a.png"), allowed_media_domains=("127.0.0.1",)).size == (40, 30)


def test_a_redirect_must_stay_within_the_allowlist(server: MediaServer) -> None:
    target = server.url("files/a.png").replace("127.0.0.1", "localhost")
    url = server.url("redirect?to=" + target)
    err = error(url, allowed_media_domains=("127.0.0.1",))
    assert (err.status, err.err_type) == (400, "BadRequestError")
    assert err.message.endswith("Input URL domain: localhost")
    assert load(url, allowed_media_domains=("127.0.0.1", "localhost")).size == (40, 30)


def test_redirects_are_followed_unless_turned_off(server: MediaServer) -> None:
    url = server.url("redirect?to=/files/a.png")
    assert load(url).size == (40, 30)
    err = error(url, allow_redirects=False)  # the 302's own body is no image
    assert err.message.startswith("Failed to load image: cannot identify image file")


@pytest.mark.parametrize("code", [400, 403, 404, 410])
def test_client_error_statuses_are_422(server: MediaServer, code: int) -> None:
    url = server.url(f"status/{code}")
    err = error(url)
    assert (err.status, err.err_type, err.param) == (422, "UnprocessableEntityError", "image_url")
    assert err.message == (
        f"Failed to fetch media from URL: HTTP {code} error (parameter=image_url, value={url})"
    )


@pytest.mark.parametrize("code", [408, 429, 500, 503])
def test_transient_statuses_are_a_400_after_the_retries(server: MediaServer, code: int) -> None:
    before = server.requests.count(f"/status/{code}")
    err = error(server.url(f"status/{code}"), fetch_max_retries=2)
    assert (err.status, err.err_type) == (400, "BadRequestError")
    assert err.message.startswith(f"{code}, message=")
    # vLLM retries 5xx only: 408 and 429 are answered as they are, at once
    assert server.requests.count(f"/status/{code}") - before == (2 if code >= 500 else 1)


def test_an_unreachable_host_is_a_400_not_vllms_500() -> None:
    err = error("http://127.0.0.1:9/a.png")
    assert (err.status, err.err_type) == (400, "BadRequestError")
    assert err.message.startswith("Cannot connect to host 127.0.0.1:9")


def test_a_body_over_the_download_limit_is_not_read_past_it(server: MediaServer) -> None:
    server.sent_forever = 0
    started = time.monotonic()
    err = error(server.url("forever"), max_download_mb=1)
    assert (err.status, err.err_type, err.param) == (422, "UnprocessableEntityError", "image_url")
    assert "Remote media download exceeds VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB=1" in err.message
    assert time.monotonic() - started < 10
    time.sleep(0.2)
    sent = server.sent_forever
    time.sleep(0.3)
    assert server.sent_forever == sent  # the connection was closed, the server stopped


def test_a_declared_length_over_the_limit_is_refused_before_reading(server: MediaServer) -> None:
    size = len(server.files["big.png"])
    err = error(server.url("files/big.png"), max_download_mb=0.5)  # type: ignore[arg-type]
    assert err.status == 422
    assert f"(received at least {size} bytes)" in err.message


def test_a_slow_server_times_out_with_a_400(server: MediaServer) -> None:
    url = server.url("drip/a.png?delay=0.5&pieces=10")
    started = time.monotonic()
    err = error(url, image_fetch_timeout=1)
    assert (err.status, err.err_type) == (400, "BadRequestError")
    assert time.monotonic() - started < 3


def test_a_slow_image_does_not_stall_other_work(server: MediaServer) -> None:
    slow_url = server.url("drip/big.png?delay=0.05&pieces=30")  # ~1.5 s to arrive
    quick_url = data_url(PNG)

    async def run() -> tuple[list[float], float, float]:
        loader = MediaLoader(MediaPolicy(allow_private_addresses=True))
        started = time.monotonic()
        slow = asyncio.ensure_future(loader.load_image(slow_url))
        gaps: list[float] = []
        last = time.monotonic()
        quick_done = 0.0
        quick = asyncio.ensure_future(loader.load_image(quick_url))
        while not slow.done():
            await asyncio.sleep(0.005)
            now = time.monotonic()
            gaps.append(now - last)
            last = now
            if quick.done() and not quick_done:
                quick_done = now - started
        slow_done = time.monotonic() - started
        assert slow.result().size == (600, 400)
        await loader.aclose()
        return gaps, quick_done, slow_done

    gaps, quick_done, slow_done = asyncio.run(run())
    assert slow_done > 1.0
    assert 0 < quick_done < 0.5
    assert max(gaps) < 0.25  # the loop never waited on the slow image


def test_a_redirect_to_a_private_address_is_refused_at_the_connection(
    server: MediaServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Let 127.0.0.1 (the test server) pass for public: its redirect to 127.0.0.2 is refused when
    # the socket is about to connect, whatever led there.
    from vllm_frontend.multimodal.media import addresses

    seen: list[str] = []

    def only_the_server_is_public(host: str) -> bool:
        seen.append(host)
        return host == "127.0.0.1"

    monkeypatch.setattr(addresses, "is_public_address", only_the_server_is_public)
    port = server.base.rsplit(":", 1)[1]
    url = server.url(f"redirect?to=http://127.0.0.2:{port}/files/a.png")
    err = error(url, allow_private_addresses=False)
    assert (err.status, err.err_type) == (400, "BadRequestError")
    assert "127.0.0.2" in err.message
    assert seen == ["127.0.0.1", "127.0.0.2"]
    assert load(server.url("files/a.png"), allow_private_addresses=False).size == (40, 30)


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("8.8.8.8", True),
        ("2606:4700:4700::1111", True),
        ("127.0.0.1", False),
        ("10.1.2.3", False),
        ("172.16.0.1", False),
        ("192.168.1.1", False),
        ("169.254.169.254", False),  # cloud metadata
        ("100.64.0.1", False),  # shared address space (CGNAT)
        ("0.0.0.0", False),
        ("224.0.0.1", False),
        ("239.255.255.250", False),
        ("240.0.0.1", False),
        ("255.255.255.255", False),
        ("192.0.2.1", False),
        ("::1", False),
        ("::", False),
        ("fe80::1%lo", False),
        ("fc00::1", False),
        ("ff02::1", False),
        ("::ffff:127.0.0.1", False),  # IPv4-mapped
        ("::ffff:8.8.8.8", True),
        ("::127.0.0.1", False),  # IPv4-compatible (deprecated)
        ("2002:7f00:1::", False),  # 6to4 of 127.0.0.1
        ("2002:808:808::", True),  # 6to4 of 8.8.8.8
        ("64:ff9b::a00:1", False),  # NAT64 of 10.0.0.1
        ("64:ff9b::808:808", True),
        ("2001:db8::1", False),  # documentation
        ("not an address", False),
    ],
)
def test_which_addresses_are_public(address: str, public: bool) -> None:
    from vllm_frontend.multimodal.media.addresses import is_public_address

    assert is_public_address(address) is public


def test_the_check_is_on_the_address_a_name_resolves_to_at_connect_time(
    server: MediaServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A name whose DNS answer changes between lookups (rebinding) gets nothing by it: there is
    # no earlier lookup to fool; the address each connection is about to use is the one judged.
    import socket

    import aiohttp.connector
    from aiohttp.abc import AbstractResolver, ResolveResult

    class LoopbackAnswers(AbstractResolver):
        def __init__(self, *args: object, **kwargs: object) -> None:
            pass

        async def resolve(
            self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
        ) -> list[ResolveResult]:
            return [
                ResolveResult(
                    hostname=host, host="127.0.0.1", port=port, family=socket.AF_INET, proto=0,
                    flags=0,
                )
            ]  # fmt: skip

        async def close(self) -> None:
            pass

    monkeypatch.setattr(aiohttp.connector, "DefaultResolver", LoopbackAnswers)
    url = server.url("files/a.png").replace("127.0.0.1", "media.example")
    before = len(server.requests)
    err = error(url, allow_private_addresses=False)
    assert "--allow-private-media-addresses" in err.message
    assert "media.example" in err.message
    assert len(server.requests) == before
    assert load(url, allow_private_addresses=True).size == (40, 30)  # the answer was used
    assert len(server.requests) == before + 1

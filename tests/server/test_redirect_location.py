"""The trailing-slash redirect's ``Location`` is the one Starlette builds from the request's
scope (``URL(scope=...)`` quoted by ``RedirectResponse``), Host header or not."""

from __future__ import annotations

import pytest

from vllm_frontend.server.redirects import trailing_slash_redirect

pytestmark = pytest.mark.oracle  # Starlette (vLLM's web framework) is the reference

SERVERS = [("127.0.0.1", 8000), ("127.0.0.1", 80), ("::1", 8443), ("/tmp/vllm.sock", None), None]
HOSTS = [None, "example.com", "example.com:81", "[::1]:9", "x:99999", "[::1", "a b", ""]


def starlette_location(
    scheme: str, host: str | None, server: tuple[str, int | None] | None, path: str, query: bytes
) -> str:
    from starlette.datastructures import URL
    from starlette.responses import RedirectResponse

    headers = [] if host is None else [(b"host", host.encode("latin-1"))]
    scope = {"type": "http", "scheme": scheme, "server": server, "path": path,
             "query_string": query, "headers": headers}  # fmt: skip
    return RedirectResponse(URL(scope=scope)).headers["location"]


@pytest.mark.parametrize("server", SERVERS)
@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize(
    ("scheme", "path", "query"),
    [("http", "/health", b""), ("https", "/v1/models", b"a=b%20c&d"), ("http", "//x/y", b"")],
)
def test_location_is_starlettes(
    scheme: str,
    host: str | None,
    server: tuple[str, int | None] | None,
    path: str,
    query: bytes,
) -> None:
    response = trailing_slash_redirect(scheme, host, path, query, server)
    [location] = [value for name, value in response.headers if name == b"location"]
    assert location.decode("latin-1") == starlette_location(scheme, host, server, path, query)

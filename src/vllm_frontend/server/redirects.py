"""Starlette's trailing-slash redirect, which vLLM's FastAPI app answers for a path that no route
takes but that a route takes with its trailing slash added or removed (``redirect_slashes``,
starlette/routing.py ``Router.app``): ``307`` with a ``Location`` built as Starlette's
``URL(scope=...)`` builds it (starlette/datastructures.py) and quoted as its
``RedirectResponse`` quotes it (starlette/responses.py)."""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import quote

from .transport import Response

__all__ = ["slash_toggled", "trailing_slash_redirect"]

# A Host header Starlette takes as the authority: a registered name or IPv4 address, or a
# bracketed IPv6 / IPvFuture literal, then an optional port (starlette/_utils.py).
_HOST = re.compile(
    r"(?:[a-z0-9._~%!$&'()*+,;=-]+|\[(?:(?P<ipv6>[a-f0-9]*:[a-f0-9.:]+)|"
    r"(?-i:v)[a-f0-9]+\.[a-z0-9._~!$&'()*+,;=:-]+)\])(?::(?P<port>[0-9]+))?",
    re.IGNORECASE,
)
_LOCATION_SAFE = ":/%#?=@[]!$&'()*+,;"


def slash_toggled(path: str) -> str:
    """``path`` with every trailing slash removed, or with one added when it has none."""
    return path.rstrip("/") if path.endswith("/") else path + "/"


def _authority(host: str | None) -> str | None:
    if host is None:
        return None
    match = _HOST.fullmatch(host)
    if match is None:
        return None
    if match["ipv6"] is not None:
        try:
            ipaddress.IPv6Address(match["ipv6"])
        except ValueError:
            return None
    port = match["port"]
    digits = None if port is None else port.lstrip("0")
    if digits is not None and (len(digits) > 5 or int(digits or "0") > 65535):
        return None
    return host


def _server_authority(scheme: str, server: tuple[str, int | None] | None) -> str | None:
    # Starlette's URL(scope=...) names the socket the request came in on (a Unix socket's
    # path and its None port included, as it spells them)
    if server is None:
        return None
    host, port = server
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return host if port == _DEFAULT_PORTS.get(scheme) else f"{host}:{port}"


_DEFAULT_PORTS = {"http": 80, "https": 443}


def trailing_slash_redirect(
    scheme: str,
    host: str | None,
    path: str,
    query: bytes,
    server: tuple[str, int | None] | None = None,
) -> Response:
    """The ``307`` to ``path`` (already toggled) with ``query``, on ``host`` when the request's
    Host header is a valid authority, else on the ``server`` address the request came in on
    (the path alone without either)."""
    target = path.replace("?", "%3F").replace("#", "%23").replace("\\", "%5C")
    authority = _authority(host) or _server_authority(scheme, server)
    if authority is None and target.startswith("//"):
        target = "/%2F" + target[2:]  # else read as an authority
    if query:
        target += "?" + query.decode("latin-1")
    url = target if authority is None else f"{scheme}://{authority}{target}"
    location = quote(url, safe=_LOCATION_SAFE)
    return Response(b"", 307, headers=[(b"location", location.encode("latin-1"))])

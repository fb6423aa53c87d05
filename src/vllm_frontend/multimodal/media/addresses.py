"""Which network addresses media may be fetched from: global unicast only, unless the server
allows private addresses. Checked on the address a socket is about to connect to, so neither a
DNS answer that changes between lookups (rebinding) nor a redirect can lead a fetch elsewhere."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")

refused_addresses: ContextVar[list[str] | None] = ContextVar("refused_addresses", default=None)
"""Where the guarded socket factory notes each address it refused, for the fetch running in
this context to tell a refusal of ours from an unreachable host."""


def is_public_address(host: str) -> bool:
    """Whether ``host`` (a numeric IPv4 or IPv6 address) is a global unicast address. Refused:
    private, loopback, link-local, unspecified, multicast, reserved, shared (CGNAT) and
    documentation ranges, and IPv6 addresses that embed a refused IPv4 address (IPv4-mapped,
    6to4, NAT64, Teredo)."""
    try:
        address = ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:  # the IPv4 address is what is connected to
            return is_public_address(str(address.ipv4_mapped))
        if address in _NAT64:  # DNS64/NAT64 networks reach IPv4 hosts so: judge the host
            return is_public_address(str(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)))
        if address.sixtofour is not None:
            # 6to4 (2002::/16) reaches the IPv4 host it embeds: judge that host alone. Python's
            # own tables disagree on the range between patch releases (3.11.2 calls all of it
            # private, 3.11.7 global).
            return is_public_address(str(address.sixtofour))
        embedded: list[ipaddress.IPv4Address] = []
        if address.teredo is not None:
            embedded.extend(address.teredo)
        if any(not is_public_address(str(inner)) for inner in embedded):
            return False
    return bool(
        address.is_global
        and not address.is_multicast
        and not address.is_private
        and not address.is_reserved
        and not address.is_loopback
        and not address.is_link_local
        and not address.is_unspecified
    )


class PrivateAddressRefused(ConnectionRefusedError):
    """The connection would have gone to a non-global address."""


def guarded_socket_factory(addr_info: tuple[Any, ...]) -> socket.socket:
    """aiohttp's ``socket_factory``: a socket for ``addr_info`` if its address is public, else
    PrivateAddressRefused (noted in :data:`refused_addresses`)."""
    family, type_, proto, _canonname, sockaddr = addr_info
    host = sockaddr[0]
    if not is_public_address(host):
        refused = refused_addresses.get()
        if refused is not None:
            refused.append(host)
        raise PrivateAddressRefused(f"refused to connect to non-global address {host}")
    sock = socket.socket(family=family, type=type_, proto=proto)
    sock.setblocking(False)
    return sock


SocketFactory = Callable[[tuple[Any, ...]], socket.socket]
"""The type of aiohttp's ``socket_factory`` (an ``addr_info`` tuple in, a socket out)."""

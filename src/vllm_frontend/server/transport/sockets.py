"""Listening sockets for the server: TCP (as vLLM binds them), Unix, or an inherited fd."""

from __future__ import annotations

import socket

LISTEN_BACKLOG = 2048
"""Backlog for listening sockets; vLLM's Python server uses 2048 (vllm-rs' 128 drops bursts)."""


def bind_tcp(host: str | None, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A bound (not yet listening) TCP socket, as vLLM's ``create_server_socket`` makes it:
    IPv4 unless ``host`` is an IPv6 literal; host None or "" means all interfaces."""
    host = host or ""
    family = socket.AF_INET
    if host:
        try:
            socket.inet_pton(socket.AF_INET6, host)
            family = socket.AF_INET6
        except OSError:
            pass
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def bind_unix(path: str) -> socket.socket:
    """A bound Unix-domain socket at ``path`` (fails if the path exists, as in vLLM)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    return sock


def socket_from_fd(fd: int) -> socket.socket:
    """Adopt an inherited socket fd (family and type are read from the fd)."""
    return socket.socket(fileno=fd)

"""TLS on the HTTP server (``--ssl-*``), with certificates made here and real TLS clients:
responses and streams arrive as over plain HTTP, mutual TLS asks for (and checks) client
certificates as ``--ssl-cert-reqs`` says, and ``--enable-ssl-refresh`` serves new files to new
connections."""

from __future__ import annotations

import asyncio
import pathlib
import socket
import ssl
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.support.certificates import CertificateAuthority
from vllm_frontend.server.transport import (
    CertificateRefresher,
    TlsSettings,
    bind_tcp,
    server_ssl_context,
)

from .support import RunningServer
from .test_http import EVENTS, Probe, make_app


@pytest.fixture
def ca(tmp_path: pathlib.Path) -> CertificateAuthority:
    return CertificateAuthority(tmp_path)


def _settings(ca: CertificateAuthority, **options: object) -> TlsSettings:
    cert, key = ca.issue("server", "server one", server=True)
    return TlsSettings(certfile=str(cert), keyfile=str(key), **options)  # type: ignore[arg-type]


def _client_context(ca: CertificateAuthority, cert: tuple[pathlib.Path, pathlib.Path] | None = None
                    ) -> ssl.SSLContext:  # fmt: skip
    context = ssl.create_default_context(cafile=str(ca.cert_path))
    if cert is not None:
        context.load_cert_chain(str(cert[0]), str(cert[1]))
    return context


@pytest.fixture
def plain() -> Iterator[RunningServer]:
    srv = RunningServer(make_app(Probe()))
    yield srv
    srv.stop()


def _serve(settings: TlsSettings) -> RunningServer:
    return RunningServer(make_app(Probe()), ssl_context=server_ssl_context(settings))


def _https(port: int) -> str:
    return f"https://127.0.0.1:{port}"


def test_responses_and_streams_over_tls_are_those_of_plain_http(
    ca: CertificateAuthority, plain: RunningServer
) -> None:
    srv = _serve(_settings(ca))
    try:
        with httpx.Client(verify=_client_context(ca), timeout=30) as client:
            for path in ("/echo?x=1", "/sse", "/pushed"):
                tls = client.get(_https(srv.port) + path)
                clear = httpx.get(plain.url + path, timeout=30)
                assert tls.status_code == clear.status_code == 200
                assert tls.content == clear.content
            assert client.get(_https(srv.port) + "/sse").content.startswith(EVENTS[0])
            # a big pushed body (flow control under TLS)
            big = client.get(_https(srv.port) + "/pushed_big")
            assert big.status_code == 200 and len(big.content) == 512 * 65536
    finally:
        srv.stop()


def test_a_plain_http_client_is_not_answered_in_clear(ca: CertificateAuthority) -> None:
    srv = _serve(_settings(ca))
    try:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
            s.sendall(b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
            data = b""
            with pytest.raises(OSError):
                while chunk := s.recv(4096):
                    data += chunk
                raise ConnectionResetError  # closed without an answer is fine too
            assert not data.startswith(b"HTTP/1.1")
    finally:
        srv.stop()


def _status(port: int, context: ssl.SSLContext) -> int | str:
    try:
        with httpx.Client(verify=context, timeout=10) as client:
            return client.get(_https(port) + "/echo").status_code
    except httpx.HTTPError as e:
        return type(e).__name__


def test_mutual_tls_requires_a_certificate_from_the_ca(
    ca: CertificateAuthority, tmp_path: pathlib.Path
) -> None:
    other = CertificateAuthority(tmp_path, "other CA")
    good = ca.issue("client", "client", server=False)
    foreign = other.issue("foreign", "foreign", server=False)
    srv = _serve(_settings(ca, ca_certs=str(ca.cert_path), cert_reqs=ssl.CERT_REQUIRED))
    try:
        assert _status(srv.port, _client_context(ca, good)) == 200
        assert _status(srv.port, _client_context(ca)) != 200
        assert _status(srv.port, _client_context(ca, foreign)) != 200
    finally:
        srv.stop()
    srv = _serve(_settings(ca, ca_certs=str(ca.cert_path), cert_reqs=ssl.CERT_OPTIONAL))
    try:
        assert _status(srv.port, _client_context(ca, good)) == 200
        assert _status(srv.port, _client_context(ca)) == 200
        assert _status(srv.port, _client_context(ca, foreign)) != 200
    finally:
        srv.stop()


def _peer_common_name(port: int, context: ssl.SSLContext) -> str:
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as s,
    ):
        cert = s.getpeercert()
    subject = dict(item for rdn in cert["subject"] for item in rdn)  # type: ignore[misc]
    return str(subject["commonName"])


def test_ssl_refresh_serves_new_files_to_new_connections(
    ca: CertificateAuthority, tmp_path: pathlib.Path
) -> None:
    other = CertificateAuthority(tmp_path, "other CA")
    client_cas = tmp_path / "client-cas.pem"  # the server's copy: the clients keep trusting `ca`
    client_cas.write_bytes(ca.cert_path.read_bytes())
    settings = _settings(ca, ca_certs=str(client_cas), cert_reqs=ssl.CERT_OPTIONAL, refresh=True)
    context = server_ssl_context(settings)
    srv = RunningServer(make_app(Probe()), ssl_context=context)
    refresher = CertificateRefresher(context, settings, interval=0.05)
    srv.call(_start(refresher))
    try:
        foreign = other.issue("foreign", "foreign", server=False)
        assert _peer_common_name(srv.port, _client_context(ca)) == "server one"
        assert _status(srv.port, _client_context(ca, foreign)) != 200
        # replace the server certificate and trust the other CA's clients too
        new_cert, new_key = ca.issue("server-two", "server two", server=True)
        assert settings.certfile and settings.keyfile and settings.ca_certs
        pathlib.Path(settings.keyfile).write_bytes(new_key.read_bytes())
        pathlib.Path(settings.certfile).write_bytes(new_cert.read_bytes())
        pathlib.Path(settings.ca_certs).write_bytes(other.cert_path.read_bytes())
        deadline = time.monotonic() + 10
        while _peer_common_name(srv.port, _client_context(ca)) != "server two":
            assert time.monotonic() < deadline, "the new certificate was never served"
            time.sleep(0.05)
        while _status(srv.port, _client_context(ca, foreign)) != 200:
            assert time.monotonic() < deadline, "the new CA was never loaded"
            time.sleep(0.05)
    finally:
        srv.call(refresher.stop())
        srv.stop()


async def _start(refresher: CertificateRefresher) -> None:
    refresher.start()
    await asyncio.sleep(0)


def test_bad_settings_are_refused(ca: CertificateAuthority, tmp_path: pathlib.Path) -> None:
    cert, key = ca.issue("server", "s", server=True)
    with pytest.raises(ValueError, match="--ssl-certfile"):
        server_ssl_context(TlsSettings(keyfile=str(key)))
    with pytest.raises(ValueError, match="--ssl-cert-reqs"):
        server_ssl_context(TlsSettings(certfile=str(cert), keyfile=str(key), cert_reqs=3))
    with pytest.raises(OSError):
        server_ssl_context(TlsSettings(certfile=str(tmp_path / "missing.pem")))


def test_tls_over_a_unix_socket(ca: CertificateAuthority, tmp_path: pathlib.Path) -> None:
    from vllm_frontend.server.transport import bind_unix

    path = str(tmp_path / "s.sock")
    srv = RunningServer(make_app(Probe()), sockets=[bind_unix(path)],
                        ssl_context=server_ssl_context(_settings(ca)))  # fmt: skip
    try:
        transport = httpx.HTTPTransport(uds=path, verify=_client_context(ca))
        with httpx.Client(transport=transport, timeout=10) as client:
            assert client.get("https://127.0.0.1/echo").json()["path"] == "/echo"
    finally:
        srv.stop()


def test_bind_tcp_is_unchanged_by_tls() -> None:
    bind_tcp("127.0.0.1", 0).close()  # the sockets stay plain; TLS wraps connections

"""TLS for the server: the ``SSLContext`` vLLM's uvicorn makes from ``--ssl-*``, and the
certificate refresher of ``--enable-ssl-refresh``.

The context is made as uvicorn's ``create_ssl_context`` makes it with vLLM's arguments: a
TLS server context, the certificate chain, ``verify_mode`` from ``--ssl-cert-reqs`` (0 none,
1 optional, 2 required: mutual TLS), the client CA file, and the cipher string when one is
given. Handshakes made after a reload use the new files; open connections keep theirs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl

import msgspec

logger = logging.getLogger(__name__)

__all__ = ["CertificateRefresher", "TlsSettings", "server_ssl_context"]


class TlsSettings(msgspec.Struct):
    """vLLM's ``--ssl-*`` options."""

    certfile: str | None = None
    keyfile: str | None = None
    ca_certs: str | None = None
    cert_reqs: int = 0
    """``ssl.CERT_NONE`` (0), ``CERT_OPTIONAL`` (1) or ``CERT_REQUIRED`` (2)."""
    ciphers: str | None = None
    refresh: bool = False
    """Reload the certificate chain and the CA file when they change on disk."""

    @property
    def enabled(self) -> bool:
        """Whether TLS is asked for (as uvicorn: a key file or a certificate file given)."""
        return bool(self.certfile or self.keyfile)


def server_ssl_context(settings: TlsSettings) -> ssl.SSLContext:
    """The server context of ``settings`` (which must be ``enabled``); raises ``ValueError``
    for a key without a certificate or a bad ``cert_reqs``, ``OSError``/``ssl.SSLError`` for
    files that cannot be loaded."""
    if not settings.certfile:
        raise ValueError("--ssl-keyfile needs --ssl-certfile")
    try:
        verify = ssl.VerifyMode(settings.cert_reqs)
    except ValueError:
        raise ValueError(
            f"--ssl-cert-reqs must be 0 (none), 1 (optional) or 2 (required), "
            f"got {settings.cert_reqs!r}"
        ) from None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(settings.certfile, settings.keyfile)
    context.verify_mode = verify
    if settings.ca_certs:
        context.load_verify_locations(settings.ca_certs)
    if settings.ciphers:
        context.set_ciphers(settings.ciphers)
    return context


_Signature = tuple[int, int, int, int] | None


def _signature(path: str) -> _Signature:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class CertificateRefresher:
    """Reloads the certificate chain (key and certificate files) and the CA file into the
    context when they change, as vLLM's ``SSLCertRefresher`` does (it watches them with
    inotify; here they are polled every ``interval`` seconds, a ``stat`` per file). A reload
    that fails is logged and retried at the next change."""

    def __init__(
        self, context: ssl.SSLContext, settings: TlsSettings, interval: float = 1.0
    ) -> None:
        self._context = context
        self._settings = settings
        self._interval = interval
        chain = [p for p in (settings.keyfile, settings.certfile) if p]
        self._groups: list[tuple[list[str], list[_Signature]]] = []
        if settings.certfile:
            self._groups.append((chain, [_signature(p) for p in chain]))
        if settings.ca_certs:
            self._groups.append(([settings.ca_certs], [_signature(settings.ca_certs)]))
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start watching (on the running loop)."""
        if self._groups and self._task is None:
            logger.info("watching TLS files for changes: %s", [g[0] for g in self._groups])
            self._task = asyncio.get_running_loop().create_task(self._watch())

    async def stop(self) -> None:
        """Stop watching."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def check(self) -> None:
        """Reload what changed since the last check."""
        for i, (paths, before) in enumerate(self._groups):
            now = [_signature(p) for p in paths]
            if now == before:
                continue
            self._groups[i] = (paths, now)
            try:
                if paths == [self._settings.ca_certs]:
                    logger.info("reloading the TLS CA certificates")
                    self._context.load_verify_locations(paths[0])
                else:
                    logger.info("reloading the TLS certificate chain")
                    s = self._settings
                    self._context.load_cert_chain(s.certfile or "", s.keyfile)
            except (OSError, ssl.SSLError) as e:
                logger.error("reloading TLS files %s failed: %s", paths, e)

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            self.check()

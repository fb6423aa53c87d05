"""Fetching media over http(s) with aiohttp, as vLLM 0.32's ``HTTPConnection`` fetches it:
its timeouts (growing x4 per retry), retries of transient failures, redirect switch, size
limits (a body is never read past them) and error statuses. Beyond vLLM: connections to
non-global addresses are refused (unless allowed) on the address actually connected to, and
every redirect hop must stay within ``--allowed-media-domains``."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from .addresses import guarded_socket_factory, refused_addresses
from .errors import MediaError
from .policy import MIB, MediaPolicy

if TYPE_CHECKING:
    import aiohttp

USER_AGENT = "vLLM/0.32.0"
"""What vLLM 0.32 sends as ``User-Agent`` when it fetches media."""

_CHUNK = 64 * 1024
_BACKOFF = 4


class _SizeExceeded(Exception):
    """A body over the limit: vLLM's two wordings (which limit was hit decides)."""

    def __init__(self, limit: int, received: int, media_limit: bool) -> None:
        super().__init__()
        self.limit = limit
        self.received = received
        self.media_limit = media_limit

    def to_media_error(self, url: str) -> MediaError:
        """vLLM's 422 for the download limit, its 400 for the audio clip limit."""
        if self.media_limit:
            return MediaError.unprocessable(
                "Failed to fetch media from URL: Remote media download exceeds "
                f"VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB={self.limit / MIB:g} "
                f"(received at least {self.received} bytes)",
                parameter="image_url",
                value=url,
            )
        return MediaError.invalid(
            "Maximum file size exceeded: HTTP response exceeded maximum size of "
            f"{self.limit} bytes (received at least {self.received} bytes)",
            parameter="audio_filesize_mb",
            value=self.received / MIB,
        )


class _RedirectRefused(Exception):
    def __init__(self, error: MediaError) -> None:
        super().__init__(error.message)
        self.error = error


def check_domain(policy: MediaPolicy, hostname: str | None) -> None:
    """400 with vLLM's message when ``--allowed-media-domains`` is set and lacks ``hostname``."""
    allowed = policy.allowed_media_domains
    if allowed and hostname not in allowed:
        raise MediaError.bad_request(
            f"The URL must be from one of the allowed domains: {list(allowed)}. "
            f"Input URL domain: {hostname}"
        )


def _is_retryable(exc: BaseException) -> bool:
    import aiohttp

    if isinstance(exc, (TimeoutError, ConnectionError, aiohttp.ClientConnectionError)):
        return True
    return isinstance(exc, aiohttp.ClientResponseError) and exc.status >= 500


def _fetch_error(url: str, exc: BaseException) -> MediaError:
    """vLLM's answer for a failed fetch: 422 for the client's mistakes (a 4xx other than 408
    and 429, a malformed URL, a download over the size limit), else what its error handler
    makes of the exception itself (500 for timeouts, connection failures, 5xx)."""
    import aiohttp

    if isinstance(exc, MediaError):
        return exc
    if isinstance(exc, _SizeExceeded):
        return exc.to_media_error(url)
    if isinstance(exc, aiohttp.ClientResponseError):
        if exc.status not in (408, 429) and exc.status < 500:
            return MediaError.unprocessable(
                f"Failed to fetch media from URL: HTTP {exc.status} error",
                parameter="image_url",
                value=url,
            )
        return MediaError.from_exception(exc)
    if isinstance(exc, ValueError):
        return MediaError.unprocessable(
            "Failed to fetch media from URL: Invalid URL", parameter="image_url", value=url
        )
    return MediaError.from_exception(exc)


class HttpFetcher:
    """One aiohttp session (made in the running loop on first use) and the policy's rules."""

    def __init__(self, policy: MediaPolicy) -> None:
        self.policy = policy
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        import aiohttp

        if self._session is None or self._session.closed:
            guard = None if self.policy.allow_private_addresses else guarded_socket_factory
            connector = aiohttp.TCPConnector(socket_factory=guard)
            trace = aiohttp.TraceConfig()
            trace.on_request_redirect.append(self._on_redirect)
            self._session = aiohttp.ClientSession(
                connector=connector, trust_env=True, trace_configs=[trace]
            )
        return self._session

    async def _on_redirect(self, _session: Any, _ctx: Any, params: Any) -> None:
        # Every hop must satisfy the domain allowlist (vLLM checks the first URL only).
        from yarl import URL

        response = params.response
        location = response.headers.get("Location") or response.headers.get("URI")
        if location is None or not self.policy.allowed_media_domains:
            return
        try:
            target = response.url.join(URL(location))
        except ValueError:
            return  # aiohttp refuses it itself
        try:
            check_domain(self.policy, target.host)
        except MediaError as exc:
            raise _RedirectRefused(exc) from None

    async def aclose(self) -> None:
        """Close the session (and its pooled connections)."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def fetch(
        self, url: str, *, timeout: float, max_bytes: int | None, named: str | None = None
    ) -> bytes:
        """The body of ``url`` (http or https, already checked against the allowlist): retried
        as vLLM retries; MediaError with vLLM's status and message when it cannot be had
        (naming ``named``, the URL as the request spelled it, where vLLM names it)."""
        shown = url if named is None else named
        attempts = max(self.policy.fetch_max_retries, 1)
        for attempt in range(attempts):
            try:
                return await self._fetch_once(url, timeout * _BACKOFF**attempt, max_bytes)
            except (MediaError, _SizeExceeded) as exc:
                raise _fetch_error(shown, exc) from None
            except _RedirectRefused as exc:
                raise exc.error from None
            except Exception as exc:
                if not _is_retryable(exc) or attempt + 1 >= attempts:
                    if isinstance(exc, TimeoutError) and not str(exc):
                        # vLLM's answer is a 500 with TimeoutError's empty message: say what
                        # happened (a 400, as every fetch failure here).
                        waited = timeout * _BACKOFF**attempt
                        raise MediaError(
                            500,
                            "InternalServerError",
                            f"Failed to fetch media from URL: timed out after {waited:g} s",
                        ) from None
                    raise _fetch_error(shown, exc) from exc
            await asyncio.sleep(_BACKOFF**attempt)
        raise AssertionError("unreachable")

    async def _fetch_once(self, url: str, timeout: float, max_bytes: int | None) -> bytes:
        import aiohttp

        refused: list[str] = []
        token = refused_addresses.set(refused)
        try:
            async with self._client().get(
                url,
                headers={"User-Agent": USER_AGENT},
                timeout=aiohttp.ClientTimeout(total=timeout),
                allow_redirects=self.policy.allow_redirects,
            ) as response:
                response.raise_for_status()
                return await self._read(response, max_bytes)
        except aiohttp.ClientConnectorError as exc:
            if refused:
                raise MediaError.bad_request(
                    f"The URL's host {exc.host} is a private, loopback, link-local or otherwise "
                    "non-global address, which this server does not fetch media from (see "
                    "`--allow-private-media-addresses`)."
                ) from None
            raise
        finally:
            refused_addresses.reset(token)

    async def _read(self, response: aiohttp.ClientResponse, max_bytes: int | None) -> bytes:
        media_limit = self.policy.max_download_bytes
        if media_limit is not None and (max_bytes is None or media_limit <= max_bytes):
            limit: int | None = media_limit
            is_media_limit = True
        else:
            limit, is_media_limit = max_bytes, False
        if limit is None:
            return await response.read()
        length = response.content_length
        if length is not None and length > limit:
            raise _SizeExceeded(limit, length, is_media_limit)
        chunks: list[bytes] = []
        received = 0
        async for chunk in response.content.iter_chunked(_CHUNK):
            received += len(chunk)
            if received > limit:
                raise _SizeExceeded(limit, received, is_media_limit)
            chunks.append(chunk)
        return b"".join(chunks)

"""``data:`` URLs (RFC 2397) as vLLM 0.32 reads them: base64 payloads only."""

from __future__ import annotations

from .errors import MediaError


def is_data_url(url: str) -> bool:
    """Whether ``url`` is a ``data:`` URL (scheme compared case-insensitively, as vLLM)."""
    return url[:5].lower() == "data:"


def split_data_url(url: str) -> tuple[str, str]:
    """(media type, base64 payload) of a ``data:`` URL; MediaError with vLLM's status and
    message for a URL without ``,`` (400) or one that is not base64 (501)."""
    spec, comma, payload = url[5:].partition(",")
    if not comma:
        raise MediaError.bad_request(f"Invalid data URL {url[:32]!r}: missing ',' separator.")
    media_type, semicolon, encoding = spec.rpartition(";")
    if not semicolon or encoding != "base64":
        raise MediaError(501, "NotImplementedError", "Only base64 data URLs are supported for now.")
    return media_type.partition(";")[0], payload


def b64decode(payload: str) -> bytes:
    """Strict base64 decoding with vLLM's library (pybase64, ``validate=True``): the same
    payloads refused, with the same 400 message."""
    import binascii

    import pybase64

    try:
        return pybase64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise MediaError.bad_request(str(exc)) from exc

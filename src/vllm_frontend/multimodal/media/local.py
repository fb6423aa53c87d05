"""``file://`` URLs, served only from under ``--allowed-local-media-path`` as vLLM 0.32 serves
them (symlinks and ``..`` resolved before the check)."""

from __future__ import annotations

from pathlib import Path

from .errors import MediaError


def local_path(netloc: str, path: str, root: Path | None) -> Path:
    """The resolved file a ``file://`` URL names, if it lies under ``root``. MediaError as vLLM
    answers: 500 when no root is configured, 400 for a path outside it."""
    if root is None:
        raise MediaError(
            500,
            "InternalServerError",
            "Cannot load local files without `--allowed-local-media-path`.",
        )
    from urllib.request import url2pathname

    named = Path(url2pathname(netloc + path))
    resolved = named.resolve()
    if root not in resolved.parents:
        raise MediaError.bad_request(
            f"The file path {named} must be a subpath of `--allowed-local-media-path {root}`."
        )
    # The checked path is the one read: a link swapped in after the check is not followed.
    return resolved


def read_local(netloc: str, path: str, root: Path | None) -> bytes:
    """The bytes of the file (blocking; on a worker thread); a file that cannot be read is
    vLLM's 500 with the ``OSError``'s message."""
    resolved = local_path(netloc, path, root)
    try:
        return resolved.read_bytes()
    except OSError as exc:
        MediaError.raise_from(exc)

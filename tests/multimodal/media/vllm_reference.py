"""vLLM 0.32's own media loading (its ``MediaConnector``) and error responses, as the reference
for the oracle tests of this package (imports vLLM: only oracle tests use it)."""

from __future__ import annotations

import asyncio
from typing import Any

from vllm_frontend.multimodal.media import MediaError
from vllm_frontend.server.errors import classify, sanitize_message


def vllm_connector(**kwargs: Any) -> Any:
    """A vLLM ``MediaConnector`` with its own HTTP connection (kwargs as vLLM takes them)."""
    from vllm.connections import HTTPConnection
    from vllm.multimodal.media import MediaConnector

    return MediaConnector(connection=HTTPConnection(reuse_client=False), **kwargs)


def vllm_error(exc: BaseException) -> tuple[int, str, str, str | None]:
    """(status, type, message, param) of vLLM's error response for ``exc``, with our one
    deliberate difference applied: vLLM's 500 for media that cannot be fetched or read is a 400
    ``BadRequestError`` here (MediaError's docstring says why)."""
    from vllm.entrypoints.serve.exception_handling.error_response import create_error_response

    info = create_error_response(exc).error  # type: ignore[arg-type]
    if info.code == 500:
        return 400, "BadRequestError", info.message, info.param
    return info.code, info.type, info.message, info.param


def our_error(exc: MediaError) -> tuple[int, str, str, str | None]:
    """(status, type, message, param) of our error response for ``exc``."""
    status, err_type, message, param = classify(exc)
    return status, err_type, sanitize_message(message), param


def vllm_outcome(coro: Any) -> tuple[str, Any]:
    """("ok", result) or ("error", vLLM's response fields) of awaiting ``coro``."""
    try:
        return "ok", asyncio.run(coro)
    except Exception as exc:
        return "error", vllm_error(exc)

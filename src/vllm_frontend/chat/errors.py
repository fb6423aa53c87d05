"""Errors of the chat layer; every one is the client's fault and maps to HTTP 400."""

from __future__ import annotations


class ChatError(ValueError):
    """A chat request that cannot be rendered; vLLM answers it with 400 ``BadRequestError``.

    ``param`` is the request field vLLM names in the error body (``None`` when it names none).
    """

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param

    def __str__(self) -> str:
        return self.message

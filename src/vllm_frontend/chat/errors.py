"""Errors of the chat layer; every one is the client's fault and maps to HTTP 400."""

from __future__ import annotations

from typing import Any


class ChatError(ValueError):
    """A chat request that cannot be rendered; vLLM answers it with 400 ``BadRequestError``.

    ``param`` is the request field vLLM names in the error body (``None`` when it names none).
    ``str(error)`` is the error body's message, formatted like vLLM's ``VLLMValidationError``
    (``"<message> (parameter=<param>, value=<value>)"`` when those are known).
    """

    def __init__(self, message: str, param: str | None = None, value: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.value = value

    def __str__(self) -> str:
        extras = []
        if self.param is not None:
            extras.append(f"parameter={self.param}")
        if self.value is not None:
            extras.append(f"value={self.value}")
        return f"{self.message} ({', '.join(extras)})" if extras else self.message


class MediaUnsupported(ChatError):
    """A media content part for a model served without multimodal inputs (the renderer, which
    knows the served name, answers it with vLLM's "<model> is not a multimodal model")."""

    @staticmethod
    def naming(model_name: str) -> ChatError:
        """vLLM's refusal of a media part for the text-only model served as ``model_name``."""
        return ChatError(f"{model_name} is not a multimodal model")

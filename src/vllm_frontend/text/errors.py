"""Errors of the text layer; every one is the client's fault and maps to HTTP 400."""

from __future__ import annotations


class InvalidInput(ValueError):
    """One bad request value (a prompt too long, a bad truncation), worded like vLLM's
    ``VLLMValidationError``: ``"<message> (parameter=<name>[, value=<value>])"``; the error body
    names ``parameter``."""

    def __init__(self, message: str, *, parameter: str, value: object = None) -> None:
        extras = [f"parameter={parameter}"]
        if value is not None:
            extras.append(f"value={value}")
        super().__init__(f"{message} ({', '.join(extras)})")
        self.parameter = parameter
        self.value = value


class BadInput(ValueError):
    """A request the text layer refuses with a plain message; the error body names ``param``
    when given (vLLM's ``create_error_response(message, param=...)``)."""

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param

"""The one error media loading raises: the HTTP status, error type and message vLLM 0.32 answers
for the same bad input (an unreachable URL, a payload that is not an image, a path or domain the
server does not allow)."""

from __future__ import annotations

from typing import Any, NoReturn


def _with_extras(message: str, parameter: str | None, value: Any) -> str:
    extras = []
    if parameter is not None:
        extras.append(f"parameter={parameter}")
    if value is not None:
        extras.append(f"value={value}")
    return f"{message} ({', '.join(extras)})" if extras else message


class MediaError(Exception):
    """Media that cannot be loaded, with what vLLM's error response says about it: ``status``
    (400, 422, 500, 501), ``err_type`` (``BadRequestError``, ...), ``message`` (unsanitized;
    the server strips addresses and paths from it as vLLM does) and ``param``.

    One deliberate difference: vLLM answers 500 for media a request names that cannot be fetched
    or read (an unreachable host, a timeout, an upstream error status, a missing file, a
    decompression bomb, a ``file://`` URL the server does not serve). The request is at fault
    there, not the server, so such errors are 400 ``BadRequestError`` here, with vLLM's message
    (but for a fetch that timed out, which vLLM answers with an empty one); ``vllm_status``
    keeps vLLM's status. Only ``server_fault`` errors (this installation lacks
    a decoder) stay 500."""

    def __init__(
        self,
        status: int,
        err_type: str,
        message: str,
        param: str | None = None,
        *,
        server_fault: bool = False,
    ) -> None:
        super().__init__(message)
        self.vllm_status = status
        if status == 500 and not server_fault:
            status, err_type = 400, "BadRequestError"
        self.status = status
        self.err_type = err_type
        self.message = message
        self.param = param

    @classmethod
    def bad_request(cls, message: str) -> MediaError:
        """400 for a plain ``ValueError`` vLLM raises (``param`` null)."""
        return cls(400, "BadRequestError", message)

    @classmethod
    def invalid(cls, message: str, *, parameter: str, value: Any = None) -> MediaError:
        """400 for vLLM's ``VLLMValidationError(message, parameter=, value=)``."""
        return cls(400, "BadRequestError", _with_extras(message, parameter, value), parameter)

    @classmethod
    def unprocessable(cls, message: str, *, parameter: str, value: Any = None) -> MediaError:
        """422 for vLLM's ``VLLMUnprocessableEntityError(message, parameter=, value=)``."""
        return cls(
            422, "UnprocessableEntityError", _with_extras(message, parameter, value), parameter
        )

    @classmethod
    def from_exception(cls, exc: BaseException) -> MediaError:
        """What vLLM's error handler answers for an exception it did not raise on purpose:
        400 for ``ValueError``/``TypeError``/``OverflowError``, 501 for ``NotImplementedError``,
        500 ``InternalServerError`` for anything else (a 400 here, see the class); the message
        is ``str(exc)``."""
        if isinstance(exc, MediaError):
            return exc
        if isinstance(exc, (ValueError, TypeError, OverflowError)):
            return cls(400, "BadRequestError", str(exc))
        if isinstance(exc, NotImplementedError):
            return cls(501, "NotImplementedError", str(exc))
        return cls(500, "InternalServerError", str(exc))

    @classmethod
    def raise_from(cls, exc: BaseException) -> NoReturn:
        """Raise :meth:`from_exception` of ``exc`` (inside its ``except`` block), caused by
        ``exc`` unless ``exc`` is that very error (see :func:`cause_of`)."""
        try:
            raise cls.from_exception(exc) from cause_of(exc)
        finally:
            # The traceback keeps this frame: without its ``exc``, a MediaError passed in does
            # not reach itself through it (a cycle, as in :func:`cause_of`).
            del exc

    def __repr__(self) -> str:
        return f"MediaError({self.status}, {self.err_type!r}, {self.message!r})"


def cause_of(exc: BaseException) -> BaseException | None:
    """What ``raise MediaError.from_exception(exc) from ...`` names as the cause: ``exc``, or
    None when ``exc`` is already the MediaError raised (an exception that is its own cause is
    a reference cycle through its traceback: every frame it passed, the request's body among
    their locals, would stay alive until the cyclic GC's next run)."""
    return None if isinstance(exc, MediaError) else exc

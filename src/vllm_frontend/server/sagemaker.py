"""SageMaker's ``POST /invocations``: a chat completion or a completion, whichever the body is
(vLLM 0.32's serve/sagemaker/api_router.py tries ``ChatCompletionRequest`` first, then
``CompletionRequest``). ``/ping`` is ``/health`` (routes.py).

Not here: the SageMaker hosting library's LoRA adapter header and stateful-session handling
(vLLM runs ``model_hosting_container_standards``' decorators around the route).
"""

from __future__ import annotations

import json
from collections.abc import Callable

from . import errors
from .app import Handler
from .protocol import parse_chat_request, parse_completion_request
from .transport import AnyResponse, Request

__all__ = ["invocations_handler"]

_EXPECTED = "['ChatCompletionRequest', 'CompletionRequest']"


def invocations_handler(chat: Handler, completions: Handler) -> Handler:
    """``/invocations`` over the chat and completions handlers: the first whose request model
    validates the body answers it, as vLLM's TypeAdapters pick, so a body that is no chat
    request goes to completions even without a ``prompt``. A model validator's own refusal
    (vLLM's VLLMValidationError, which pydantic does not catch) is the answer, as in vLLM."""
    candidates: tuple[tuple[Callable[[bytes], object], Handler], ...] = (
        (parse_chat_request, chat),
        (parse_completion_request, completions),
    )

    async def invocations(request: Request) -> AnyResponse:
        try:
            body = json.loads(request.body)
        except json.JSONDecodeError as e:
            raise errors.HttpError(400, f"JSON decode error: {e}") from None
        except UnicodeDecodeError as e:
            raise errors.HttpError(400, f"JSON decode error: {e}") from None
        if isinstance(body, dict):
            for parse, handler in candidates:
                try:
                    parse(request.body)
                except errors.RequestValidationFailed:  # pydantic's ValidationError: next type
                    continue
                return await handler(request)
        raise errors.BadRequest(
            f"Cannot find suitable handler for request. Expected one of: {_EXPECTED}"
        )

    return invocations

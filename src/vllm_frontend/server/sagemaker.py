"""SageMaker's ``POST /invocations``: a chat completion or a completion, whichever the body is
(vLLM 0.32's serve/sagemaker/api_router.py tries ``ChatCompletionRequest`` first, then
``CompletionRequest``). ``/ping`` is ``/health`` (routes.py).

Not here: the SageMaker hosting library's LoRA adapter header and stateful-session handling
(vLLM runs ``model_hosting_container_standards``' decorators around the route).
"""

from __future__ import annotations

import json

from . import errors
from .app import Handler
from .transport import AnyResponse, Request

__all__ = ["invocations_handler"]

_EXPECTED = "['ChatCompletionRequest', 'CompletionRequest']"


def invocations_handler(chat: Handler, completions: Handler) -> Handler:
    """``/invocations`` over the chat and completions handlers: a body with ``messages`` is a
    chat completion, one with a ``prompt`` (or ``prompt_embeds``) a completion."""

    async def invocations(request: Request) -> AnyResponse:
        try:
            body = json.loads(request.body)
        except json.JSONDecodeError as e:
            raise errors.HttpError(400, f"JSON decode error: {e}") from None
        except UnicodeDecodeError as e:
            raise errors.HttpError(400, f"JSON decode error: {e}") from None
        if isinstance(body, dict):
            if "messages" in body:
                return await chat(request)
            if "prompt" in body or "prompt_embeds" in body:
                return await completions(request)
        raise errors.BadRequest(
            f"Cannot find suitable handler for request. Expected one of: {_EXPECTED}"
        )

    return invocations

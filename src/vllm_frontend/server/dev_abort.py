"""``POST /abort_requests``, which vLLM 0.32 serves with ``VLLM_SERVER_DEV_MODE=1`` for RL
trainers (vllm/entrypoints/rl/online/api_router.py): aborts in-flight requests without pausing.

``{"request_ids": [...]}`` aborts those requests by their public ids (every sample of each) and
answers how many ids were given; without ids (or with none) every in-flight request is aborted
and counted as vLLM's output processor counts them. A body that is not a JSON object is a 400;
ids that vLLM's abort cannot take (not iterable, unhashable) are its 500 with the error.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Protocol

from . import errors
from .transport import Request, Response, json_response

__all__ = ["AbortingLlm", "dev_abort_requests_handler"]

logger = logging.getLogger(__name__)


class AbortingLlm(Protocol):
    """What the route aborts through (``vllm_frontend.llm.LLM`` satisfies it)."""

    async def abort(self, request_ids: Any) -> int:
        """Abort the requests with these public ids."""
        ...

    async def abort_all(self) -> int:
        """Abort every in-flight request; vLLM's count of them."""
        ...


def dev_abort_requests_handler(llm: AbortingLlm) -> Any:
    """The route's handler over ``llm``."""

    async def abort_requests(request: Request) -> Response:
        try:
            body = json.loads(request.body)
        except json.JSONDecodeError:
            raise errors.HttpError(400, "Invalid JSON format") from None
        if not isinstance(body, dict):
            raise errors.HttpError(400, "Request body must be a JSON object")
        request_ids = body.get("request_ids")
        try:
            if request_ids:
                # vLLM's AsyncLLM.abort: a string is one id, anything else is listed; its
                # output processor looks each id up in a dict
                ids = [request_ids] if isinstance(request_ids, str) else list(request_ids)
                for request_id in ids:
                    hash(request_id)
                await llm.abort([i for i in ids if isinstance(i, str)])
                count = len(request_ids)
            else:
                count = await llm.abort_all()
        except Exception as err:
            logger.exception("Failed to abort requests")
            return json_response({"error": f"Failed to abort requests: {err}"}, 500)
        return json_response({"status": "aborted", "aborted": count})

    return abort_requests

"""``POST /v1/load_lora_adapter`` and ``POST /v1/unload_lora_adapter``, served when
``VLLM_ALLOW_RUNTIME_LORA_UPDATING`` is set, and the loading of ``--lora-modules`` at startup.

Checks, messages and statuses are those of vLLM 0.32's ``OpenAIServingModels``
(vllm/entrypoints/openai/models/serving.py): a missing name or path, a name that is a served
base model, or a name already loaded (without ``load_inplace``) is 400 ``InvalidUserInput``; the
engines' refusal is 404 when they found no adapter at the path, else 500 with their message;
unloading an unknown name is 404. Success answers 200 with a plain-text sentence.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

from vllm_frontend.llm import AdapterLoadFailed, LoraAdapters

from . import errors
from .app import Handler
from .protocol import parse_load_lora_adapter_request, parse_unload_lora_adapter_request
from .transport import Request, Response

__all__ = ["load_adapter", "lora_routes", "runtime_lora_updating"]

logger = logging.getLogger(__name__)


def runtime_lora_updating() -> bool:
    """``VLLM_ALLOW_RUNTIME_LORA_UPDATING`` as vLLM reads it ("1" or "true", any case)."""
    return os.environ.get("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "0").strip().lower() in ("1", "true")


class _InvalidUserInput(errors.BadRequest):
    err_type = "InvalidUserInput"


def _not_found_message(name: str, path: str) -> str:
    # vLLM's LoRAAdapterNotFoundError
    return f"Loading lora {name} failed: No adapter found for {path}"


async def load_adapter(
    adapters: LoraAdapters,
    served_model_names: Sequence[str],
    name: str,
    path: str,
    *,
    load_inplace: bool = False,
    is_3d_lora_weight: bool = False,
    base_model_name: str | None = None,
) -> str:
    """Check and load an adapter as vLLM's ``load_lora_adapter`` does; its success sentence,
    or an ``ApiError`` with vLLM's status and message."""
    async with adapters.lock(name):
        if not name or not path:
            raise _InvalidUserInput("Both 'lora_name' and 'lora_path' must be provided.")
        if name in served_model_names:
            raise _InvalidUserInput(
                f"The lora adapter '{name}' conflicts with a served base model."
            )
        if not load_inplace and name in adapters:
            raise _InvalidUserInput(
                f"The lora adapter '{name}' has already been loaded. If you want to load the "
                "adapter in place, set 'load_inplace' to True."
            )
        base = base_model_name if base_model_name in served_model_names else None
        try:
            await adapters.load(
                name,
                path,
                base_model_name=base,
                load_inplace=load_inplace,
                is_3d_lora_weight=is_3d_lora_weight,
            )
        except AdapterLoadFailed as e:
            not_found = _not_found_message(name, path)
            if not_found in e.message:
                raise errors.NotFound(not_found) from None
            raise errors.InternalError(e.message) from None
    return f"Success: LoRA adapter '{name}' added successfully."


def _text(message: str) -> Response:
    # vLLM answers with a bare starlette Response: the sentence, no content type
    return Response(message.encode(), content_type=None)


def lora_routes(
    adapters: LoraAdapters, served_model_names: Sequence[str]
) -> dict[tuple[str, str], Handler]:
    """The load and unload routes over ``adapters``."""

    async def load(request: Request) -> Response:
        req = parse_load_lora_adapter_request(request.body)
        message = await load_adapter(
            adapters,
            served_model_names,
            req.lora_name,
            req.lora_path,
            load_inplace=req.load_inplace,
            is_3d_lora_weight=req.is_3d_lora_weight,
        )
        return _text(message)

    async def unload(request: Request) -> Response:
        req = parse_unload_lora_adapter_request(request.body)
        name = req.lora_name
        async with adapters.lock(name):
            if not name:
                raise _InvalidUserInput(
                    "'lora_name' needs to be provided to unload a LoRA adapter."
                )
            if name not in adapters:
                raise errors.NotFound(f"The lora adapter '{name}' cannot be found.")
            adapters.remove(name)
        return _text(f"Success: LoRA adapter '{name}' removed successfully.")

    return {
        ("POST", "/v1/load_lora_adapter"): load,
        ("POST", "/v1/unload_lora_adapter"): unload,
    }

"""``GET /v1/models``: the served model names, then the loaded LoRA adapters (``parent``: their
base model, ``root``: their path), in vLLM 0.32's model-card shape
(vllm/entrypoints/openai/models/)."""

from __future__ import annotations

import time
import uuid

import msgspec

from .app import Handler, ServerSettings
from .services import Services
from .transport import Request, Response, json_response

__all__ = ["models_handler"]


class _Permission(msgspec.Struct):
    id: str
    object: str
    created: int
    allow_create_engine: bool = False
    allow_sampling: bool = True
    allow_logprobs: bool = True
    allow_search_indices: bool = False
    allow_view: bool = True
    allow_fine_tuning: bool = False
    organization: str = "*"
    group: str | None = None
    is_blocking: bool = False


class _ModelCard(msgspec.Struct):
    id: str
    object: str
    created: int
    owned_by: str
    root: str | None
    parent: str | None
    max_model_len: int | None
    permission: list[_Permission]


class _ModelList(msgspec.Struct):
    object: str
    data: list[_ModelCard]


def _permission(now: int) -> _Permission:
    # vLLM's random_uuid: 16 hex digits
    perm_id = f"modelperm-{uuid.uuid4().int & 0xFFFFFFFFFFFFFFFF:016x}"
    return _Permission(id=perm_id, object="model_permission", created=now)


def models_handler(settings: ServerSettings, services: Services) -> Handler:
    """The ``/v1/models`` handler."""

    async def models(request: Request) -> Response:
        now = int(time.time())
        cards = [
            _ModelCard(
                id=name,
                object="model",
                created=now,
                owned_by="vllm",
                root=services.model_root,
                parent=None,
                max_model_len=settings.max_model_len,
                permission=[_permission(now)],
            )
            for name in settings.served_model_names
        ]
        if services.adapters is not None:
            base = settings.served_model_names[0]
            cards.extend(
                _ModelCard(
                    id=lora.lora_name,
                    object="model",
                    created=now,
                    owned_by="vllm",
                    root=lora.lora_path,
                    parent=lora.base_model_name or base,
                    max_model_len=None,
                    permission=[_permission(now)],
                )
                for lora in services.adapters.loaded()
            )
        return json_response(_ModelList(object="list", data=cards))

    return models

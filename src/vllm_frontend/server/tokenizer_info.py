"""``GET /tokenizer_info`` (with ``--enable-tokenizer-info-endpoint``), as vLLM 0.32 answers it
(serve/tokenize/serving.py ``TokenizerInfo``): the tokenizer's ``init_kwargs`` as transformers
builds them from ``tokenizer_config.json``, made JSON (added tokens as their text), with the
tokenizer's class name, and ``--chat-template`` when one is given.

The kwargs are the config's keys in order, then what vLLM's tokenizer load adds (the truncation
side, the path, how it was found (offline or not), the backend); transformers moves
``additional_special_tokens`` to ``extra_special_tokens`` among those additions, and the class
is the name of vLLM's cached and pooled tokenizer wrapper.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from .app import Handler
from .transport import Request, Response, json_response

__all__ = ["tokenizer_info", "tokenizer_info_handler"]

_CLASS = "TokenizerPoolCachedTokenizersBackend"
"""``type(tokenizer).__name__`` of vLLM 0.32's HF tokenizer in its server: transformers 5's
fast backend, cached, then wrapped by its renderer's thread pool (``maybe_make_thread_pool``)."""


def _hub_offline() -> bool:
    # huggingface_hub's HF_HUB_OFFLINE, with which transformers loads the tokenizer
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE")
    return value is not None and value.upper() in ("1", "ON", "YES", "TRUE")


def _json(value: Any) -> Any:
    if isinstance(value, dict):
        if value.get("__type") == "AddedToken" and "content" in value:
            return value["content"]
        return {k: _json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json(v) for v in value]
    return value


def tokenizer_info(
    tokenizer_config: Mapping[str, Any], name_or_path: str, chat_template: str | None
) -> dict[str, Any]:
    """The ``/tokenizer_info`` body for a tokenizer loaded from ``name_or_path``."""
    info: dict[str, Any] = {"tokenizer_class": _CLASS}  # declared first in vLLM's response
    extra = None
    for key, value in tokenizer_config.items():
        if key in ("tokenizer_class", "vocab_file", "merges_file"):
            continue
        if key == "additional_special_tokens":
            extra = _json(value)
            continue
        if key == "added_tokens_decoder" and isinstance(value, dict):
            info[key] = {k: (v.get("content") if isinstance(v, dict) else v)
                         for k, v in value.items()}  # fmt: skip
            continue
        info[key] = _json(value)
    info["truncation_side"] = "left"
    if extra is not None:
        info["extra_special_tokens"] = extra
    info["name_or_path"] = name_or_path
    info["is_local"] = os.path.isdir(name_or_path)
    info["local_files_only"] = _hub_offline()
    info["backend"] = "tokenizers"
    if chat_template:
        info["chat_template"] = chat_template
    return info


def tokenizer_info_handler(info: Mapping[str, Any]) -> Handler:
    """The route's handler (the body is made once)."""
    body = json_response(dict(info)).body

    async def get_tokenizer_info(request: Request) -> Response:
        return Response(body)

    return get_tokenizer_info

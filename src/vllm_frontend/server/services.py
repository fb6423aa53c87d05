"""What the server's routes are served from (built once at startup and injected), and the
model-name check they share."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import msgspec

from vllm_frontend.llm import LoraAdapters
from vllm_frontend.metrics.registry import MetricsRegistry
from vllm_frontend.multimodal.media.policy import MediaPolicy
from vllm_frontend.text.request_log import RequestLog

from . import errors
from .protocol import TokenizeChatRequest

__all__ = ["ChatTokenizer", "EngineHealth", "Services", "TokenizerLike", "check_model"]


class EngineHealth(Protocol):
    """What ``/health`` asks the engine client (``EngineCoreClient`` satisfies it)."""

    @property
    def is_dead(self) -> bool:
        """True once the engines are dead or unreachable."""
        ...


class TokenizerLike(Protocol):
    """The tokenizer operations ``/tokenize`` and ``/detokenize`` need (text.Tokenizer)."""

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text``."""
        ...

    def encode_batch(
        self, texts: Sequence[str], add_special_tokens: bool = True
    ) -> list[list[int]]:
        """Token ids of several texts (releasing the GIL)."""
        ...

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """Text of ``token_ids``."""
        ...

    def convert_ids_to_tokens(self, token_ids: Sequence[int]) -> list[str | None]:
        """Vocabulary strings of ``token_ids``."""
        ...

    async def ensure_backend(self) -> None:
        """Have what :meth:`decode` needs in memory, loading it off the event loop."""
        ...


ChatTokenizer = Callable[[TokenizeChatRequest], Awaitable[list[int]] | list[int]]
"""Renders a ``/tokenize`` messages request through the chat template and tokenizes it (the
chat layer's ``chat_tokenizer``); raises the chat layer's errors for bad messages."""


class Services(msgspec.Struct):
    """What the routes are served from; built once at startup and injected."""

    engine: EngineHealth | None = None
    tokenizer: TokenizerLike | None = None
    chat_tokenizer: ChatTokenizer | None = None
    model_root: str | None = None
    """``root`` in ``/v1/models``: the model path or hub name (vLLM's ``model_path``)."""
    metrics_registry: MetricsRegistry | None = None
    """Registry rendered by ``/metrics`` (default: an empty one of the app's own)."""
    media_policy: MediaPolicy = msgspec.field(default_factory=MediaPolicy)
    """What loading the media requests name may do (paths, domains, addresses, limits)."""
    adapters: LoraAdapters | None = None
    """The loaded LoRA adapters (``/v1/models`` lists them; a request may name one)."""
    runtime_lora_updating: bool = False
    """``VLLM_ALLOW_RUNTIME_LORA_UPDATING``: ``/v1/load_lora_adapter`` and
    ``/v1/unload_lora_adapter`` are served."""
    request_log: RequestLog | None = None
    """``--enable-log-requests``: ``/tokenize`` and ``/detokenize`` log their inputs too."""


def check_model(
    served_model_names: Sequence[str],
    model: str | None,
    adapters: LoraAdapters | None = None,
    runtime_lora_updating: bool = False,
) -> None:
    """Refuse a request naming a model this server does not serve, as vLLM does (no model, or
    an empty name, means the default; a loaded LoRA adapter's name is served)."""
    # vLLM's BaseServing._check_model (serve/engine/serving.py)
    if model and model not in served_model_names:
        if adapters is not None:
            if model in adapters:
                return
            if runtime_lora_updating:
                # vLLM then asks its LoRA resolvers (none are loaded here), which takes an id
                adapters.next_id()
        names = ", ".join(served_model_names)
        raise errors.NotFound(
            f"The model `{model}` does not exist. Valid aliases: {names}.", param="model"
        )

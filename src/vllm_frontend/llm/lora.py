"""The LoRA adapters the engines have loaded for this frontend, by name.

vLLM 0.32's frontend keeps this table in ``OpenAIServingModels``
(vllm/entrypoints/openai/models/serving.py): each adapter gets an integer id from one counter
starting at 1, an adapter loaded again under its name keeps its id, and a request naming an
adapter carries its ``LoRARequest`` (engine-protocol.md §4.5). Adapters are loaded on the
engines with the ``add_lora`` utility call; unloading only forgets the name, as vLLM does (the
engines drop the weights when their LRU needs the slot).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import Any, Protocol

from vllm_frontend.engine.errors import UtilityCallError
from vllm_frontend.engine.protocol import LoRARequest

__all__ = ["AdapterLoadFailed", "LoraAdapters", "UtilityCaller"]

logger = logging.getLogger(__name__)


class UtilityCaller(Protocol):
    """What loading an adapter needs of the engine client (``EngineCoreClient`` has it)."""

    async def call_utility_all(self, method: str, *args: Any, timeout: float | None = ...) -> Any:
        """Run ``method(*args)`` on every engine; results in engine order."""
        ...


class AdapterLoadFailed(Exception):
    """The engines refused an adapter; ``message`` is the engine's failure text (vLLM's
    ``str(e)`` of the utility call's exception)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class LoraAdapters:
    """Loaded adapters by name (insertion order), their ids, and the per-name locks that make
    a load or unload of one name atomic."""

    __slots__ = ("_client", "_last_id", "_locks", "_requests")

    def __init__(self, client: UtilityCaller | None) -> None:
        """``client``: the engine client that ``add_lora`` goes to."""
        self._client = client
        self._requests: dict[str, LoRARequest] = {}
        self._last_id = 0
        self._locks: collections.defaultdict[str, asyncio.Lock] = collections.defaultdict(
            asyncio.Lock
        )

    def get(self, name: str | None) -> LoRARequest | None:
        """The adapter loaded as ``name`` (None: no such adapter)."""
        if not name:
            return None
        return self._requests.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._requests

    def loaded(self) -> list[LoRARequest]:
        """The loaded adapters, in the order they were first loaded."""
        return list(self._requests.values())

    def lock(self, name: str) -> asyncio.Lock:
        """The lock that serialises loads and unloads of ``name``."""
        return self._locks[name]

    def next_id(self) -> int:
        """Take the next adapter id (vLLM's ``lora_id_counter.inc(1)``; the first is 1)."""
        self._last_id += 1
        return self._last_id

    async def load(
        self,
        name: str,
        path: str,
        *,
        base_model_name: str | None = None,
        load_inplace: bool = False,
        is_3d_lora_weight: bool = False,
    ) -> LoRARequest:
        """Load ``path`` on every engine as ``name`` (its id kept if the name is loaded) and
        record it; raises :class:`AdapterLoadFailed` with the engine's message. The caller
        holds :meth:`lock` and has validated the request."""
        previous = self._requests.get(name)
        lora_id = previous.lora_int_id if previous is not None else self.next_id()
        request = LoRARequest(
            lora_name=name,
            lora_int_id=lora_id,
            lora_path=path,
            base_model_name=base_model_name,
            load_inplace=load_inplace,
            is_3d_lora_weight=is_3d_lora_weight,
        )
        if self._client is None:
            raise AdapterLoadFailed("LoRA adapters cannot be loaded without engines")
        try:
            await self._client.call_utility_all("add_lora", request, timeout=None)
        except UtilityCallError as e:
            raise AdapterLoadFailed(e.failure_message) from None
        except Exception as e:  # a dead engine, a timeout: vLLM reports str(e)
            raise AdapterLoadFailed(str(e)) from None
        if previous is not None and previous.lora_path == path:
            logger.warning(
                "Reloaded LoRA adapter '%s' in place from the same path '%s'. Prefix-cache "
                "blocks computed with its previous weights are not invalidated; load changed "
                "weights from a new path to avoid reusing them.",
                name,
                path,
            )
        self._requests[name] = request
        logger.info("Loaded new LoRA adapter: name '%s', path '%s'", name, path)
        return request

    def remove(self, name: str) -> None:
        """Forget ``name`` (which is loaded)."""
        del self._requests[name]
        logger.info("Removed LoRA adapter: name '%s'", name)

"""Utility calls: ``method(*args)`` run on an engine, answered on the output socket (§6)."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from vllm_frontend.engine import codec
from vllm_frontend.engine.errors import EngineDeadError, UtilityCallError, UtilityTimeoutError
from vllm_frontend.engine.liveness import Liveness
from vllm_frontend.engine.outbox import Outbox
from vllm_frontend.engine.protocol import UtilityOutput

__all__ = ["UtilityCalls"]

logger = logging.getLogger(__name__)


class _PendingCall:
    __slots__ = ("engine_index", "future", "method")

    def __init__(self, method: str, engine_index: int, future: asyncio.Future[Any]) -> None:
        self.method = method
        self.engine_index = engine_index
        self.future = future


class UtilityCalls:
    """Sends utility calls and resolves them with the replies the output router hands over."""

    __slots__ = ("_call_ids", "_calls", "_client_index", "_identities", "_liveness", "_outbox")

    def __init__(
        self,
        outbox: Outbox,
        identities: Mapping[int, bytes],
        liveness: Liveness,
        *,
        client_index: int,
    ) -> None:
        """``identities``: engine index -> its ROUTER identity, for the engines served, in
        engine order."""
        self._outbox = outbox
        self._identities = identities
        self._liveness = liveness
        self._client_index = client_index
        self._calls: dict[int, _PendingCall] = {}
        self._call_ids = itertools.count(1)

    async def call(
        self, method: str, args: Sequence[Any], engine: int | None, timeout: float | None
    ) -> Any:
        """Run ``method(*args)`` on ``engine`` (None: the first); its result, or
        UtilityCallError, UtilityTimeoutError or EngineDeadError."""
        if engine is None:
            engine = next(iter(self._identities))
        elif engine not in self._identities:
            served = list(self._identities)
            raise ValueError(f"engine {engine} is not served by this client ({served})")
        return await self._call(method, args, engine, timeout)

    async def call_all(self, method: str, args: Sequence[Any], timeout: float | None) -> list[Any]:
        """Run ``method(*args)`` on every engine concurrently; results in engine order."""
        calls = (self._call(method, args, i, timeout) for i in self._identities)
        return list(await asyncio.gather(*calls))

    async def _call(
        self, method: str, args: Sequence[Any], engine: int, timeout: float | None
    ) -> Any:
        self._liveness.raise_if_dead()
        if not isinstance(method, str) or not method:
            raise ValueError("utility method must be a non-empty string")
        call_id = next(self._call_ids)
        frames = codec.encode_utility(self._client_index, call_id, method, list(args))
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._calls[call_id] = _PendingCall(method, engine, future)
        self._outbox.send_now([self._identities[engine], *frames])
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout)
        except TimeoutError:
            raise UtilityTimeoutError(
                f"utility {method!r} on engine {engine} got no reply within {timeout:g} s"
            ) from None
        finally:
            self._calls.pop(call_id, None)

    def reply(self, engine_index: int, reply: UtilityOutput) -> None:
        """Resolve the call ``reply`` answers (replies to unknown calls are dropped)."""
        call = self._calls.get(reply.call_id)
        if call is None:
            if reply.call_id >= 0:
                logger.warning("utility reply for unknown call id %d dropped", reply.call_id)
            return
        if call.future.done():
            return
        if reply.failure_message is not None:
            call.future.set_exception(
                UtilityCallError(call.method, engine_index, reply.failure_message)
            )
        else:
            call.future.set_result(reply.result.value if reply.result is not None else None)

    def fail_all(self, error: EngineDeadError) -> None:
        """Fail every pending call with (a copy of) ``error``."""
        for call in self._calls.values():
            if not call.future.done():
                call.future.set_exception(EngineDeadError(str(error)))

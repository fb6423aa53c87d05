"""What a mock engine reports besides tokens: per-step messages, scheduler and load statistics."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from vllm_frontend.engine.protocol import (
    EngineCoreOutput,
    EngineCoreOutputs,
    FinishReason,
    PrefixCacheStats,
    SchedulerStats,
)
from vllm_frontend.mock.options import MockEngineOptions
from vllm_frontend.mock.requests import MockRequest

__all__ = ["Message", "PendingMessages", "StepReports"]

Message = tuple[int, EngineCoreOutputs]
"""``(client_index, message)``: where a message goes."""


class StepReports:
    """One engine's step messages, with the counters its statistics report between steps."""

    def __init__(self, engine_index: int, options: MockEngineOptions) -> None:
        """Report as engine ``engine_index`` with ``options``."""
        self.engine_index = engine_index
        self.options = options
        self.finished_ids: dict[int, list[str]] = {}
        """Ids finished since the last step, per client (sent when a DP coordinator runs)."""
        self.new_scheduled = 0
        self.new_scheduled_tokens = 0
        self.prefix_cache_reset = False
        self.weight_version = "default"

    def scheduled(self, request: MockRequest) -> None:
        """Count a request that has just been scheduled (prefix-cache queries)."""
        self.new_scheduled += 1
        self.new_scheduled_tokens += request.prompt_len

    def finished(self, request: MockRequest) -> None:
        """Note a request that finished or was aborted, for the next step's message."""
        self.finished_ids.setdefault(request.client_index, []).append(request.request_id)

    def messages(
        self,
        by_client: dict[int, Any],
        used_blocks: int,
        now: float,
        num_running: int,
        num_waiting: int,
    ) -> list[Message]:
        """One step's messages: each client's outputs, finished ids and the scheduler stats."""
        messages: dict[int, EngineCoreOutputs] = {
            client: EngineCoreOutputs(
                engine_index=self.engine_index,
                outputs=outs,
                timestamp=now,
                weight_version=self.weight_version,
            )
            for client, outs in by_client.items()
        }
        if self.finished_ids:
            for client, ids in self.finished_ids.items():
                msg = messages.get(client)
                if msg is None:
                    msg = messages[client] = EngineCoreOutputs(
                        engine_index=self.engine_index,
                        timestamp=now,
                        weight_version=self.weight_version,
                    )
                msg.finished_requests = ids
            self.finished_ids = {}
        if self.options.log_stats:
            # vLLM attaches the stats to the first client's message of the step.
            stats = self.scheduler_stats(used_blocks, num_running, num_waiting)
            if messages:
                next(iter(messages.values())).scheduler_stats = stats
            else:
                messages[0] = EngineCoreOutputs(
                    engine_index=self.engine_index,
                    scheduler_stats=stats,
                    timestamp=now,
                    weight_version=self.weight_version,
                )
        return list(messages.items())

    def scheduler_stats(
        self, used_blocks: int, num_running: int, num_waiting: int
    ) -> SchedulerStats:
        """A step's ``SchedulerStats``; the prefix-cache counters start again from zero."""
        prefix = PrefixCacheStats(
            reset=self.prefix_cache_reset,
            requests=self.new_scheduled,
            queries=self.new_scheduled_tokens,
        )
        self.prefix_cache_reset = False
        self.new_scheduled = self.new_scheduled_tokens = 0
        return SchedulerStats(
            num_running_reqs=num_running,
            num_waiting_reqs=num_waiting,
            kv_cache_usage=min(used_blocks / self.options.num_gpu_blocks, 1.0),
            prefix_cache_stats=prefix,
        )

    def load_stats(self, running: Iterable[MockRequest], num_waiting: int) -> SchedulerStats:
        """The request counts an engine publishes to a DP coordinator (§8.4)."""
        block = self.options.block_size
        used = 0
        num_running = 0
        for r in running:
            used += math.ceil((len(r.prompt) + r.num_output) / block)
            num_running += 1
        return SchedulerStats(
            num_running_reqs=num_running,
            num_waiting_reqs=num_waiting,
            kv_cache_usage=min(used / self.options.num_gpu_blocks, 1.0),
        )


class PendingMessages:
    """Messages an engine sends outside its steps (ERROR/ABORT finishes, utility replies)."""

    def __init__(self, engine_index: int) -> None:
        """Messages of engine ``engine_index``."""
        self.engine_index = engine_index
        self._messages: list[Message] = []

    def add(self, client_index: int, message: EngineCoreOutputs) -> None:
        """Queue ``message`` for client ``client_index``."""
        self._messages.append((client_index, message))

    def finish(
        self,
        client_index: int,
        request_id: str,
        reason: FinishReason,
        mm_cache_miss_hashes: list[str] | None = None,
    ) -> None:
        """Queue an engine-initiated finish of ``request_id`` (with the multimodal items the
        engine lacked, for a cache miss)."""
        # vLLM builds one message per batch of engine-initiated finishes, with the ids in
        # finished_requests (scheduler.py / core.py `_send_abort_outputs`).
        output = EngineCoreOutput(
            request_id, [], finish_reason=reason, mm_cache_miss_hashes=mm_cache_miss_hashes
        )
        if self._messages:
            client, last = self._messages[-1]
            if client == client_index and last.utility_output is None:
                last.outputs.append(output)
                assert last.finished_requests is not None
                last.finished_requests.append(request_id)
                return
        msg = EngineCoreOutputs(
            engine_index=self.engine_index, outputs=[output], finished_requests=[request_id]
        )
        self._messages.append((client_index, msg))

    def take(self, now: float) -> list[Message]:
        """Everything queued, in order, stamped with ``now``; the queue starts empty again."""
        pending, self._messages = self._messages, []
        for _, msg in pending:
            msg.timestamp = now
        return pending

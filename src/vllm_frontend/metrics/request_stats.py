"""Per-request timestamps and counters that the ``vllm:*`` request series are computed from."""

from __future__ import annotations

import time

__all__ = ["RequestStats"]


class RequestStats:
    """Timestamps and counters of one engine request (one sample of an ``n > 1`` request).

    A plain class with slots: its fields are written for every streamed token, which costs a
    third of what a ``msgspec.Struct``'s (checked) attribute writes do, and defining it costs
    less than a dataclass at import.
    """

    __slots__ = (
        "arrival_monotonic",
        "arrival_time",
        "engine_index",
        "finished",
        "first_token_ts",
        "last_token_ts",
        "lora_name",
        "num_cached_tokens",
        "num_generation_tokens",
        "num_preemptions",
        "queued_ts",
        "scheduled_ts",
    )

    def __init__(
        self, arrival_time: float, arrival_monotonic: float, engine_index: int = 0
    ) -> None:
        """``arrival_time``: wall-clock seconds at arrival (also sent to the engine)."""
        self.arrival_time = arrival_time
        self.arrival_monotonic = arrival_monotonic
        self.engine_index = engine_index
        self.first_token_ts = 0.0
        self.last_token_ts = 0.0
        self.queued_ts = 0.0
        self.scheduled_ts = 0.0
        self.num_generation_tokens = 0
        self.num_preemptions = 0
        self.num_cached_tokens = 0
        """Prompt tokens the engine did not compute (its ``prefill_stats.num_cached_tokens``)."""
        self.finished = False
        self.lora_name: str | None = None
        """The LoRA adapter the request runs with (``vllm:lora_requests_info``)."""

    @classmethod
    def start(cls, engine_index: int = 0) -> RequestStats:
        """Stats for a request arriving now."""
        return cls(time.time(), time.monotonic(), engine_index)

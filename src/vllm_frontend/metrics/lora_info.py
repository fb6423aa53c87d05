"""``vllm:lora_requests_info``: which LoRA adapters have requests in the engines, exported when
they serve LoRA (``--enable-lora``), as vLLM's frontend exports it (``LoRARequestStates`` in
vllm/v1/metrics/stats.py, ``PrometheusStatLogger`` in vllm/v1/metrics/loggers.py).

As there, each adapter's requests are tracked from their engine events (queued or preempted:
waiting; scheduled: running) until they finish or are aborted; every engine step's scheduler
stats then name each adapter with a tracked request in both ``waiting_lora_adapters`` and
``running_lora_adapters`` (comma-joined, first tracked first), and the gauge sample of that label
combination (with ``max_lora``) is set to the current time. Every combination ever seen stays.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

from vllm_frontend.metrics.exposition import Collector, MetricFamily

__all__ = ["LoraInfo"]

_LABELS = ("max_lora", "waiting_lora_adapters", "running_lora_adapters")


class LoraInfo(Collector):
    """The gauge, fed with the requests' events (:meth:`request_event`,
    :meth:`request_finished`) and each engine step's scheduler stats (:meth:`observe_step`)."""

    def __init__(self, max_loras: int) -> None:
        self._max_lora = str(max_loras)
        # adapter -> {request: running}; the requests are their RequestStats objects
        self._requests: dict[str, dict[Any, bool]] = {}
        self._seen: dict[tuple[str, str], float] = {}

    def request_event(self, stats: Any, running: bool) -> None:
        """A queued, scheduled (``running``) or preempted event of a request with an adapter."""
        name = stats.lora_name
        requests = self._requests.get(name)
        if requests is None:
            requests = self._requests[name] = {}
        requests[stats] = running

    def request_finished(self, stats: Any) -> None:
        """A request with an adapter finished or was aborted."""
        requests = self._requests.get(stats.lora_name)
        if requests is not None:
            requests.pop(stats, None)
            if not requests:
                del self._requests[stats.lora_name]

    def observe_step(self, waiting: Mapping[str, int], running: Mapping[str, int]) -> None:
        """A step's scheduler stats (the engine's own adapter maps, completed with the tracked
        requests' adapters as vLLM's frontend completes them)."""
        waiting_names = dict.fromkeys(waiting)
        running_names = dict.fromkeys(running)
        for name in self._requests:
            waiting_names[name] = None
            running_names[name] = None
        key = (",".join(waiting_names), ",".join(running_names))
        self._seen[key] = time.time()

    def collect(self) -> Iterator[MetricFamily]:
        """The family, one sample per combination seen (none before the first step)."""
        family = MetricFamily("vllm:lora_requests_info", "gauge", "Running stats on lora requests.")
        for (waiting, running), when in self._seen.items():
            family.add(family.name, _LABELS, (self._max_lora, waiting, running), when)
        yield family

    def describe(self) -> Iterator[MetricFamily]:
        """No up-front description (the samples are produced at collect time)."""
        return iter(())

"""``vllm:lora_requests_info``: which LoRA adapters the engines run and hold waiting, exported
when they serve LoRA (``--enable-lora``), as vLLM's ``PrometheusStatLogger`` exports it
(vllm/v1/metrics/loggers.py): one gauge sample per combination of ``max_lora`` and the
comma-joined waiting and running adapter names ever reported, set to the time it was last seen.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator

from vllm_frontend.metrics.exposition import Collector, MetricFamily

__all__ = ["LoraInfo"]

_LABELS = ("max_lora", "waiting_lora_adapters", "running_lora_adapters")


class LoraInfo(Collector):
    """The gauge, fed with each engine step's scheduler stats (:meth:`observe`)."""

    def __init__(self, max_loras: int) -> None:
        self._max_lora = str(max_loras)
        self._seen: dict[tuple[str, str], float] = {}

    def observe(self, waiting: Iterable[str], running: Iterable[str]) -> None:
        """A step's ``waiting_lora_adapters`` and ``running_lora_adapters`` (their names)."""
        self._seen[(",".join(waiting), ",".join(running))] = time.time()

    def collect(self) -> Iterator[MetricFamily]:
        """The family, one sample per combination seen (none before the first step)."""
        family = MetricFamily("vllm:lora_requests_info", "gauge", "Running stats on lora requests.")
        for (waiting, running), when in self._seen.items():
            family.add(family.name, _LABELS, (self._max_lora, waiting, running), when)
        yield family

    def describe(self) -> Iterator[MetricFamily]:
        """No up-front description (the samples are produced at collect time)."""
        return iter(())

"""``vllm:lora_requests_info``'s label combinations follow the requests' events as vLLM's
``LoRARequestStates`` and ``PrometheusStatLogger`` make them (vllm/v1/metrics/stats.py,
loggers.py): the same event sequence gives the same ``(waiting, running)`` labels per step."""

from __future__ import annotations

import pytest

from vllm_frontend.metrics import lora_info
from vllm_frontend.metrics.lora_info import LoraInfo

pytestmark = pytest.mark.oracle

# (request, adapter, event): "q" queued, "s" scheduled, "p" preempted, "f" finished; "|" a step
EVENTS = [
    ("r1", "a", "q"), "|", ("r1", "a", "s"), ("r2", "b", "q"), "|", ("r3", "a", "q"), "|",
    ("r2", "b", "s"), ("r1", "a", "f"), "|", ("r3", "a", "s"), ("r2", "b", "p"), "|",
    ("r3", "a", "f"), "|", ("r2", "b", "s"), ("r4", "a", "q"), "|", ("r2", "b", "f"),
    ("r4", "a", "f"), "|",
]  # fmt: skip


class _Stats:
    """A request's stats as the llm layer keeps them (compared by identity)."""

    def __init__(self, lora_name: str) -> None:
        self.lora_name = lora_name


def _theirs() -> list[tuple[str, str]]:
    from vllm.v1.metrics.stats import LoRARequestStates, SchedulerStats

    states = LoRARequestStates(log_stats=True)
    steps = []
    for event in EVENTS:
        if event == "|":
            stats = SchedulerStats()
            states.update_scheduler_stats(stats)
            steps.append((",".join(stats.waiting_lora_adapters),
                          ",".join(stats.running_lora_adapters)))  # fmt: skip
            continue
        req, name, kind = event
        {"q": states.request_waiting, "p": states.request_waiting,
         "s": states.request_running, "f": states.request_finished}[kind](req, name)  # fmt: skip
    return steps


def _ours(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    clock = iter(range(1, 1000))
    monkeypatch.setattr(lora_info.time, "time", lambda: float(next(clock)))
    info = LoraInfo(2)
    requests: dict[str, _Stats] = {}
    steps = []
    for event in EVENTS:
        if event == "|":
            info.observe_step({}, {})
            [family] = info.collect()
            latest = max(family.samples, key=lambda s: s.value)  # the one just set
            labels = dict(zip(latest.labelnames, latest.labelvalues, strict=True))
            steps.append((labels["waiting_lora_adapters"], labels["running_lora_adapters"]))
            continue
        req, name, kind = event
        stats = requests.setdefault(req, _Stats(name))
        if kind == "f":
            info.request_finished(stats)
        else:
            info.request_event(stats, kind == "s")
    return steps


def test_the_label_combinations_follow_vllms(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _ours(monkeypatch) == _theirs()

"""The RL weight-transfer operations' metrics (``vllm_frontend.metrics.weight_ops``) export as
vLLM 0.32's ``WeightOperationMetrics`` (vllm/entrypoints/rl/online/metrics.py) exports the same
operations: the same families, series and values, on the same page."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support.exposition import without_created_values
from vllm_frontend.metrics import weight_ops
from vllm_frontend.metrics.exposition import render
from vllm_frontend.metrics.registry import MetricsRegistry

pytestmark = pytest.mark.oracle

# (operation, seconds it takes, whether it fails)
OPERATIONS = [("init", 0.004, False), ("start", 0.02, False), ("update", 0.5, False),
              ("update", 12.0, False), ("finish", 0.1, True), ("start_draft", 700.0, False),
              ("update", 0.01, False), ("shutdown", 30.0, False)]  # fmt: skip


def _clock() -> Callable[[], float]:
    """``perf_counter`` stand-in: each operation's start, then its end."""
    times: list[float] = []
    now = 100.0
    for _, seconds, _ in OPERATIONS:
        times += [now, now + seconds]
        now += seconds + 1
    ticks: Iterator[float] = iter(times)
    return lambda: next(ticks)


def _run(record: Callable[[str], Any]) -> None:
    for operation, _, fails in OPERATIONS:
        try:
            with record(operation):
                if fails:
                    raise RuntimeError("the engine failed")
        except RuntimeError:
            pass


@pytest.mark.parametrize("created", [True, False])
def test_weight_operation_metrics_export_as_vllms(
    monkeypatch: pytest.MonkeyPatch, created_series: Callable[[bool], None], created: bool
) -> None:
    from prometheus_client import CollectorRegistry, generate_latest
    from vllm.entrypoints.rl.online import metrics as vllm_metrics

    created_series(created)
    monkeypatch.setattr(vllm_metrics, "perf_counter", _clock())
    registry = CollectorRegistry()
    _run(vllm_metrics.WeightOperationMetrics(registry).record)
    theirs = generate_latest(registry)

    monkeypatch.setattr(weight_ops, "perf_counter", _clock())
    ours = MetricsRegistry()
    _run(weight_ops.WeightOperationMetrics(ours).record)
    mine = render(ours.collect())
    assert without_created_values(mine) == without_created_values(theirs)
    assert b"vllm:rl_weight_update_operations_in_flight{operation=" in mine


def test_nothing_is_exported_before_the_first_operation() -> None:
    # vLLM creates the families with the first operation
    ours = MetricsRegistry()
    weight_ops.WeightOperationMetrics(ours)
    assert render(ours.collect()) == b""

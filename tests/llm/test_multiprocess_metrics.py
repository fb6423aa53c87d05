"""Merging API server processes' ``/metrics`` gives what one process seeing all traffic shows.

Several processes each get a random share of the same observations; a reference
``FrontendMetrics`` (plus vLLM's ``http_*`` series) gets all of them. The merge of the processes'
expositions must equal the reference's byte for byte, except the ``_created`` series, which must
hold the earliest of the processes' values. Observation values are multiples of 1/8 so that
sums are exact in any order. Engine gauges follow the process holding the engine's newest stats.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Iterator, Mapping
from types import SimpleNamespace
from typing import Any

from prometheus_client import CollectorRegistry, Counter, generate_latest

from vllm_frontend.metrics.engine_gauges import EngineGauges
from vllm_frontend.metrics.exposition import Collector, MetricFamily
from vllm_frontend.metrics.frontend import FrontendMetrics
from vllm_frontend.metrics.http_series import HttpMetrics
from vllm_frontend.metrics.merge import MetricsSnapshot, merge_expositions
from vllm_frontend.metrics.registry import MetricsRegistry, render_metrics
from vllm_frontend.metrics.request_stats import RequestStats
from vllm_frontend.metrics.vllm_families import FINISH_REASON_LABELS

MODEL = "org/tiny-model"
ENGINES = (0, 1, 2)
CREATED = re.compile(r"^(\S+_created(?:\{.*\})?) (\S+)$", re.M)


class Process:
    """One API server's series (what ``build_frontend_app`` registers)."""

    def __init__(self) -> None:
        self.registry = MetricsRegistry()
        self.metrics = FrontendMetrics(MODEL, 4096, ENGINES, self.registry)
        self.http = HttpMetrics(self.registry)

    def exposition(self) -> bytes:
        return render_metrics(self.registry)[0]


def _eighths(rng: random.Random, top: int) -> float:
    return rng.randrange(top * 8) / 8


def _feed(rng: random.Random, targets: list[Process]) -> None:
    """One random request's observations, into every process of ``targets``."""
    engine = rng.choice(ENGINES)
    arrival = 1000.0 + _eighths(rng, 100)
    stats = [RequestStats(arrival_time=arrival, arrival_monotonic=arrival, engine_index=engine)
             for _ in targets]  # fmt: skip
    prompt = rng.randrange(1, 3000)
    for p, s in zip(targets, stats, strict=True):
        p.metrics.observe_prefill(s, prompt)
    now = arrival
    for step in range(rng.randrange(0, 12)):
        now += _eighths(rng, 3)
        tokens = rng.randrange(1, 4)
        for p, s in zip(targets, stats, strict=True):
            if step == 0:
                p.metrics.observe_output(s, tokens, now=now)
            else:
                p.metrics.observe_tokens(s, tokens, now=now)
    reason = rng.choice(FINISH_REASON_LABELS)
    max_tokens = rng.choice([None, rng.randrange(1, 4096)])
    n, longest = rng.choice([1, 2, 7]), rng.randrange(0, 40)
    for p, s in zip(targets, stats, strict=True):
        p.metrics.observe_finished(s, reason, prompt, max_tokens, now=now + 0.125)
        p.metrics.observe_parent_finished(n, longest, engine)
    status = rng.choice([200, 200, 400, 500])
    handler = rng.choice(["/v1/completions", "/v1/chat/completions", "none"])
    sizes = rng.randrange(0, 5000), rng.randrange(0, 90000)
    duration = _eighths(rng, 70)
    for p in targets:
        p.http.observe("POST", handler, status, *sizes, duration)


def _without_created(text: str) -> str:
    return CREATED.sub(r"\1 <created>", text)


def _families(text: str) -> list[tuple[list[str], dict[str, float]]]:
    """Each family's comment lines and its samples (``name{labels}`` → value)."""
    out: list[tuple[list[str], dict[str, float]]] = []
    for line in _without_created(text).splitlines():
        if line.startswith("# HELP"):
            out.append(([], {}))
        if line.startswith("#"):
            out[-1][0].append(line)
        else:
            key, _, value = line.rpartition(" ")
            out[-1][1][key] = math.nan if value == "<created>" else float(value)
    return out


def _assert_same_exposition(merged: str, reference: str) -> None:
    """The same families in the same order with the same samples, but ``_created`` values, and
    ``_sum`` values up to rounding (a request's time per output token is no multiple of 1/8, and
    float sums depend on their order). Samples may come in another order: each process lists its
    own in the order it first saw them."""
    got, want = _families(merged), _families(reference)
    assert [g[0] for g in got] == [w[0] for w in want]
    for (_, g), (_, w) in zip(got, want, strict=True):
        assert sorted(g) == sorted(w)
        for key, value in g.items():
            if "_sum" in key.split("{")[0]:
                assert math.isclose(value, w[key], rel_tol=1e-12), (key, value, w[key])
            else:
                assert value == w[key] or (math.isnan(value) and math.isnan(w[key])), key


def test_merged_processes_show_what_one_process_seeing_everything_shows() -> None:
    rng = random.Random(20260517)
    processes = [Process() for _ in range(3)]
    reference = Process()
    for _ in range(400):
        _feed(rng, [rng.choice(processes), reference])

    expositions = [p.exposition() for p in processes]
    merged = merge_expositions([MetricsSnapshot(e) for e in expositions]).decode()
    _assert_same_exposition(merged, reference.exposition().decode())
    # _created: the earliest process's, per series.
    earliest: dict[str, float] = {}
    for e in expositions:
        for key, value in CREATED.findall(e.decode()):
            earliest[key] = min(float(value), earliest.get(key, float("inf")))
    assert {k: float(v) for k, v in CREATED.findall(merged)} == earliest


def test_one_process_merges_into_its_own_exposition_byte_for_byte() -> None:
    rng = random.Random(7)
    process = Process()
    for _ in range(50):
        _feed(rng, [process])
    exposition = process.exposition()
    assert merge_expositions([MetricsSnapshot(exposition)]) == exposition


class _Gauges(Collector):
    """EngineGauges' kind of output with no engine label: each process's own share."""

    def __init__(self, value: float) -> None:
        self.value = value

    def collect(self) -> Iterator[MetricFamily]:
        family = MetricFamily("vllm:lora_requests_info", "gauge", "Running stats on lora requests.")
        family.add(family.name, ("max_lora",), ("1",), self.value)
        yield family


def _stats(running: int, waiting: int, kv: float) -> Any:
    return SimpleNamespace(num_running_reqs=running, num_waiting_reqs=waiting, kv_cache_usage=kv)


def test_engine_gauges_come_from_the_process_holding_the_engines_newest_stats() -> None:
    # process → (its latest stats per engine, when the engine made them)
    seen: list[tuple[Mapping[int, Any], dict[str, float]]] = [
        ({0: _stats(4, 1, 0.5), 1: _stats(9, 9, 0.9)}, {"0": 10.0, "1": 30.0}),
        ({0: _stats(2, 0, 0.25)}, {"0": 20.0}),
        ({1: _stats(3, 3, 0.75), 0: _stats(7, 7, 0.125)}, {"1": 35.0, "0": 5.0}),
    ]
    snapshots = []
    for i, (latest, made) in enumerate(seen):
        registry = MetricsRegistry()
        registry.register(EngineGauges(MODEL, ENGINES, lambda latest=latest: latest))
        registry.register(_Gauges(i + 1))
        snapshots.append(MetricsSnapshot(render_metrics(registry)[0], made))
    merged = merge_expositions(snapshots).decode()

    # Independently: per engine, the newest stats any process holds; engine 2 never reported (0).
    expected = []
    for engine in ENGINES:
        heard = [(r[str(engine)], latest[engine]) for latest, r in seen if str(engine) in r]
        s = max(heard, key=lambda h: h[0])[1] if heard else _stats(0, 0, 0.0)
        expected.append((engine, s))
    samples = dict(re.findall(r"^(vllm:\S+) (\S+)$", merged, re.M))
    for engine, s in expected:
        labels = f'{{engine="{engine}",model_name="{MODEL}"}}'
        assert float(samples[f"vllm:num_requests_running{labels}"]) == s.num_running_reqs
        assert float(samples[f"vllm:num_requests_waiting{labels}"]) == s.num_waiting_reqs
        assert float(samples[f"vllm:kv_cache_usage_perc{labels}"]) == s.kv_cache_usage
    for name in ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc"):
        assert len(re.findall(rf"^vllm:{name}\{{", merged, re.M)) == len(ENGINES)
    assert float(samples['vllm:lora_requests_info{max_lora="1"}']) == 1 + 2 + 3


def test_label_values_with_spaces_braces_and_quotes_stay_one_series() -> None:
    values = ["a b", "x} 7", 'say "hi"\\n', "tail\\"]
    regs, reference = [CollectorRegistry() for _ in range(2)], CollectorRegistry()
    counters = [Counter("odd", "Odd labels.", ["v"], registry=r) for r in regs]
    ref = Counter("odd", "Odd labels.", ["v"], registry=reference)
    for i, v in enumerate(values):
        counters[i % 2].labels(v).inc(i + 1)
        counters[(i + 1) % 2].labels(v).inc(10)
        ref.labels(v).inc(i + 11)
    merged = merge_expositions([MetricsSnapshot(generate_latest(r)) for r in regs])
    assert _without_created(merged.decode()) == _without_created(
        generate_latest(reference).decode()
    )


def test_samples_with_timestamps_are_read_by_their_value() -> None:
    # prometheus_client writes no timestamps for these series; a collector could. The merge
    # keeps the value (summed) and drops the timestamp.
    a = b'# HELP x_total X.\n# TYPE x_total counter\nx_total{v="} 1"} 2.0 1700000000000\n'
    b = b'# HELP x_total X.\n# TYPE x_total counter\nx_total{v="} 1"} 3.0\nx_total 1.0 17\n'
    merged = merge_expositions([MetricsSnapshot(a), MetricsSnapshot(b)])
    assert merged == (
        b'# HELP x_total X.\n# TYPE x_total counter\nx_total{v="} 1"} 5.0\nx_total 1.0\n'
    )

"""/metrics parity with vLLM's Python frontend: the same ``vllm:`` families (names, types, help
texts, label names and values, bucket bounds) and, for the same requests, the same deterministic
values: token and request counters, prefix-cache queries and hits, tokens per engine step, and
every histogram's count (latencies are compared by count only).

Both servers run in front of identical fresh engines (tests/e2e/conftest.py), get the same
requests in the same order, and are compared by their deltas over those requests.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, NamedTuple

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import Frontends
from tests.e2e.test_differential import both, chat, compare, completion

pytestmark = pytest.mark.engine

# vLLM's frontend exports these in this setting and ours does not (see
# src/vllm_frontend/metrics/vllm_families.py): cache_config_info's labels are the engine's whole
# CacheConfig, most of it engine arguments and platform defaults this frontend never receives.
LEFT_OUT = {"vllm:cache_config_info"}

# Histograms whose observations are token or request counts: equal bucket by bucket.
COUNT_VALUED = {
    "vllm:request_prompt_tokens",
    "vllm:request_generation_tokens",
    "vllm:iteration_tokens_total",
    "vllm:request_max_num_generation_tokens",
    "vllm:request_params_n",
    "vllm:request_params_max_tokens",
    "vllm:request_num_preemptions",
    "vllm:request_prefill_kv_computed_tokens",
}

SampleKey = tuple[str, tuple[tuple[str, str], ...]]


class Family(NamedTuple):
    type: str
    documentation: str
    label_names: frozenset[str]
    label_values: frozenset[tuple[tuple[str, str], ...]]
    """Every sample's labels except ``le`` (and the sample name's suffix)."""
    bounds: tuple[str, ...]
    """A histogram's ``le`` values, in order."""


class Scrape(NamedTuple):
    families: dict[str, Family]
    samples: dict[SampleKey, float]
    family_of: dict[SampleKey, str]


def scrape(url: str) -> Scrape:
    """The ``vllm:`` families of one ``/metrics`` page (``_created`` series left aside)."""
    text = httpx.get(url + "/metrics", timeout=30).text
    families: dict[str, Family] = {}
    samples: dict[SampleKey, float] = {}
    family_of: dict[SampleKey, str] = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("vllm:") or family.name.endswith("_created"):
            continue
        names: set[str] = set()
        values = set()
        bounds: list[str] = []
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            labels = {k: v for k, v in sample.labels.items() if k != "le"}
            names |= labels.keys()
            values.add(tuple(sorted(labels.items())))
            if sample.name.endswith("_bucket") and sample.labels["le"] not in bounds:
                bounds.append(sample.labels["le"])
            key = (sample.name, tuple(sorted(sample.labels.items())))
            samples[key] = sample.value
            family_of[key] = family.name
        families[family.name] = Family(
            family.type, family.documentation, frozenset(names), frozenset(values), tuple(bounds)
        )
    return Scrape(families, samples, family_of)


def deterministic(page: Scrape) -> dict[SampleKey, float]:
    """The samples that depend only on the requests: counters, histogram counts, and the
    buckets and sums of count-valued histograms."""
    out = {}
    for key, value in page.samples.items():
        family = page.family_of[key]
        kind = page.families[family].type
        if kind == "counter" or key[0].endswith("_count") or family in COUNT_VALUED:
            out[key] = value
    return out


def delta(after: dict[SampleKey, float], before: dict[SampleKey, float]) -> dict[SampleKey, float]:
    return {key: value - before.get(key, 0.0) for key, value in after.items()}


def settled(
    urls: dict[str, str], before: dict[str, Scrape], varies: frozenset[str] = frozenset()
) -> tuple[dict[str, Scrape], dict[str, dict[SampleKey, float]]]:
    """Both pages, and their deterministic deltas since ``before`` (samples named in ``varies``
    left out), once they agree or 20 s have passed: the last engine messages may still be on
    their way after the responses (this synchronises on what /metrics shows)."""
    deadline = time.monotonic() + 20
    while True:
        after = {name: scrape(url) for name, url in urls.items()}
        deltas = {
            name: {
                key: value
                for key, value in delta(
                    deterministic(after[name]), deterministic(before[name])
                ).items()
                if key[0] not in varies
            }
            for name in urls
        }
        if deltas["ours"] == deltas["vllm"] or time.monotonic() > deadline:
            return after, deltas
        time.sleep(0.2)


def assert_same_families(pages: dict[str, Scrape]) -> None:
    """Same family names, types, help texts, label names and values, bucket bounds."""
    assert set(pages["ours"].families) == set(pages["vllm"].families) - LEFT_OUT
    for name, ours in pages["ours"].families.items():
        assert ours == pages["vllm"].families[name], name


def assert_same_values(deltas: dict[str, dict[SampleKey, float]]) -> None:
    differing = {
        key: (deltas["ours"].get(key), deltas["vllm"].get(key))
        for key in deltas["ours"].keys() | deltas["vllm"].keys()
        if deltas["ours"].get(key) != deltas["vllm"].get(key)
    }
    assert not differing, "ours vs vLLM:\n" + "\n".join(
        f"{k}: {v}" for k, v in sorted(differing.items())
    )


def test_metrics_families_and_values_match_vllm(
    sdk: dict[str, openai.OpenAI], frontends: Frontends
) -> None:
    urls = {"ours": frontends.ours, "vllm": frontends.vllm}
    before = {name: scrape(url) for name, url in urls.items()}
    # Every series exists from startup on both sides: compare the pages before any request too.
    assert_same_families(before)

    # One request at a time: each engine step then carries one request's tokens, so even the
    # per-step histogram is deterministic.
    model = frontends.model
    # A prompt longer than one KV block (128 tokens on the CPU engine), new to both engines:
    # the second time, its first block is a prefix-cache hit.
    long_prompt = f"{uuid.uuid4()} " + " ".join(["alpha", "beta", "gamma"] * 60)
    for _ in range(2):
        compare(sdk, completion(model, prompt=long_prompt, max_tokens=4, temperature=0))
    compare(sdk, chat(model, max_tokens=5, temperature=0, stream=True))
    middle, deltas = settled(urls, before)
    assert_same_families(middle)
    assert_same_values(deltas)

    # The requests exercised what this test is about (vLLM's own numbers, one engine).
    got = _by_name(deltas["vllm"])
    assert got["vllm:prefix_cache_hits_total"] >= 128
    assert got["vllm:prefix_cache_queries_total"] > got["vllm:prefix_cache_hits_total"]
    computed = sum(
        value
        for (name, labels), value in deltas["vllm"].items()
        if name == "vllm:prompt_tokens_by_source_total" and ("source", "local_compute") in labels
    )
    assert got["vllm:iteration_tokens_total_sum"] == computed + got["vllm:generation_tokens_total"]
    assert got["vllm:iteration_tokens_total_count"] == got["vllm:generation_tokens_total"]
    assert got["vllm:request_prefill_kv_computed_tokens_sum"] == (
        got["vllm:request_prompt_tokens_sum"] - got["vllm:prompt_tokens_cached_total"]
    )

    # n > 1 needs sampling: its text may differ, its token counts (ignore_eos) do not. Its two
    # engine requests arrive one after the other, so whether their prefills share an engine
    # step is timing: the number of steps varies (their tokens do not).
    both(sdk, completion(model, prompt="Hello world", max_tokens=3, n=2, seed=7, ignore_eos=True))
    varies = frozenset({"vllm:iteration_tokens_total_bucket", "vllm:iteration_tokens_total_count"})
    after, deltas = settled(urls, middle, varies)
    assert_same_families(after)
    assert_same_values(deltas)
    assert _by_name(deltas["vllm"])["vllm:request_params_n_sum"] == 2

    # Gauges that do not depend on timing: the sleep state.
    sleep = {
        key: value
        for key, value in after["vllm"].samples.items()
        if key[0] == "vllm:engine_sleep_state"
    }
    assert sleep == {k: v for k, v in after["ours"].samples.items() if k in sleep}


def _by_name(samples: dict[SampleKey, Any]) -> dict[str, float]:
    """Sample values summed over their labels, by sample name."""
    out: dict[str, float] = {}
    for (name, _), value in samples.items():
        out[name] = out.get(name, 0.0) + value
    return out


def _other_families(url: str) -> dict[str, tuple[str, str, frozenset[str]]]:
    """The page's families outside ``vllm:`` (process, gc, platform, HTTP): type, help, label
    names."""
    text = httpx.get(url + "/metrics", timeout=30).text
    return {
        family.name: (
            family.type,
            family.documentation,
            frozenset(k for s in family.samples for k in s.labels if k != "le"),
        )
        for family in text_string_to_metric_families(text)
        if not family.name.startswith("vllm:")
    }


def test_process_and_http_families_match_vllm(
    sdk: dict[str, openai.OpenAI], frontends: Frontends
) -> None:
    # One request through each, so that the HTTP series have samples (and label names) on both.
    compare(sdk, completion(frontends.model, prompt="Hi", max_tokens=2, temperature=0))
    ours, vllm = _other_families(frontends.ours), _other_families(frontends.vllm)
    assert ours == vllm
    assert list(ours) == list(vllm)  # in the same order (process, gc and platform ones first)
    assert {"process_resident_memory_bytes", "python_gc_objects_collected",
            "http_requests"} <= ours.keys()  # fmt: skip

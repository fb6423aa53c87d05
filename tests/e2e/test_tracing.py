"""``--otlp-traces-endpoint`` on the real engine: the same requests (a completion, a chat
completion, a token-in/token-out generate), each with a ``traceparent``,
through our frontend and vLLM's, give the same ``llm_request`` spans at the session's in-process
collector (tests/e2e/conftest.py): name, kind, scope, resource, attribute keys and values but
the timings, which must be consistent. (tests/llm/test_tracing_matches_vllm.py compares them on
recorded engine outputs, without an engine.)"""

from __future__ import annotations

import httpx
import pytest

from tests.e2e.conftest import Frontends
from tests.support.otlp_collector import ReceivedSpan

pytestmark = pytest.mark.engine

TIMING = (
    "gen_ai.latency.time_to_first_token",
    "gen_ai.latency.e2e",
    "gen_ai.latency.time_in_queue",
    "gen_ai.latency.time_in_model_prefill",
    "gen_ai.latency.time_in_model_decode",
    "gen_ai.latency.time_in_model_inference",
)
PARENT = "b7ad6b7169203331"


def _send(url: str, model: str, trace_id: str) -> None:
    headers = {
        "traceparent": f"00-{trace_id}-{PARENT}-01",
        "tracestate": "vendor=e2e",
        "X-Request-Id": "traced",
    }
    with httpx.Client(base_url=url, timeout=120, headers=headers) as client:
        completion = {"model": model, "prompt": "Hello, my name is", "max_tokens": 5,
                      "temperature": 0.0}  # fmt: skip
        r = client.post("/v1/completions", json=completion)
        assert r.status_code == 200, r.text
        chat = {"model": model, "messages": [{"role": "user", "content": "Hi!"}], "n": 2,
                "max_tokens": 6, "temperature": 0.8, "top_p": 0.9, "seed": 5,
                "stream": True}  # fmt: skip
        r = client.post("/v1/chat/completions", json=chat)
        assert r.status_code == 200, r.text
        generate = {"token_ids": [128000, 9906, 11], "stream": True,
                    "sampling_params": {"max_tokens": 4, "temperature": 0.0}}  # fmt: skip
        r = client.post("/inference/v1/generate", json=generate)
        assert r.status_code == 200, r.text


def _values(span: ReceivedSpan) -> list[tuple[str, str]]:
    """The attributes but the timings, comparable (with their types)."""
    return sorted((k, repr(v)) for k, v in span.attributes.items() if k not in TIMING)


def _check_timings(span: ReceivedSpan) -> None:
    a = span.attributes
    assert set(TIMING) <= set(a)
    assert a["gen_ai.latency.time_in_queue"] >= 0
    assert a["gen_ai.latency.time_in_model_prefill"] >= 0
    assert a["gen_ai.latency.time_in_model_decode"] >= 0
    assert 0 < a["gen_ai.latency.time_to_first_token"] <= a["gen_ai.latency.e2e"]
    assert a["gen_ai.latency.time_in_model_inference"] <= a["gen_ai.latency.e2e"]
    assert a["gen_ai.latency.time_in_model_inference"] == pytest.approx(
        a["gen_ai.latency.time_in_model_prefill"] + a["gen_ai.latency.time_in_model_decode"]
    )
    assert span.start_ns < span.end_ns
    assert (span.end_ns - span.start_ns) / 1e9 == pytest.approx(a["gen_ai.latency.e2e"], abs=0.1)


def test_request_spans_are_vllms(frontends: Frontends) -> None:
    if frontends.spans is None:
        pytest.skip("servers started elsewhere: no collector")
    trace_ids = {
        "ours": "0af7651916cd43dd8448eb211c80319c",
        "vllm": "1af7651916cd43dd8448eb211c80319c",
    }
    _send(frontends.ours, frontends.model, trace_ids["ours"])
    _send(frontends.vllm, frontends.model, trace_ids["vllm"])
    spans = {
        side: frontends.spans.wait_for(
            lambda s, t=trace_id: s.trace_id == t and s.name == "llm_request", count=4
        )
        for side, trace_id in trace_ids.items()
    }
    by_id: dict[str, dict[str, list[ReceivedSpan]]] = {}
    for side, received in spans.items():
        assert len(received) == 4, side  # one per engine request: completion, 2 samples, generate
        for span in received:
            by_id.setdefault(span.attributes["gen_ai.request.id"], {}).setdefault(side, []).append(
                span
            )
    assert sorted(by_id) == ["chatcmpl-traced", "cmpl-traced-0", "generate-tokens-traced"]
    per_process = ("vllm.process_id", "service.instance.id")
    for request_id, sides in by_id.items():
        assert len(sides["ours"]) == len(sides["vllm"]), request_id
        # The samples of one request may finish (and be exported) in either order.
        assert sorted(_values(s) for s in sides["ours"]) == sorted(
            _values(s) for s in sides["vllm"]
        )
        for mine, vllm in zip(sides["ours"], sides["vllm"], strict=True):
            assert (mine.name, mine.kind, mine.scope) == (vllm.name, vllm.kind, vllm.scope)
            assert (mine.parent_span_id, mine.trace_state) == (PARENT, "vendor=e2e")
            assert (vllm.parent_span_id, vllm.trace_state) == (PARENT, "vendor=e2e")
            assert list(mine.attributes) == list(vllm.attributes)
            assert {k: v for k, v in mine.resource.items() if k not in per_process} == {
                k: v for k, v in vllm.resource.items() if k not in per_process
            }
            _check_timings(mine)
            _check_timings(vllm)
    chat = by_id["chatcmpl-traced"]["ours"][0].attributes
    assert chat["gen_ai.request.n"] == 1 and chat["gen_ai.request.top_p"] == 0.9
    assert "gen_ai.request.temperature" not in by_id["cmpl-traced-0"]["ours"][0].attributes

"""``POST /inference/v1/generate`` and ``/inference/v1/abort_requests`` against vLLM's own server
(``--enable-scale-out`` on both sides, identical engines): the same token ids, logprobs, usage
and fields, plain and streamed, with ``n`` > 1; the same status and body for bad input; and an
in-flight stream aborted by its id ends alike, leaving nothing running in our frontend.

Streams are compared by what they say, not by how the engine steps were cut into chunks: per
choice the token ids and logprobs in order and the finishing chunk; the first chunk's
``prompt_token_ids``; the trailing usage chunk; the fields of every chunk.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Frontends

pytestmark = pytest.mark.engine

PATH = "/inference/v1/generate"
ABORT = "/inference/v1/abort_requests"
HEADERS = {"X-Request-Id": "gen-e2e"}
PROMPT = [128000, 9906, 11, 856, 836, 374]  # "<|begin_of_text|>Hello, my name is"


def _post(url: str, body: Any, **kw: Any) -> httpx.Response:
    return httpx.post(url + PATH, json=body, headers=HEADERS, timeout=120, **kw)


def _full(resp: httpx.Response) -> tuple[int, Any]:
    body = resp.json()
    if isinstance(body, dict):
        body.pop("created", None)
    return resp.status_code, body


def _events(resp: httpx.Response) -> list[Any]:
    assert resp.headers["content-type"] == "text/event-stream; charset=utf-8"
    out: list[Any] = []
    for block in resp.text.split("\n\n"):
        if not block:
            continue
        assert block.startswith("data: ")
        data = block[6:]
        out.append(data if data == "[DONE]" else json.loads(data))
    return out


def stream_summary(events: list[Any]) -> dict[str, Any]:
    """What a generate stream says, independent of how its steps were cut into chunks."""
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    choices: dict[int, dict[str, Any]] = {}
    layouts = set()
    for chunk in chunks:
        layouts.add(tuple(chunk))
        for choice in chunk.get("choices", []):
            layouts.add(tuple(choice))
            seen = choices.setdefault(choice["index"], {"token_ids": [], "logprobs": []})
            seen["token_ids"] += choice["token_ids"]
            if "text" in choice:  # output_mode "text": the deltas, joined
                seen["text"] = seen.get("text", "") + choice["text"]
            if choice["logprobs"] is not None:
                seen["logprobs"] += choice["logprobs"]["content"]
            if choice["finish_reason"] is not None:
                seen["finish"] = (choice["finish_reason"], choice["stop_reason"], chunk["usage"])
    return {
        "first": chunks[0].get("prompt_token_ids") if chunks else None,
        "choices": choices,
        "layouts": sorted(layouts),
        "trailer": chunks[-1] if chunks and not chunks[-1].get("choices") else None,
        "errors": [c for c in chunks if "error" in c],
    }


def _both(frontends: Frontends, body: Any) -> tuple[httpx.Response, httpx.Response]:
    return _post(frontends.ours, body), _post(frontends.vllm, body)


def assert_same(frontends: Frontends, body: dict[str, Any]) -> Any:
    """The two servers answer ``body`` alike; returns vLLM's answer (parsed)."""
    ours, ref = _both(frontends, body)
    if body.get("stream") and ref.status_code == 200:
        assert ours.status_code == 200, ours.text
        summary = stream_summary(_events(ref))
        assert stream_summary(_events(ours)) == summary
        return summary
    assert _full(ours) == _full(ref)
    return ref.json()


CASES: dict[str, dict[str, Any]] = {
    "greedy": {"sampling_params": {"temperature": 0, "max_tokens": 8}},
    "defaults": {"sampling_params": {"max_tokens": 5, "seed": 11}},
    "n=2 seeded": {"sampling_params": {"n": 3, "seed": 7, "max_tokens": 6}},
    "logprobs": {
        "sampling_params": {"temperature": 0, "max_tokens": 5, "logprobs": 2, "prompt_logprobs": 1}
    },
    "logprobs 0": {"sampling_params": {"temperature": 0, "max_tokens": 3, "logprobs": 0}},
    "return_token_ids": {
        "sampling_params": {"temperature": 0, "max_tokens": 4},
        "return_token_ids": True,
    },
    "stop ids": {"sampling_params": {"temperature": 0, "max_tokens": 20, "stop_token_ids": [13]}},
    "stop string": {"sampling_params": {"temperature": 0, "max_tokens": 30, "stop": [" the", "e"]}},
    "until the context ends": {
        "sampling_params": {"temperature": 0, "ignore_eos": True},
        "token_ids": [128000] + [9906] * 243,
    },
    "kv_transfer_params": {
        "sampling_params": {"temperature": 0, "max_tokens": 2},
        "kv_transfer_params": {"x": 1},
        "cache_salt": "salty",
    },
    "lora": {"sampling_params": {"temperature": 0, "max_tokens": 6}, "model": "tiny-lora"},
    # bad input
    "empty": {"sampling_params": {}, "token_ids": []},
    "negative": {"sampling_params": {}, "token_ids": [1, -2]},
    "no sampling_params": {},
    "sampling_params typed wrong": {"sampling_params": {"n": "x", "top_k": 1.5}},
    "sampling_params not a dict": {"sampling_params": [1]},
    "temperature": {"sampling_params": {"temperature": -1}},
    "max_tokens 0": {"sampling_params": {"max_tokens": 0}},
    "greedy n": {"sampling_params": {"n": 2, "temperature": 0}},
    "out of vocabulary": {"sampling_params": {"max_tokens": 2}, "token_ids": [1, 999999]},
    "prompt fills the context": {"sampling_params": {"max_tokens": 2}, "token_ids": [1] * 256},
    "prompt over the context": {"sampling_params": {}, "token_ids": [1] * 300},
    "logprobs over the limit": {"sampling_params": {"logprobs": 100}},
    "priority": {"sampling_params": {"max_tokens": 2, "temperature": 0}, "priority": 3},
    "unknown model": {"sampling_params": {}, "model": "nope"},
    "cache_salt": {"sampling_params": {}, "cache_salt": ""},
    "text": {
        "sampling_params": {"temperature": 0, "max_tokens": 12, "logprobs": 2},
        "output_mode": "text",
    },
    "text n=2, stop string": {
        "sampling_params": {"n": 2, "seed": 5, "max_tokens": 30, "stop": [" the", "e"]},
        "output_mode": "text",
        "return_token_ids": True,
    },
    "text stop string kept, special tokens": {
        "sampling_params": {
            "temperature": 0,
            "max_tokens": 30,
            "stop": ["e"],
            "logprobs": 0,
            "include_stop_str_in_output": True,
            "skip_special_tokens": False,
        },
        "output_mode": "text",
    },
    "output_mode": {"sampling_params": {}, "output_mode": "words"},
    "text without detokenize": {"sampling_params": {"detokenize": False}, "output_mode": "text"},
    "stop without detokenize": {"sampling_params": {"stop": ["x"], "detokenize": False}},
    # scoring and replay fields (the CPU engines run vLLM's V1 model runner, without trace replay)
    "prompt rows": {"sampling_params": {"max_tokens": 2, "prompt_logprob_token_ids": [[1, 2]] * 5}},
    "prompt rows too wide": {
        "sampling_params": {"max_tokens": 2, "prompt_logprob_token_ids": [list(range(21))]}
    },
    "prompt rows empty": {"sampling_params": {"prompt_logprob_token_ids": [[]]}},
    "prompt_logprob_start alone": {"sampling_params": {"max_tokens": 2, "prompt_logprob_start": 1}},
    "trace replay": {"sampling_params": {"max_tokens": 3, "trace_decode_token_ids": [9906, 11]}},
    "trace replay n=2": {"sampling_params": {"n": 2, "trace_decode_token_ids": [9906]}},
    "trace out of vocabulary": {"sampling_params": {"trace_decode_token_ids": [999999]}},
    "routed experts start": {
        "sampling_params": {"temperature": 0, "max_tokens": 3, "routed_experts_prompt_start": 6}
    },
    "routed experts start past the prompt": {
        "sampling_params": {"max_tokens": 3, "routed_experts_prompt_start": 7}
    },
}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("case", list(CASES))
def test_generate_is_vllms(frontends: Frontends, case: str, stream: bool) -> None:
    body: dict[str, Any] = {"token_ids": PROMPT, **CASES[case]}
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    assert_same(frontends, body)


def test_streamed_usage_on_every_chunk_is_vllms(frontends: Frontends) -> None:
    body = {"token_ids": PROMPT, "stream": True, "return_token_ids": True,
            "sampling_params": {"n": 2, "seed": 3, "max_tokens": 5, "logprobs": 1},
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}  # fmt: skip
    summary = assert_same(frontends, body)
    assert summary["first"] == PROMPT and len(summary["choices"]) == 2


def test_a_body_that_is_not_json_is_refused_alike(frontends: Frontends) -> None:
    for content, kind in ((b"{", "application/json"), (b"{}", "text/plain")):
        ours, ref = (
            httpx.post(url + PATH, content=content, headers={"Content-Type": kind}, timeout=60)
            for url in (frontends.ours, frontends.vllm)
        )
        assert (ours.status_code, ours.json()) == (ref.status_code, ref.json())


@pytest.mark.parametrize(
    "body", [b'{"request_ids": ["nothing-runs"]}', b'{"request_ids": "one"}', b"{}", b"{x", b"[]"]
)
def test_abort_requests_answers_as_vllm(frontends: Frontends, body: bytes) -> None:
    ours, ref = (
        httpx.post(url + ABORT, content=body, timeout=60)
        for url in (frontends.ours, frontends.vllm)
    )
    if body == b"[]":  # vLLM fails it with a 500 (a list has no .get): ours is a 400
        assert ref.status_code == 500 and ours.status_code == 400
        return
    assert ours.status_code == ref.status_code
    assert ours.content == ref.content
    assert ours.headers.get("content-type") == ref.headers.get("content-type")


def _abort_mid_stream(url: str, request_id: str) -> list[Any]:
    params = {"max_tokens": 240, "ignore_eos": True, "temperature": 0}
    body = {"token_ids": PROMPT, "stream": True, "request_id": request_id}
    body["sampling_params"] = params
    events: list[Any] = []
    aborted = threading.Event()
    with httpx.Client(timeout=120) as client, client.stream("POST", url + PATH, json=body) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line:
                continue
            data = line[6:]
            events.append(data if data == "[DONE]" else json.loads(data))
            if not aborted.is_set():
                aborted.set()
                ids = {"request_ids": [f"generate-tokens-{request_id}"]}
                assert client.post(url + ABORT, json=ids).status_code == 200
    return events


def test_an_in_flight_stream_is_aborted_by_its_id(frontends: Frontends) -> None:
    for url in (frontends.vllm, frontends.ours):
        # The tiny model can write its 240 tokens before a loaded machine delivers the abort:
        # such a run (every token, finished by length) says nothing, so it is tried again.
        for _attempt in range(3):
            events = _abort_mid_stream(url, f"abort-me-{time.monotonic_ns()}")
            assert events[-1] == "[DONE]"
            finishing = [c for c in events[:-1] for ch in c["choices"] if ch["finish_reason"]]
            reasons = [c["choices"][0]["finish_reason"] for c in finishing]
            generated = sum(len(ch["token_ids"]) for c in events[:-1] for ch in c["choices"])
            if reasons != ["length"] or generated != 240:
                break
        assert reasons == ["abort"], url
        assert 0 < generated < 240, url
    client = frontends.our_engine_client
    if client is not None:  # nothing left running in our frontend or on our engine
        deadline = time.monotonic() + 10
        while client.num_in_flight and time.monotonic() < deadline:
            time.sleep(0.05)
        assert client.num_in_flight == 0

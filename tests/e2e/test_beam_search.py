"""Beam search (``use_beam_search``) on the real engine: our frontend and vLLM's own answer the same
requests alike (choices in order, text, finish and stop reasons, token ids, logprobs, usage) and
refuse the same combinations with the same errors.

The tiny model's weights are random, so EOS is practically never among a step's candidates here
(tests/server/test_beam_search.py covers EOS against a scripted engine). Requests that ask for
logprobs use ``temperature: 0``: each beam step's logprob map starts with the engine's sampled
token, which is random otherwise.
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.conftest import Frontends
from tests.e2e.test_differential import PROMPTS, _raw, _scrape, assert_same, compare

pytestmark = pytest.mark.engine

_BEAM = {"use_beam_search": True}
_CHAT_X = [{"role": "user", "content": "Tell me a story."}]


def _beam(**kw: Any) -> dict[str, Any]:
    """SDK keyword arguments with vLLM's beam-search fields in ``extra_body``."""
    names = (
        "length_penalty",
        "ignore_eos",
        "include_stop_str_in_output",
        "return_token_ids",
        "echo",
        "prompt_logprobs",
        "return_tokens_as_token_ids",
    )
    extra = {k: kw.pop(k) for k in names if k in kw}
    kw["extra_body"] = {**_BEAM, **extra}
    return kw


def _completion(model: str, **kw: Any) -> Any:
    args = _beam(**kw)
    return lambda c: c.completions.create(model=model, **args)


def _chat(model: str, **kw: Any) -> Any:
    kw.setdefault("messages", _CHAT_X)
    args = _beam(**kw)
    return lambda c: c.chat.completions.create(model=model, **args)


def _assert_in_flight_is_zero(frontends: Frontends) -> None:
    if frontends.our_engine_client is not None:
        assert frontends.our_engine_client.num_in_flight == 0


@pytest.mark.parametrize(
    "kw",
    [
        pytest.param({"n": 1, "max_tokens": 8, "temperature": 0, "logprobs": 2}, id="n1-greedy"),
        pytest.param({"n": 3, "max_tokens": 6, "temperature": 0, "logprobs": 3,
                      "return_token_ids": True}, id="n3-logprobs"),
        pytest.param({"n": 2, "max_tokens": 5, "length_penalty": 0.5}, id="n2-lp0.5"),
        pytest.param({"n": 4, "max_tokens": 5, "length_penalty": 2.0}, id="n4-lp2"),
        pytest.param({"n": 2, "max_tokens": 7, "stop": ["a", "e", " "],
                      "include_stop_str_in_output": True}, id="stop-strings-ignored"),
        pytest.param({"n": 2, "max_tokens": 3, "echo": True}, id="echo"),
        pytest.param({"n": 2, "max_tokens": 4, "ignore_eos": True, "top_p": 0.1,
                      "presence_penalty": 1.5}, id="sampling-knobs-ignored"),
        pytest.param({"n": 3, "max_tokens": 2, "temperature": 0}, id="n3-greedy-allowed"),
        pytest.param({"n": 2, "max_tokens": 3, "temperature": 0, "logprobs": 1,
                      "prompt_logprobs": 1, "return_tokens_as_token_ids": True},
                     id="prompt-logprobs-ignored-token-ids"),
    ],
)  # fmt: skip
def test_beam_search_completion_matches_vllm(
    sdk: dict[str, openai.OpenAI], frontends: Frontends, kw: dict[str, Any]
) -> None:
    ref = compare(sdk, _completion(frontends.model, prompt=PROMPTS[1], **kw))
    assert len(ref["choices"]) == kw["n"]
    _assert_in_flight_is_zero(frontends)


def test_beam_search_over_several_prompts_matches_vllm(
    sdk: dict[str, openai.OpenAI], frontends: Frontends
) -> None:
    ref = compare(sdk, _completion(frontends.model, prompt=PROMPTS, n=2, max_tokens=4))
    assert [c["index"] for c in ref["choices"]] == list(range(6))


def test_beam_search_over_a_token_prompt_matches_vllm(
    sdk: dict[str, openai.OpenAI], frontends: Frontends
) -> None:
    compare(sdk, _completion(frontends.model, prompt=[128000, 9906, 1917], n=2, max_tokens=5,
                             temperature=0, logprobs=0))  # fmt: skip


def test_beam_search_with_max_tokens_0_returns_the_prompt_alone_as_vllm_does(
    frontends: Frontends,
) -> None:
    # vLLM's search then runs no step: one choice whatever n, empty, finish_reason "length".
    for path, body in (
        ("/v1/completions", {"prompt": PROMPTS[0], "max_tokens": 0, "n": 3}),
        ("/v1/completions", {"prompt": PROMPTS[0], "max_tokens": 0, "n": 2, "echo": True}),
        ("/v1/chat/completions", {"messages": _CHAT_X, "max_tokens": 0, "n": 2}),
        # No step is sent, so the engine's max_logprobs (20 < 2 * 11) is never checked.
        ("/v1/completions", {"prompt": PROMPTS[0], "max_tokens": 0, "n": 11}),
    ):
        body = {"model": frontends.model, **_BEAM, **body}
        (s1, ours), (s2, ref) = _raw(frontends, path, body)
        assert (s1, s2) == (200, 200), (ours, ref)
        assert_same(ours, ref)
        assert len(ref["choices"]) == 1


@pytest.mark.parametrize(
    "kw",
    [
        pytest.param({"n": 2, "max_tokens": 6, "temperature": 0, "logprobs": True,
                      "top_logprobs": 2}, id="n2-logprobs"),
        pytest.param({"n": 3, "max_tokens": 5, "length_penalty": 2.0,
                      "return_token_ids": True}, id="n3-lp2"),
        pytest.param({"n": 1, "max_completion_tokens": 4, "stop": ["e"]}, id="n1-stop-ignored"),
        pytest.param({"n": 2, "max_tokens": 3, "echo": True,
                      "messages": [*_CHAT_X, {"role": "assistant", "content": "Once"}]},
                     id="echo"),
    ],
)  # fmt: skip
def test_beam_search_chat_matches_vllm(
    sdk: dict[str, openai.OpenAI], frontends: Frontends, kw: dict[str, Any]
) -> None:
    ref = compare(sdk, _chat(frontends.model, **kw))
    assert len(ref["choices"]) == kw["n"]
    _assert_in_flight_is_zero(frontends)


@pytest.mark.parametrize(
    "kw",
    [
        pytest.param({"n": 2, "max_tokens": 5, "stream_options": {"include_usage": True}},
                     id="n2-usage"),
        pytest.param({"n": 2, "max_tokens": 4, "temperature": 0, "logprobs": True,
                      "top_logprobs": 1, "stream_options": {"include_usage": True,
                                                            "continuous_usage_stats": True}},
                     id="n2-logprobs-continuous-usage"),
        pytest.param({"n": 2, "max_tokens": 0, "stream_options": {"include_usage": True}},
                     id="max-tokens-0"),
        pytest.param({"n": 2, "max_tokens": 3, "return_token_ids": True}, id="token-ids"),
    ],
)  # fmt: skip
def test_streamed_beam_search_chat_matches_vllm(
    sdk: dict[str, openai.OpenAI], frontends: Frontends, kw: dict[str, Any]
) -> None:
    # vLLM streams a chat beam search (completions refuses to): role chunks, then each choice
    # whole in one finishing chunk once the search is over.
    ref = compare(sdk, _chat(frontends.model, stream=True, **kw))
    assert (ref[-1]["choices"] == []) == ("stream_options" in kw)
    _assert_in_flight_is_zero(frontends)


@pytest.mark.parametrize(
    "path,body",
    [
        pytest.param("/v1/completions", {"prompt": "hi", "stream": True}, id="stream"),
        pytest.param("/v1/completions", {"prompt": "hi", "stream": True, "model": "nope"},
                     id="stream-before-model-check"),
        pytest.param("/v1/completions", {"prompt": "hi", "echo": True, "logprobs": 1},
                     id="echo-with-logprobs"),
        pytest.param("/v1/completions", {"prompt": "hi", "logprobs": 1,
                                         "logprob_token_ids": [1]}, id="logprob-token-ids"),
        pytest.param("/v1/chat/completions", {"messages": _CHAT_X, "logprobs": True,
                                              "logprob_token_ids": [1]},
                     id="chat-logprob-token-ids"),
        pytest.param("/v1/completions", {"prompt": "hi", "n": 0}, id="n0"),
        pytest.param("/v1/chat/completions", {"messages": _CHAT_X, "n": 0}, id="chat-n0"),
        pytest.param("/v1/completions", {"prompt": "hi", "n": 11, "max_tokens": 2},
                     id="logprobs-2n-above-max"),
        pytest.param("/v1/chat/completions", {"messages": _CHAT_X, "n": 11, "max_tokens": 2},
                     id="chat-logprobs-2n-above-max"),
        pytest.param("/v1/completions", {"prompt": ["hi", "there"], "n": 11, "max_tokens": 2},
                     id="several-prompts-logprobs-2n-above-max"),
        pytest.param("/v1/completions", {"prompt": "hi", "temperature": -1, "max_tokens": 2},
                     id="negative-temperature"),
        pytest.param("/v1/completions", {"prompt": "hi", "temperature": -1, "max_tokens": 0},
                     id="negative-temperature-without-steps"),
        pytest.param("/v1/completions", {"prompt": "hi", "max_tokens": 100000},
                     id="max-tokens-too-large"),
    ],
)  # fmt: skip
def test_beam_search_bad_requests_get_vllms_status_and_error(
    frontends: Frontends, path: str, body: dict[str, Any]
) -> None:
    body = {"model": frontends.model, **_BEAM, **body}
    (ours_status, ours), (ref_status, ref) = _raw(frontends, path, body)
    assert ref_status >= 400
    assert (ours_status, ours) == (ref_status, ref)
    _assert_in_flight_is_zero(frontends)


def _events(url: str, body: dict[str, Any]) -> tuple[int, list[Any]]:
    r = httpx.post(url + "/v1/chat/completions", json=body, timeout=60)
    events = [e.removeprefix("data: ") for e in r.text.split("\n\n") if e]
    return r.status_code, [e if e == "[DONE]" else json.loads(e) for e in events]


def test_a_streamed_chat_beam_search_that_fails_ends_with_vllms_error_event(
    frontends: Frontends,
) -> None:
    # The step requests are checked when the search runs, inside the stream: 200, then an error
    # event (n=11 asks the engine for 22 logprobs, above its max of 20), then [DONE].
    body = {"model": frontends.model, **_BEAM, "messages": _CHAT_X, "n": 11, "max_tokens": 2,
            "stream": True}  # fmt: skip
    ours, ref = _events(frontends.ours, body), _events(frontends.vllm, body)
    assert ref[0] == 200 and ref[1][-1] == "[DONE]" and "error" in ref[1][-2]
    assert ours == ref
    _assert_in_flight_is_zero(frontends)


def test_beam_search_metrics_count_like_vllm(
    sdk: dict[str, openai.OpenAI], frontends: Frontends
) -> None:
    # Each step's one-token engine requests are requests of their own, on both sides.
    urls = (("ours", frontends.ours), ("vllm", frontends.vllm))
    before = {name: _scrape(url) for name, url in urls}
    compare(sdk, _completion(frontends.model, prompt=PROMPTS[0], n=2, max_tokens=3))
    compare(sdk, _chat(frontends.model, n=3, max_tokens=2, stream=True))
    after = {name: _scrape(url) for name, url in urls}
    deltas = {
        name: {k: v - before[name].get(k, 0.0) for k, v in after[name].items()}
        for name in ("ours", "vllm")
    }
    assert deltas["ours"] == deltas["vllm"]


def test_a_client_leaving_mid_search_aborts_every_engine_request(frontends: Frontends) -> None:
    client, engines = frontends.our_engine_client, frontends.our_engines
    if client is None or engines is None:
        pytest.skip("needs our in-process server and its engine")
    body = json.dumps({"model": frontends.model, **_BEAM, "prompt": PROMPTS[0], "n": 4,
                       "max_tokens": 200}).encode()  # fmt: skip
    host, port = frontends.ours.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                     b"\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))  # fmt: skip
        # Past the first step: several beams' requests in flight at once.
        deadline = time.monotonic() + 60
        while client.num_in_flight < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert client.num_in_flight >= 2
        # A frozen engine cannot finish them: only the server noticing the closed connection
        # can end them now.
        with engines.paused():
            sock.close()
            deadline = time.monotonic() + 30
            while client.num_in_flight and time.monotonic() < deadline:
                time.sleep(0.05)
            assert client.num_in_flight == 0
    r = httpx.post(frontends.ours + "/v1/completions", timeout=60,
                   json={"model": frontends.model, "prompt": "hi", "max_tokens": 2})  # fmt: skip
    assert r.status_code == 200
    gauges = {name: v for (name, _), v in _scrape(frontends.ours).items()
              if name in ("vllm:num_requests_running", "vllm:num_requests_waiting")}  # fmt: skip
    assert gauges == {"vllm:num_requests_running": 0, "vllm:num_requests_waiting": 0}

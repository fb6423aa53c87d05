"""What an invalid request gets on the chat and completions routes, streamed and not, from
our server and from vLLM's own, each in front of a fresh CPU engine (the shared tool-parser
stack).

vLLM refuses a request's bad values in two places: the request-level checks (the request's
validation, its rendering, the sampling parameters it builds) answer a 400 before any response
starts; the engine client's input checks (``SamplingParams.verify``: logprobs, out-of-vocabulary
ids, the structured-output grammar) run only when the generation is iterated, so a streamed
request gets a ``200`` whose only events are the error and ``[DONE]``. Compared: the status and
the whole body, byte for byte (xgrammar's messages carry a clock time, masked).
"""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from tests.support.shared_stacks import ToolServers

pytestmark = pytest.mark.engine

_CLOCK = re.compile(rb"\[\d\d:\d\d:\d\d\]")

BAD_SCHEMA = {"type": "object", "properties": {"a": {"type": "bogus"}}}
CASES: dict[str, dict[str, Any]] = {
    # engine-side: vLLM's SamplingParams.verify and its structured-output backend
    "logit-bias-out-of-vocab": {"logit_bias": {"999999": 1, "5": 1, "-3": 2}},
    "stop-token-out-of-vocab": {"stop_token_ids": [5, 99999999]},
    "allowed-token-out-of-vocab": {"allowed_token_ids": [3, 99999999]},
    "allowed-tokens-empty": {"allowed_token_ids": []},
    "too-many-logprobs": {
        "_chat": {"logprobs": True, "top_logprobs": 50},
        "_cmpl": {"logprobs": 50},
    },
    "bad-json-schema": {
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "x", "schema": BAD_SCHEMA},
        }
    },
    "bad-regex": {"structured_outputs": {"regex": "(["}},
    "bad-grammar": {"structured_outputs": {"grammar": "root ::= ("}},
    "empty-choice": {"structured_outputs": {"choice": []}},
    "thinking-budget-without-reasoning": {"thinking_token_budget": 5},
    "two-errors": {"logit_bias": {"999999": 1}, "structured_outputs": {"regex": "(["}},
    # request-level: a 400 before the stream
    "prompt-too-long": {"_prompt": "hello " * 1100},
    "max-tokens-over-context": {"max_tokens": 5000},
    "negative-temperature": {"temperature": -1},
    "min-tokens-over-max": {"min_tokens": 10, "max_tokens": 2},
    "greedy-n": {"n": 2, "temperature": 0},
    "request-and-engine-errors": {"temperature": -1, "logit_bias": {"999999": 1}},
}


def _body(route: str, model: str, case: dict[str, Any], stream: bool) -> dict[str, Any]:
    fields = {k: v for k, v in case.items() if not k.startswith("_")}
    fields.update(case.get("_chat" if route == "chat" else "_cmpl", {}))
    prompt = case.get("_prompt", "Hi")
    body: dict[str, Any] = {"model": model, "max_tokens": 3, "temperature": 0, "stream": stream}
    if route == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    body.update(fields)
    return body


def _answer(url: str, route: str, body: dict[str, Any]) -> tuple[int, str | None, bytes]:
    path = "/v1/chat/completions" if route == "chat" else "/v1/completions"
    with httpx.stream("POST", url + path, json=body, timeout=300) as response:
        content = response.read()
        return (
            response.status_code,
            response.headers.get("content-type"),
            _CLOCK.sub(b"[t]", content),
        )


@pytest.fixture(scope="module")
def model(tool_servers: ToolServers) -> str:
    """The served model name."""
    return tool_servers.served_model()


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("route", ["chat", "completions"])
@pytest.mark.parametrize("case", list(CASES))
def test_refusal_is_vllms(
    tool_servers: ToolServers, model: str, case: str, route: str, stream: bool
) -> None:
    body = _body(route, model, CASES[case], stream)
    ours = _answer(tool_servers.ours, route, body)
    ref = _answer(tool_servers.vllm, route, body)
    assert ours == ref
    if stream and ref[0] == 200:
        assert ref[2].startswith(b'data: {"error": ') and ref[2].endswith(b"data: [DONE]\n\n")
    else:
        assert ref[0] == 400

"""``vllm-frontend render``'s app answers what vLLM 0.32's ``vllm launch render`` app answers, on
the tiny Llama 3: the ``GenerateRequest`` of each chat and completion render (token ids, sampling
parameters, every field in order), the errors (status and body), and the probe routes.

The reference is vLLM's own render app, built in this process as ``vllm launch render`` builds
it (``build_app(args, ("render",))`` + ``init_render_app_state``) and called through Starlette's
test client; ours is ``build_render_app`` behind the real HTTP server. The ``X-Request-Id``
header fixes the request ids on both sides.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.oracle

NAME = "tiny-llama"
HEADERS = {"X-Request-Id": "fixed-id"}
LONG = "The quick brown fox jumps over the lazy dog. " * 40

_MESSAGES = [{"role": "user", "content": "Hello there!"}]
_CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello."},
    {"role": "user", "content": LONG},
]

CHAT_CASES: dict[str, dict[str, Any]] = {
    "plain": {"messages": _MESSAGES},
    "no model": {"messages": _MESSAGES, "model": None},
    "max_tokens": {"messages": _MESSAGES, "max_tokens": 5},
    "max_completion_tokens": {"messages": _MESSAGES, "max_completion_tokens": 7},
    "conversation": {"messages": _CONVERSATION},
    "sampling": {
        "messages": _MESSAGES,
        "temperature": 0.0,
        "top_p": 0.5,
        "top_k": 3,
        "seed": 7,
        "presence_penalty": 0.5,
        "frequency_penalty": 0.25,
        "repetition_penalty": 1.1,
        "min_tokens": 2,
        "stop": ["x", "yz"],
        "stop_token_ids": [5, 5, 6],
        "ignore_eos": True,
    },
    "stream n=2 logprobs": {
        "messages": _MESSAGES,
        "stream": True,
        "n": 2,
        "logprobs": True,
        "top_logprobs": 2,
        "stream_options": {"include_usage": True},
        "cache_salt": "salt",
        "priority": 0,
    },
    "logit bias and words": {
        "messages": _MESSAGES,
        "logit_bias": {"12": 3.5, "7": -200},
        "bad_words": ["fox"],
        "allowed_token_ids": [1, 2, 3],
        "skip_special_tokens": False,
    },
    "json schema": {
        "messages": _MESSAGES,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "s", "schema": {"type": "object"}},
        },
    },
    "structured choice": {"messages": _MESSAGES, "structured_outputs": {"choice": ["a", "b"]}},
    "no generation prompt": {
        "messages": [*_MESSAGES, {"role": "assistant", "content": "Par"}],
        "add_generation_prompt": False,
        "continue_final_message": True,
    },
    "include_reasoning false": {"messages": _MESSAGES, "include_reasoning": False},
    "vllm_xargs": {"messages": _MESSAGES, "vllm_xargs": {"a": 1}},
    "truncate": {"messages": _CONVERSATION, "truncate_prompt_tokens": 20},
    # bad input
    "unknown model": {"messages": _MESSAGES, "model": "nope"},
    "messages not a list": {"messages": "x"},
    "beam search": {"messages": _MESSAGES, "use_beam_search": True},
    "too long": {"messages": [{"role": "user", "content": LONG * 20}]},
    "max_tokens over context": {"messages": _MESSAGES, "max_tokens": 100000},
    "bad temperature": {"messages": _MESSAGES, "temperature": -1},
    "bad n with greedy": {"messages": _MESSAGES, "n": 3, "temperature": 0},
    "auto tool choice": {
        "messages": _MESSAGES,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
        "tool_choice": "auto",
    },
    "stream_options without stream": {
        "messages": _MESSAGES,
        "stream_options": {"include_usage": True},
    },
}

COMPLETION_CASES: dict[str, dict[str, Any]] = {
    "text": {"prompt": "Hello, my name is"},
    "texts": {"prompt": ["Hi", "there", LONG], "max_tokens": 3, "temperature": 0.5},
    "ids": {"prompt": [1, 2, 3], "echo": True, "logprobs": 2},
    "lists of ids": {"prompt": [[1, 2], [3]], "stream": True},
    "no special tokens": {"prompt": "Hi", "add_special_tokens": False, "max_tokens": None},
    "truncate": {"prompt": LONG, "truncate_prompt_tokens": 10},
    "sampling": {"prompt": "x", "n": 2, "seed": 1, "stop": "s", "min_p": 0.1},
    # bad input
    "unknown model": {"prompt": "Hi", "model": "nope"},
    "empty prompt": {"prompt": ""},
    "no prompt": {},
    "beam search": {"prompt": "Hi", "use_beam_search": True},
    "token out of vocabulary": {"prompt": [1, 10**7]},
    "too long": {"prompt": LONG * 20},
    "bad logprobs": {"prompt": "Hi", "logprobs": 100},
    "suffix": {"prompt": "Hi", "suffix": "x"},
}


@pytest.fixture(scope="module")
def vllm_client(vllm_render_client: Any) -> Any:
    return vllm_render_client


@pytest.fixture(scope="module")
def ours(ours_render_client: httpx.Client) -> httpx.Client:
    return ours_render_client


def _both(ours: httpx.Client, vllm_client: Any, path: str, body: dict[str, Any]) -> None:
    body = {"model": NAME, **body}
    mine = ours.post(path, json=body, headers=HEADERS)
    theirs = vllm_client.post(path, json=body, headers=HEADERS)
    assert (mine.status_code, mine.json()) == (theirs.status_code, theirs.json())
    assert list(mine.json()) == list(theirs.json())  # key order (lists: equal already)


@pytest.mark.parametrize("case", CHAT_CASES)
def test_chat_render_is_vllms(ours: httpx.Client, vllm_client: Any, case: str) -> None:
    _both(ours, vllm_client, "/v1/chat/completions/render", CHAT_CASES[case])


@pytest.mark.parametrize("case", COMPLETION_CASES)
def test_completion_render_is_vllms(ours: httpx.Client, vllm_client: Any, case: str) -> None:
    _both(ours, vllm_client, "/v1/completions/render", COMPLETION_CASES[case])


def test_request_id_from_the_body(ours: httpx.Client) -> None:
    body = {"model": NAME, "messages": _MESSAGES, "request_id": "mine"}
    assert ours.post("/v1/chat/completions/render", json=body).json()["request_id"] == (
        "chatcmpl-mine"
    )
    got = ours.post("/v1/completions/render", json={"prompt": ["a", "b"], "request_id": "r"})
    assert [r["request_id"] for r in got.json()] == ["cmpl-r-0", "cmpl-r-1"]


def test_not_json_is_refused_as_vllm(ours: httpx.Client, vllm_client: Any) -> None:
    for path in ("/v1/chat/completions/render", "/v1/completions/render"):
        mine = ours.post(path, content=b"{}", headers={"content-type": "text/plain"})
        theirs = vllm_client.post(path, content=b"{}", headers={"content-type": "text/plain"})
        assert (mine.status_code, mine.json()) == (theirs.status_code, theirs.json())


@pytest.mark.parametrize(("method", "path"), [("GET", "/health"), ("GET", "/ping"),
                                              ("POST", "/ping"), ("GET", "/version")])  # fmt: skip
def test_probes_are_vllms(ours: httpx.Client, vllm_client: Any, method: str, path: str) -> None:
    mine = ours.request(method, path)
    theirs = vllm_client.request(method, path)
    assert (mine.status_code, mine.content) == (theirs.status_code, theirs.content)


def test_models_are_vllms(ours: httpx.Client, vllm_client: Any) -> None:
    def stable(data: dict[str, Any]) -> Any:
        for model in data["data"]:
            model.pop("created")
            for permission in model["permission"]:
                permission.pop("id")
                permission.pop("created")
        return data

    mine = ours.get("/v1/models")
    theirs = vllm_client.get("/v1/models")
    assert mine.status_code == theirs.status_code == 200
    assert stable(mine.json()) == stable(theirs.json())


def test_generation_routes_are_not_served(ours: httpx.Client, vllm_client: Any) -> None:
    body = {"model": NAME, "prompt": "Hi"}
    mine = ours.post("/v1/completions", json=body)
    theirs = vllm_client.post("/v1/completions", json=body)
    assert (
        (mine.status_code, mine.json())
        == (theirs.status_code, theirs.json())
        == (
            404,
            {"detail": "Not Found"},
        )
    )

"""``vllm-frontend render``'s app answers what vLLM 0.32's ``vllm launch render`` app answers, on
the tiny Llama 3: the ``GenerateRequest`` of each chat, completion, Messages and Responses
render (token ids, sampling parameters, every field in order), the errors (status and body), and
the probe routes.

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
    "token offsets": {"messages": _CONVERSATION, "return_token_offsets": True},
    "token offsets, truncated": {
        "messages": _CONVERSATION,
        "truncate_prompt_tokens": 20,
        "return_token_offsets": True,
    },
    "token offsets, truncated on the right": {
        "messages": _CONVERSATION,
        "truncate_prompt_tokens": 20,
        "truncation_side": "right",
        "add_special_tokens": True,
        "return_token_offsets": True,
    },
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
    "token offsets": {
        "prompt": ["Hello, my name is", "café 日本 \u00e9\u0301"],
        "return_token_offsets": True,
    },
    "token offsets of ids": {"prompt": [1, 2, 3], "return_token_offsets": True},
    "token offsets, no special tokens": {
        "prompt": " spaced  text",
        "add_special_tokens": False,
        "return_token_offsets": True,
    },
    "token offsets, truncated": {
        "prompt": LONG,
        "truncate_prompt_tokens": 10,
        "return_token_offsets": True,
    },
    "token offsets, truncated on the left": {
        "prompt": LONG * 20,
        "truncate_prompt_tokens": 10,
        "truncation_side": "left",
        "return_token_offsets": True,
    },
    "token offsets, truncated on the right": {
        "prompt": LONG,
        "truncate_prompt_tokens": 10,
        "truncation_side": "right",
        "return_token_offsets": True,
    },
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


def _both(ours: httpx.Client, vllm_client: Any, path: str, body: dict[str, Any]) -> Any:
    body = {"model": NAME, **body}
    mine = ours.post(path, json=body, headers=HEADERS)
    theirs = vllm_client.post(path, json=body, headers=HEADERS)
    assert (mine.status_code, mine.json()) == (theirs.status_code, theirs.json())
    assert list(mine.json()) == list(theirs.json())  # key order (lists: equal already)
    return theirs.json()


@pytest.mark.parametrize("case", CHAT_CASES)
def test_chat_render_is_vllms(ours: httpx.Client, vllm_client: Any, case: str) -> None:
    _both(ours, vllm_client, "/v1/chat/completions/render", CHAT_CASES[case])


@pytest.mark.parametrize("case", COMPLETION_CASES)
def test_completion_render_is_vllms(ours: httpx.Client, vllm_client: Any, case: str) -> None:
    _both(ours, vllm_client, "/v1/completions/render", COMPLETION_CASES[case])


def test_token_offsets_are_there_for_text(ours: httpx.Client, vllm_client: Any) -> None:
    """The offsets compared above are spans (not None) where the prompt was text."""
    path = "/v1/completions/render"
    [text] = _both(ours, vllm_client, path, {"prompt": "Hi", "return_token_offsets": True})
    [ids] = _both(ours, vllm_client, path, {"prompt": [1, 2], "return_token_offsets": True})
    assert len(text["token_offsets"]) == len(text["token_ids"]) and ids["token_offsets"] is None
    chat = _both(ours, vllm_client, "/v1/chat/completions/render", CHAT_CASES["token offsets"])
    assert len(chat["token_offsets"]) == len(chat["token_ids"])


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


_TOOLS = [
    {
        "name": "get_weather",
        "description": "w",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]
MESSAGES_CASES: dict[str, dict[str, Any]] = {
    "plain": {"max_tokens": 10, "messages": _MESSAGES},
    "system": {"max_tokens": 10, "system": "Be terse.", "messages": _CONVERSATION[1:]},
    "system blocks": {
        "max_tokens": 10,
        "system": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}],
        "messages": _MESSAGES,
    },
    "stream": {"max_tokens": 10, "messages": _MESSAGES, "stream": True},
    "sampling": {
        "max_tokens": 10,
        "messages": _MESSAGES,
        "temperature": 0.2,
        "top_p": 0.5,
        "top_k": 3,
        "stop_sequences": ["x"],
    },
    "thinking disabled": {
        "max_tokens": 100,
        "messages": _MESSAGES,
        "thinking": {"type": "disabled"},
    },
    "cache salt and kv": {
        "max_tokens": 10,
        "messages": _MESSAGES,
        "cache_salt": "s",
        "kv_transfer_params": {"a": 1},
    },
    # bad input
    "tools without a parser": {"max_tokens": 10, "messages": _MESSAGES, "tools": _TOOLS},
    "thinking without a parser": {
        "max_tokens": 100,
        "messages": _MESSAGES,
        "thinking": {"type": "enabled", "budget_tokens": 50},
    },
    "unknown model": {"model": "nope", "max_tokens": 10, "messages": _MESSAGES},
    "no max_tokens": {"messages": _MESSAGES},
    "messages not a list": {"max_tokens": 10, "messages": "x"},
    "too long": {"max_tokens": 10, "messages": [{"role": "user", "content": LONG * 20}]},
    "max_tokens over context": {"max_tokens": 100000, "messages": _MESSAGES},
}

_RESPONSE_TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]
RESPONSES_CASES: dict[str, dict[str, Any]] = {
    "text": {"input": "hi"},
    "instructions": {"input": "hi", "instructions": "Be terse."},
    "items": {
        "input": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "yo"},
            {"role": "user", "content": [{"type": "input_text", "text": "more"}]},
        ]
    },
    "sampling": {"input": "hi", "max_output_tokens": 7, "temperature": 0.1, "top_p": 0.3},
    "stream": {"input": "hi", "stream": True},
    "tools": {"input": "hi", "tools": _RESPONSE_TOOLS},
    "tool choice required": {"input": "hi", "tools": _RESPONSE_TOOLS, "tool_choice": "required"},
    "function call items": {
        "input": [
            {"role": "user", "content": "hi"},
            {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        ],
        "tools": _RESPONSE_TOOLS,
    },
    "request id": {"input": "hi", "request_id": "mine"},
    "kv, salt, priority": {
        "input": "hi",
        "kv_transfer_params": {"a": 1},
        "cache_salt": "s",
        "priority": 0,
    },
    "json format": {
        "input": "hi",
        "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}},
    },
    "truncation disabled": {"input": "hi", "truncation": "disabled"},
    # bad input
    "previous response": {"input": "hi", "previous_response_id": "resp_1"},
    "unknown model": {"input": "hi", "model": "nope"},
    "input not valid": {"input": 5},
    "too long": {"input": LONG * 20},
}


@pytest.mark.parametrize("case", MESSAGES_CASES)
def test_messages_render_is_vllms(ours: httpx.Client, vllm_client: Any, case: str) -> None:
    _both(ours, vllm_client, "/v1/messages/render", MESSAGES_CASES[case])


@pytest.mark.parametrize("case", RESPONSES_CASES)
def test_responses_render_is_vllms(ours: httpx.Client, vllm_client: Any, case: str) -> None:
    body = {"model": NAME, **RESPONSES_CASES[case]}
    mine = ours.post("/v1/responses/render", json=body, headers=HEADERS)
    theirs = vllm_client.post("/v1/responses/render", json=body, headers=HEADERS)
    a, b = mine.json(), theirs.json()
    if mine.status_code == 200 and "request_id" not in body:
        # "resp_" and 16 random hex digits on both sides
        assert a["request_id"][:5] == b["request_id"][:5] == "resp_"
        assert len(a["request_id"]) == len(b["request_id"])
        a["request_id"] = b["request_id"] = None
    assert (mine.status_code, a) == (theirs.status_code, b)
    assert list(a) == list(b)

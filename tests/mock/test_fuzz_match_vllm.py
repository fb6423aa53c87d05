"""A generated differential sweep: vLLM 0.32's own server and ours, each in front of the mock
engine playing the same scripted tokens (the stack of ``test_clients_match_vllm``), get the same
request bodies drawn by hypothesis from each API's schema (``fuzz_requests``): valid values,
boundaries, wrong types, nulls, unknown fields, nested messages and parts, streamed or not.

Compared is what a client sees: the status, the kept headers, the JSON error body (type, param,
code and message) or the response (ids and timestamps dropped; the scripted tokens make text and
usage deterministic) and, streamed, every SSE event down to ``[DONE]``. Where vLLM itself fails
with a 5xx, ours must answer a 4xx instead (:data:`VLLM_FAILS`).

The examples found while building the sweep are explicit cases below (:data:`FOUND`), each the
smallest body that showed the difference that was fixed.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from tests.mock.fuzz_requests import APIS, request
from tests.mock.test_clients_match_vllm import (
    Stack,
    _coalesced,
    exchange,
    post,
    responses,
)
from tests.support.tiny_model import tiny_model_dir

pytestmark = pytest.mark.engine

MODEL = str(tiny_model_dir())


@pytest.fixture
def stack(mock_clients_stack: Stack) -> Stack:
    """Both servers on healthy mock engines: the stack of ``test_clients_match_vllm`` (the
    session's ``mock_clients_stack``), which that module's tests used first."""
    return mock_clients_stack


def _choice(event: Any) -> int:
    choices = event.get("choices") if isinstance(event, dict) else None
    return int(choices[0].get("index", 0)) if choices else 1 << 30


def _stream(events: list[Any]) -> list[Any]:
    """A stream as its events, told apart from timing: each choice's events in order (the
    choices of ``n`` > 1 interleave as the engine's steps come), an ``event:`` line that names
    the next data event's type dropped, and runs of text deltas joined (how tokens split between
    events depends on timing)."""
    kept = [
        e
        for i, e in enumerate(events)
        if not (
            isinstance(e, str)
            and e.startswith("event: ")
            and i + 1 < len(events)
            and isinstance(events[i + 1], dict)
            and events[i + 1].get("type") == e.removeprefix("event: ")
        )
    ]
    return _coalesced(sorted(kept, key=_choice))


def _seen(port: int, data: bytes) -> list[tuple[int, dict[str, str], Any]]:
    return [
        (status, headers, _stream(body) if isinstance(body, list) else body)
        for status, headers, body in responses(exchange(port, data, 30))
    ]


def _answers(stack: Stack, path: str, body: Any) -> tuple[Any, Any]:
    data = post(path, body)
    return _seen(stack.ports["vllm"], data), _seen(stack.ports["ours"], data)


def _message(answer: Any) -> str:
    return str(answer.get("error", {}).get("message", "")) if isinstance(answer, dict) else ""


def _known(path: str, status: int, answer: Any, my_answer: Any) -> bool:
    """Whether vLLM's 400 is one whose text we know ours does not reproduce (then only a 4xx is
    asked of ours):

    - the Responses API's ``input`` items and ``tools``, typed in vLLM as the OpenAI SDK's
      unions of some twenty models each, whose every branch pydantic reports; ours checks the
      items where it reads them (after the model check) and reports the branch a client meant;
    - a chat message whose list content vLLM's smart union leaves to OpenAI's lazy branch where
      that is not certain from the message alone (``server/message_schema.py``): vLLM reports the
      part OpenAI's part types refuse while rendering, ours the chat layer's error (or the
      reverse)."""
    if status != 400:
        return False
    message = _message(answer)
    if path == "/v1/responses" and re.search(r"'body\.(input|tools)\.\d+\.", message):
        return True
    lazy = "validation error for ValidatorIterator"
    return lazy in message or lazy in _message(my_answer)


def _failed(status: int, answer: Any) -> bool:
    """Whether vLLM failed: a 5xx, or a stream it cut off."""
    return status >= 500 or (isinstance(answer, list) and "<cut off>" in answer)


def assert_like_vllm(stack: Stack, path: str, body: Any) -> tuple[int, Any]:
    """Send ``body`` to both; ours answers as vLLM does, or with a 4xx where vLLM fails."""
    theirs, mine = _answers(stack, path, body)
    [(status, _, answer)] = theirs
    [(my_status, _, my_answer)] = mine
    if _failed(status, answer) or _known(path, status, answer, my_answer):
        assert 400 <= my_status < 500, (body, theirs, mine)
        return my_status, my_answer
    assert mine == theirs, body
    return status, answer


# -- the examples the sweep found, each fixed ------------------------------------------------------

IMAGE_URL = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
FOUND: list[tuple[str, dict[str, Any]]] = [
    # pydantic reads a fraction (or a number beyond 64 bits) as the wrong type for a boolean,
    # an integer other than 0/1 as one it cannot interpret
    ("/v1/completions", {"prompt": "hi", "max_tokens": 2, "echo": 1.5}),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 2, "ignore_eos": 1e20}),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 2, "ignore_eos": 2.0}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "echo": 2.5}),
    ("/tokenize", {"prompt": "hi", "return_token_strs": 1.5}),
    # truncating the prompt to no token leaves none, BOS included
    ("/v1/completions", {"prompt": "hi", "max_tokens": 2, "truncate_prompt_tokens": 0}),
    # the default generation prompt with continue_final_message: transformers' refusal
    (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "hi"}], "continue_final_message": True},
    ),
    # n is range-checked before anything needs it to fit 64 bits
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "n": -(2**63) - 1}),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 2, "n": 2**64}),
    ("/v1/completions", {"prompt": "hi", "max_tokens": -(2**63) - 1}),
    # /tokenize's messages form refuses both prompts before the union picks a form
    ("/tokenize", {"prompt": "hi", "continue_final_message": 1, "add_generation_prompt": "x"}),
    ("/tokenize", {"prompt": 5, "continue_final_message": True, "add_generation_prompt": True}),
    # /tokenize's fields in vLLM's order (the model's error before the messages')
    ("/tokenize", {"prompt": "hi", "model": 5, "add_generation_prompt": ["x"]}),
    # the Responses API takes tools without a tool parser
    (
        "/v1/responses",
        {
            "input": "hi",
            "max_output_tokens": 2,
            "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
        },
    ),
    # the Responses API's text format and reasoning are the SDK's models
    ("/v1/responses", {"input": "hi", "text": {"format": {"type": "json_schema"}}}),
    ("/v1/responses", {"input": "hi", "text": {"format": "x", "verbosity": "x"}}),
    ("/v1/responses", {"input": "hi", "text": "x"}),
    ("/v1/responses", {"input": "hi", "reasoning": "x"}),
    ("/v1/responses", {"input": "hi", "reasoning": {"effort": "bogus", "summary": 5}}),
    # ... and its top_logprobs has no bound (the sampling checks judge it)
    ("/v1/responses", {"input": "hi", "max_output_tokens": 2, "top_logprobs": -1}),
    ("/v1/responses", {"input": "hi", "max_output_tokens": 2, "top_logprobs": None}),
    # ... and its tool choice the SDK's union (a non-object fails every member)
    ("/v1/responses", {"input": "hi", "tool_choice": 5}),
    ("/v1/responses", {"input": "hi", "tool_choice": "bogus", "top_p": "x"}),
    # a media part for a text-only model: vLLM's multimodal registry refuses it, naming the model
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [IMAGE_URL]}]}),
    ("/v1/messages", {"messages": [{"role": "user", "content": [IMAGE]}], "max_tokens": 2}),
    ("/tokenize", {"messages": [{"role": "user", "content": [IMAGE_URL]}]}),
    # ... and a null truncation or background fails building the response
    ("/v1/responses", {"input": "hi", "max_output_tokens": 2, "truncation": None}),
    ("/v1/responses", {"input": "hi", "background": None, "truncation": None}),
    # ... after vLLM's refusals of the prepared request
    ("/v1/responses", {"input": "hi", "max_output_tokens": 2, "top_p": 0, "truncation": None}),
    # a chat body's messages are iterated before any field is validated
    ("/v1/chat/completions", {"messages": None, "max_tokens": 2, "echo": ["x"]}),
    ("/v1/chat/completions", {"messages": 5}),
    # min_tokens is range-checked before anything needs it to fit 64 bits
    (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "hi"}], "min_tokens": -(2**63) - 1},
    ),
    # request_id is a string (vLLM's default a fresh id), not null
    ("/v1/completions", {"prompt": "hi", "max_tokens": 2, "request_id": None}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "request_id": None}),
    ("/v1/responses", {"input": "hi", "request_id": None}),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 2, "top_k": -(2**63) - 1}),
    # a logit_bias key that is not a token id: vLLM names the parameter and the keys
    ("/v1/completions", {"prompt": "hi", "max_tokens": 2, "logit_bias": {"x": 1}}),
    # a tool of no type the SDK's union knows is refused (the report abbreviated: see _known)
    ("/v1/responses", {"input": "hi", "max_output_tokens": 2, "tools": [{"type": "bogus"}]}),
    ("/v1/responses", {"input": "hi", "max_output_tokens": 2, "tools": [{}], "stream": True}),
    # /tokenize's messages form with continue_final_message and the default generation prompt
    ("/tokenize", {"prompt": "hi", "messages": [], "continue_final_message": True}),
    ("/tokenize", {"messages": [{"role": "user", "content": "hi"}], "continue_final_message": 1}),
    # a Responses input message keeps only the SDK message's keys
    (
        "/v1/responses",
        {
            "input": [{"role": "user", "content": "hi", "reasoning": 5, "name": 5}],
            "max_output_tokens": 2,
        },
    ),
    # ... and an assistant input message needs its content (no SDK message takes null)
    (
        "/v1/responses",
        {"input": [{"role": "assistant", "content": None}, {"role": "user", "content": "hi"}]},
    ),
    # pydantic reads an integer from a string of digits only (msgspec's lax mode takes "1e3"),
    # and from an integral float only within 64 bits (1e19 is too large even where unbounded)
    ("/v1/completions", {"prompt": "hi", "max_tokens": "1e3"}),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 2, "seed": "1E1"}),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 2, "stop_token_ids": [1, "1e3"]}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "n": "1e0"}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "top_k": 1e300}),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 2, "n": 9.3e18}),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 2, "seed": -9.223372036854775808e18}),
    # the refused bad words and extra args name what vLLM's VLLMValidationError names
    ("/v1/completions", {"prompt": "hi", "max_tokens": 2, "bad_words": ["x", ""]}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "bad_words": [" "]}),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 2, "vllm_xargs": {"a": [2**64]}}),
    # a completions body's mm_processor_kwargs and media_io_kwargs are extra keys vLLM keeps (of
    # any type) and refuses when true, after the suffix checks
    ("/v1/completions", {"prompt": "hi", "max_tokens": 2, "mm_processor_kwargs": {"a": 1}}),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 2, "mm_processor_kwargs": 0}),
    ("/v1/completions", {"prompt": "hi", "media_io_kwargs": "x", "stream": True}),
    ("/v1/completions", {"prompt": "hi", "media_io_kwargs": [1], "suffix": "s", "echo": True}),
    ("/v1/completions/render", {"prompt": "hi", "mm_processor_kwargs": {"a": 1}}),
    # prompt_embeds is bytes (any JSON string), not a string
    ("/v1/completions", {"prompt": "hi", "max_tokens": 2, "prompt_embeds": [5]}),
    # repetition_detection is a dataclass, whose checks are worded as its __post_init__'s
    ("/v1/completions", {"prompt": "hi", "max_tokens": 2, "repetition_detection": []}),
    (
        "/v1/chat/completions",
        {
            "messages": [{"role": "user", "content": "hi"}],
            "repetition_detection": {"max_pattern_size": -1},
        },
    ),
    (
        "/v1/completions",
        {"prompt": "hi", "repetition_detection": {"max_pattern_size": 2, "min_count": 1}},
    ),
    # structured_outputs' flags are read as pydantic reads booleans (1 was a 500: it reached the
    # engine request as an integer), in the one-constraint check too
    (
        "/v1/completions",
        {"prompt": "hi", "max_tokens": 2, "structured_outputs": {"json_object": 1}},
    ),
    (
        "/v1/chat/completions",
        {
            "messages": [{"role": "user", "content": "hi"}],
            "structured_outputs": {"json_object": "y"},
        },
    ),
    ("/v1/completions", {"prompt": "hi", "structured_outputs": {"disable_any_whitespace": "1"}}),
    # a json_schema response format's strict is a boolean
    (
        "/v1/chat/completions",
        {
            "messages": [{"role": "user", "content": "hi"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "s", "strict": 1.5}},
        },
    ),
    # a truncated token-id prompt echoes the text of all its ids (vLLM decodes, then truncates)
    (
        "/v1/completions",
        {"prompt": [1000, 1001, 1002, 1003], "truncate_prompt_tokens": 2, "echo": 1},
    ),
    (
        "/v1/completions",
        {
            "prompt": [[1000, 1001, 1002], [5, 6, 7]],
            "truncate_prompt_tokens": 1,
            "truncation_side": "right",
            "echo": True,
            "stream": True,
            "max_tokens": 2,
        },
    ),
    # ... and decoding it first refuses an id beyond 32 bits (the binding's conversion error)
    ("/v1/completions", {"prompt": [1, 2**40, 2**63], "max_tokens": 2, "echo": True}),
    ("/v1/completions", {"prompt": [[1], [2**63, 2**40]], "echo": True, "stream": True}),
]


@pytest.mark.parametrize(("path", "change"), FOUND)
def test_found_examples_answer_like_vllm(stack: Stack, path: str, change: dict[str, Any]) -> None:
    assert_like_vllm(stack, path, {"model": MODEL, **change})


VLLM_FAILS: list[tuple[str, dict[str, Any]]] = [
    # vLLM's structured-outputs "before" validator calls .get on the value (500); ours reports
    # the field's type error
    ("/v1/completions", {"prompt": "hi", "structured_outputs": "x"}),
    (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "hi"}], "structured_outputs": "x"},
    ),
    # vLLM takes a null truncation or background, then fails building the response (a stream is
    # cut off; not streamed, it is a 400, which ours gives before generating: FOUND)
    ("/v1/responses", {"input": "hi", "max_output_tokens": 2, "truncation": None, "stream": True}),
    ("/v1/responses", {"input": "hi", "max_output_tokens": 2, "background": None, "stream": True}),
]


@pytest.mark.parametrize(("path", "change"), VLLM_FAILS)
def test_where_vllm_fails_ours_refuses_the_request(
    stack: Stack, path: str, change: dict[str, Any]
) -> None:
    theirs, mine = _answers(stack, path, {"model": MODEL, **change})
    [(status, _, answer)] = theirs
    assert _failed(status, answer)
    assert mine[0][0] == 400


# -- the sweep ---------------------------------------------------------------------------------


STREAMED = ["/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/responses"]


@pytest.mark.parametrize(
    ("path", "stream"), [(p, False) for p in sorted(APIS)] + [(p, True) for p in STREAMED]
)
def test_generated_requests_answer_like_vllm(stack: Stack, path: str, stream: bool) -> None:
    @settings(
        max_examples=100,
        derandomize=True,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(request(path, MODEL, stream=stream))
    def sweep(body: dict[str, Any]) -> None:
        assert_like_vllm(stack, path, body)

    sweep()

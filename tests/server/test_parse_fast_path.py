"""The generation routes' body parsers take a fast path for plain bodies (no "before" validator
has anything to do): it must give what the general path gives, and leave every other body,
and every error with its precedence, to the general path. Each field of the request structs
is set in turn to a table of edge values (plus the fields the fast path checks itself, in
their own tables), and both paths must agree on the request or on the error response."""

from __future__ import annotations

import json
from typing import Annotated, Any

import msgspec
import pytest

from vllm_frontend.server import protocol
from vllm_frontend.server.errors import error_response
from vllm_frontend.server.validation import decode_json_object

EDGE_VALUES: list[Any] = [
    None,
    0,
    1,
    -1,
    -2,
    1.5,
    2**70,
    True,
    False,
    "",
    "x",
    "4",
    "none",
    "auto",
    "required",
    "tensors",
    "left",
    "a/b",
    "y" * 200,
    [],
    [1],
    [-1],
    ["a"],
    [{"role": "user", "content": "hi"}],
    {},
    {"a": 1},
    {"type": "json_schema"},
    {"json": {}},
    {"function": {"name": "f"}},
    {"include_usage": True},
]

CHAT_BASE = {
    "model": "m",
    "messages": [{"role": "user", "content": "hello"}],
    "max_tokens": 4,
    "temperature": 0,
}
COMPLETION_BASE = {"model": "m", "prompt": "hello", "max_tokens": 4, "temperature": 0}

MESSAGES_VALUES: list[Any] = [
    *EDGE_VALUES,
    [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "a"}],
    [{"role": "assistant", "content": "a", "reasoning_content": "r"}],
    [{"role": "assistant", "content": "a", "reasoning_content": None}],
    [{"role": 1, "content": "hi"}],
    [{"content": "hi"}],
    ["user"],
    [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
]

PROMPT_VALUES: list[Any] = [
    *EDGE_VALUES,
    [1, 2, 3],
    [0],
    [1, -1],
    [1, True],
    [1, 1.0],
    [1, "2"],
    [[1, 2]],
    ["a", "b"],
    [[]],
]


# Validators that act on two keys together (each alone is a no-op for them).
PAIRS: list[dict[str, Any]] = [
    {"continue_final_message": True, "add_generation_prompt": True},
    {"use_beam_search": True, "logprob_token_ids": [1]},
    {"use_beam_search": True, "echo": True, "logprobs": 1},
    {"return_mm_kwargs": False},
    {"return_mm_kwargs": False, "mm_payload": "tensors"},
    {"stream": False, "stream_options": {"include_usage": True}},
    {"stream": True, "stream_options": {"include_usage": True}},
    {"stream": True, "stream_options": {"include_usage": "x"}},
    {"stream": True, "stream_options": None},
    {"stream": True, "stream_options": {}},
    {"stream": 1, "stream_options": {"include_usage": True}},
    {"stream": "true", "stream_options": {"include_usage": True}},
    {"stream": True, "prompt_logprobs": 1},
    {"echo": True, "logprob_token_ids": [1], "max_tokens": 0},
    {"tools": [{"type": "function", "function": {"name": "f"}}]},
    {"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "none"},
    {"structured_outputs": {"json": {}}, "tool_choice": "auto"},
    {"top_logprobs": 2, "logprobs": False},
    {"thinking_token_budget": -1},
    {"repetition_detection": {"max_pattern_size": "x"}},
]


def _outcome(parse: Any, body: bytes) -> tuple[Any, ...]:
    try:
        return ("ok", parse(body))
    except Exception as exc:
        response = error_response(exc)
        return ("error", response.status, response.body)


def _general_chat(body: bytes) -> protocol.ChatCompletionRequest:
    return protocol._chat_request(decode_json_object(body))


def _general_completion(body: bytes) -> protocol.CompletionRequest:
    return protocol._completion_request(decode_json_object(body))


def _bodies(base: dict[str, Any], fields: dict[str, list[Any]]) -> list[bytes]:
    bodies = [json.dumps(base).encode()]
    for name, values in fields.items():
        for value in values:
            bodies.append(json.dumps({**base, name: value}).encode())
        without = {k: v for k, v in base.items() if k != name}
        bodies.append(json.dumps(without).encode())
    bodies.append(json.dumps({**base, "not_a_field": 1}).encode())
    bodies += [json.dumps({**base, **pair}).encode() for pair in PAIRS]
    return bodies


def _agree(fast: Any, general: Any, bodies: list[bytes]) -> int:
    taken = 0
    for body in bodies:
        expected = _outcome(general, body)
        assert _outcome(fast, body) == expected, body
        taken += expected[0] == "ok"
    return taken


def test_chat_bodies_parse_alike_on_both_paths() -> None:
    fields = {name: EDGE_VALUES for name in protocol.ChatCompletionRequest.__struct_fields__}
    fields["messages"] = MESSAGES_VALUES
    bodies = _bodies(CHAT_BASE, fields)
    assert _agree(protocol.parse_chat_request, _general_chat, bodies) > 100


def test_completion_bodies_parse_alike_on_both_paths() -> None:
    fields = {name: EDGE_VALUES for name in protocol.CompletionRequest.__struct_fields__}
    fields["prompt"] = PROMPT_VALUES
    bodies = _bodies(COMPLETION_BASE, fields)
    # and without max_tokens, which a validator then sets
    no_max = {k: v for k, v in COMPLETION_BASE.items() if k != "max_tokens"}
    bodies += _bodies(no_max, {"prompt": PROMPT_VALUES})
    assert _agree(protocol.parse_completion_request, _general_completion, bodies) > 100


def test_the_benchmark_bodies_take_the_fast_path() -> None:
    # what the fast path is for: the common bodies skip the validators
    chat = {**CHAT_BASE, "stream": True, "stream_options": {"include_usage": True}}
    assert protocol._plain_chat(msgspec.json.decode(json.dumps(chat)))
    completion = {**COMPLETION_BASE, "prompt": [1, 2, 3], "ignore_eos": True}
    assert protocol._plain_completion(msgspec.json.decode(json.dumps(completion)))


_TOKEN_ID_LIST = list[Annotated[int, msgspec.Meta(ge=0)]]


def _plain_by_alias(value: Any) -> bool:
    # what _plain_prompt decides, with the typing alias msgspec validates the same way
    if value is None or isinstance(value, str):
        return True
    if not (isinstance(value, list) and value and type(value[0]) is int):
        return False
    try:
        msgspec.convert(value, _TOKEN_ID_LIST)
    except msgspec.ValidationError:
        return False
    return True


@pytest.mark.parametrize(
    "value",
    [
        *PROMPT_VALUES,
        [0, 2**63 - 1],
        [1, 2**63],
        [1, 2**64],
        [1, -(2**63)],
        [1, None],
        [1, {}],
        [1, [2]],
        [5, *range(200)],
        [1, 2.5],
        [False],
    ],
    ids=repr,
)
def test_plain_prompt_decides_as_the_element_type(value: Any) -> None:
    assert protocol._plain_prompt(value) is _plain_by_alias(value)

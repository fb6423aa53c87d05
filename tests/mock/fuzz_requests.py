"""Hypothesis strategies for request bodies of every generating and tokenizing API: each a valid
base with a few fields drawn from the API's schema on top (valid values, boundaries, wrong types,
nulls, unknown fields, nested messages and content parts of every kind)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

# -- values shared by the APIs -------------------------------------------------------------------

JUNK: list[Any] = [None, "x", "", 0, -1, 1.5, True, [], {}, ["x"], {"a": 1}]
"""Values of the wrong type for most fields."""

INTS = [0, 1, 2, 3, -1, 5, 20, 21, 256, 257, 2**31, 2**63, -(2**63) - 1, 1.0, 2.5, "3", "1e3", 1e19]
FLOATS = [0, 0.0, 0.5, 1, 1.0, 2, 2.0, -0.5, -2, 3, 100, 1e-9, 1e300, "0.5"]
TEXTS = ["hi", "", " ", "\n", "a\u0000b", "\U0001f600", "\u202e", "x" * 50]
TOKEN_IDS = [[1], [1, 2, 3], [], [0], [-1], [128255], [128256], [2**40]]


def _pick(values: list[Any]) -> st.SearchStrategy[Any]:
    return st.sampled_from(values)


def _values(typed: list[Any]) -> st.SearchStrategy[Any]:
    """A field's value: one of ``typed`` mostly, a wrong type sometimes."""
    return st.one_of(_pick(typed), _pick(JUNK))


TEXT_PART = {"type": "text", "text": "hi"}
PARTS: list[Any] = [
    TEXT_PART,
    {"type": "text"},
    {"type": "text", "text": 5},
    {"type": "text", "text": None},
    {"type": "image_url", "image_url": {"url": "http://127.0.0.1:1/x.png"}},
    {"type": "image_url", "image_url": "data:image/png;base64,AAAA"},
    {"type": "image_url"},
    {"type": "image_url", "image_url": {"url": "data:image/png;base64,!!"}},
    {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
    {"type": "audio_url", "audio_url": {"url": "data:audio/wav;base64,AAAA"}},
    {"type": "video_url", "video_url": {"url": "data:video/mp4;base64,AAAA"}},
    {"type": "file", "file": {"file_data": "AAAA"}},
    {"type": "refusal", "refusal": "no"},
    {"type": "input_text", "text": "hi"},
    {"type": "input_image", "image_url": "data:image/png;base64,AAAA"},
    {"type": "thinking", "thinking": "hm"},
    {"type": "image_embeds", "image_embeds": "AAAA"},
    {"type": "bogus"},
    {"text": "hi"},
    {},
    "hi",
    5,
    None,
]
CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
ROLES = ["user", "system", "developer", "assistant", "tool", "function", "bogus", "", 5, None]


@st.composite
def chat_message(draw: st.DrawFn) -> Any:
    """One chat message: a role, content as text, null, absent or parts, and extras."""
    message: dict[str, Any] = {"role": draw(_pick(ROLES))}
    content = draw(
        st.one_of(
            _pick(TEXTS),
            st.lists(_pick(PARTS), max_size=3),
            _pick([None, 5, {"type": "text", "text": "x"}, "absent"]),
        )
    )
    if content != "absent":
        message["content"] = content
    extras = {
        "name": _pick(["n", 5, None, ""]),
        "tool_calls": _pick([[CALL], [], None, [{"id": "c"}], "x", [CALL, CALL]]),
        "tool_call_id": _pick(["c1", None, 5]),
        "reasoning": _pick(["r", None, 5]),
        "reasoning_content": _pick(["r", None]),
        "bogus": _pick([1, None]),
    }
    for key in draw(st.lists(_pick(sorted(extras)), max_size=2, unique=True)):
        message[key] = draw(extras[key])
    if draw(st.integers(0, 20)) == 0:
        return draw(_pick(JUNK))
    return message


def messages() -> st.SearchStrategy[Any]:
    """A chat conversation: mostly a list of messages."""
    return st.one_of(
        st.lists(chat_message(), min_size=1, max_size=3),
        _pick([[], None, "hi", {"role": "user", "content": "hi"}]),
    )


FUNCTION = {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {}}}
TOOLS: list[Any] = [
    [{"type": "function", "function": FUNCTION}],
    [{"type": "function", "function": {"name": "f"}}],
    [{"type": "function", "function": {"name": "f", "parameters": {"type": "bogus"}}}],
    [{"type": "function", "function": {}}],
    [{"type": "function"}],
    [{"type": "bogus", "function": FUNCTION}],
    [{"function": FUNCTION}],
    [{"type": "function", "function": FUNCTION}, {"type": "function", "function": FUNCTION}],
    [],
    None,
    "x",
    [5],
]
TOOL_CHOICES: list[Any] = [
    "auto",
    "none",
    "required",
    "bogus",
    None,
    5,
    {"type": "function", "function": {"name": "f"}},
    {"type": "function", "function": {"name": "g"}},
    {"type": "function"},
    {"type": "function", "function": {}},
    {},
]
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
RESPONSE_FORMATS: list[Any] = [
    {"type": "text"},
    {"type": "json_object"},
    {"type": "json_schema", "json_schema": {"name": "s", "schema": SCHEMA}},
    {"type": "json_schema", "json_schema": {"name": "s"}},
    {"type": "json_schema"},
    {"type": "json_schema", "json_schema": {"schema": SCHEMA}},
    {"type": "structural_tag", "structures": [], "triggers": []},
    {"type": "bogus"},
    {},
    "json",
    None,
]
STRUCTURED: list[Any] = [
    {"json": SCHEMA},
    {"json": "{}"},
    {"regex": "[ab]+"},
    {"choice": ["a", "b"]},
    {"choice": []},
    {"grammar": 'root ::= "a"'},
    {"json_object": True},
    {"json_object": 1},
    {"regex": "a", "disable_any_whitespace": "yes"},
    {"json": SCHEMA, "regex": "a"},
    {"regex": "("},
    {"json": {"type": "bogus"}},
    {},
    {"bogus": 1},
    None,
    "x",
]
STOPS: list[Any] = ["a", "", ["a", "b"], [], [""], ["a"] * 5, None, 5, [5], ["\n"], "hi"]
LOGIT_BIAS: list[Any] = [{"1": 1}, {"1": 100}, {"1": -101}, {"x": 1}, {"999999": 1}, {}, None]
STREAM_OPTIONS: list[Any] = [
    {"include_usage": True},
    {"include_usage": False},
    {"include_usage": True, "continuous_usage_stats": True},
    {"continuous_usage_stats": True},
    {"include_usage": "x"},
    {"bogus": 1},
    {},
    None,
    5,
]

# -- the fields each API takes -------------------------------------------------------------------

SAMPLING: dict[str, st.SearchStrategy[Any]] = {
    "temperature": _values(FLOATS),
    "top_p": _values(FLOATS),
    "top_k": _values(INTS),
    "min_p": _values(FLOATS),
    "seed": _values(INTS),
    "presence_penalty": _values(FLOATS),
    "frequency_penalty": _values(FLOATS),
    "repetition_penalty": _values(FLOATS),
    "n": _values(INTS),
    "stop": _pick(STOPS),
    "stop_token_ids": _pick([[1], [], None, [-1], "x", [1.5]]),
    "logit_bias": _pick(LOGIT_BIAS),
    "min_tokens": _values(INTS),
    "ignore_eos": _values([True, False]),
    "skip_special_tokens": _values([True, False]),
    "spaces_between_special_tokens": _values([True, False]),
    "include_stop_str_in_output": _values([True, False]),
    "structured_outputs": _pick(STRUCTURED),
    "prompt_logprobs": _values(INTS),
    "truncate_prompt_tokens": _values(INTS),
    "priority": _values(INTS),
    "user": _values(["u"]),
    "bogus_field": _pick(JUNK),
    "stream": _values([True, False]),
    "stream_options": _pick(STREAM_OPTIONS),
    "request_id": _values(["r-1"]),
    "cache_salt": _values(["s"]),
    "bad_words": _pick([["x"], [], None, "x", [5]]),
    "allowed_token_ids": _pick([[1, 2], [], None, [-1], "x"]),
    "repetition_detection": _pick(
        [{"max_pattern_size": 2, "min_count": 2}, {"max_pattern_size": -1}, {"min_count": 1}, 5]
    ),
    "vllm_xargs": _pick([{"a": 1}, {"a": [2**64]}, {"a": None}, "x"]),
    "mm_processor_kwargs": _pick([{"a": 1}, {}, 0, "x", None]),
}
COMPLETIONS = {
    **SAMPLING,
    "prompt": st.one_of(
        _pick(TEXTS),
        _pick(TOKEN_IDS),
        st.lists(st.one_of(_pick(TEXTS), _pick(TOKEN_IDS)), max_size=3),
        _pick(JUNK),
    ),
    "max_tokens": _values(INTS),
    "logprobs": _values(INTS),
    "echo": _values([True, False]),
    "best_of": _values(INTS),
    "suffix": _values(["s"]),
    "return_tokens_as_token_ids": _values([True, False]),
    "add_special_tokens": _values([True, False]),
    "response_format": _pick(RESPONSE_FORMATS),
}
CHAT = {
    **SAMPLING,
    "messages": messages(),
    "max_tokens": _values(INTS),
    "max_completion_tokens": _values(INTS),
    "logprobs": _values([True, False]),
    "top_logprobs": _values(INTS),
    "tools": _pick(TOOLS),
    "tool_choice": _pick(TOOL_CHOICES),
    "parallel_tool_calls": _values([True, False]),
    "response_format": _pick(RESPONSE_FORMATS),
    "echo": _values([True, False]),
    "add_generation_prompt": _values([True, False]),
    "continue_final_message": _values([True, False]),
    "chat_template": _pick(["{{ 'x' }}", "{{", None, 5]),
    "chat_template_kwargs": _pick([{"a": 1}, None, "x", {"enable_thinking": False}]),
    "documents": _pick([[{"title": "t", "text": "x"}], None, "x"]),
    "reasoning_effort": _pick(["low", "bogus", None, 5]),
    "return_tokens_as_token_ids": _values([True, False]),
}
RESPONSES = {
    "input": st.one_of(
        _pick(TEXTS),
        st.lists(chat_message(), max_size=2),
        _pick(
            [
                [{"type": "message", "role": "user", "content": "hi"}],
                [{"type": "message", "role": "user", "content": [{"type": "input_text"}]}],
                [{"role": "user", "content": [{"type": "input_text", "text": "x"}]}],
                [{"type": "function_call_output", "call_id": "c", "output": "o"}],
                [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}],
                [{"type": "reasoning", "id": "r", "summary": []}],
                [{"type": "bogus"}],
                [5],
                None,
            ]
        ),
    ),
    "max_output_tokens": _values(INTS),
    "instructions": _values(["be brief"]),
    "temperature": _values(FLOATS),
    "top_p": _values(FLOATS),
    "top_logprobs": _values(INTS),
    "stream": _values([True, False]),
    "tools": _pick(
        [
            [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
            [{"type": "function"}],
            [{"type": "web_search_preview"}],
            [{"type": "bogus"}],
            None,
            "x",
        ]
    ),
    "tool_choice": _pick(["auto", "none", "required", {"type": "function", "name": "f"}, 5]),
    "text": _pick(
        [
            {"format": {"type": "text"}},
            {"format": {"type": "json_object"}},
            {"format": {"type": "json_schema", "name": "s", "schema": SCHEMA}},
            {"format": {"type": "json_schema"}},
            {"format": {"type": "bogus"}},
            {},
            None,
            "x",
        ]
    ),
    "store": _values([True, False]),
    "background": _values([True, False]),
    "previous_response_id": _values(["resp_nope"]),
    "reasoning": _pick([{"effort": "low"}, {"effort": "bogus"}, None, "x"]),
    "include": _pick([["message.output_text.logprobs"], ["bogus"], None, "x"]),
    "truncation": _pick(["auto", "disabled", "bogus", None]),
    "parallel_tool_calls": _values([True, False]),
    "metadata": _pick([{"a": "b"}, None, "x", {"a": 1}]),
    "user": _values(["u"]),
    "service_tier": _pick(["auto", "default", "bogus", None]),
    "max_tool_calls": _values(INTS),
    "bogus_field": _pick(JUNK),
}
MESSAGES = {
    "messages": st.one_of(
        st.lists(chat_message(), min_size=1, max_size=2),
        _pick(
            [
                [{"role": "user", "content": [{"type": "text", "text": "x"}]}],
                [{"role": "user", "content": [{"type": "image", "source": {"type": "base64"}}]}],
                [
                    {"role": "user", "content": "hi"},
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}],
                    },
                    {
                        "role": "user",
                        "content": [{"type": "tool_result", "tool_use_id": "t", "content": "o"}],
                    },
                ],
                [{"role": "assistant", "content": "hi"}],
                [],
                None,
            ]
        ),
    ),
    "max_tokens": _values(INTS),
    "system": _pick(["s", [{"type": "text", "text": "s"}], [{"type": "bogus"}], 5, None]),
    "stop_sequences": _pick([["a"], [], "x", None, [5]]),
    "temperature": _values(FLOATS),
    "top_p": _values(FLOATS),
    "top_k": _values(INTS),
    "stream": _values([True, False]),
    "metadata": _pick([{"user_id": "u"}, None, "x"]),
    "tools": _pick(
        [
            [{"name": "f", "input_schema": {"type": "object"}}],
            [{"name": "f"}],
            [{"input_schema": {}}],
            None,
            "x",
        ]
    ),
    "tool_choice": _pick(
        [
            {"type": "auto"},
            {"type": "any"},
            {"type": "tool", "name": "f"},
            {"type": "none"},
            {"type": "bogus"},
            "auto",
            None,
        ]
    ),
    "thinking": _pick(
        [{"type": "enabled", "budget_tokens": 1024}, {"type": "disabled"}, {"type": "bogus"}, None]
    ),
    "bogus_field": _pick(JUNK),
}
TOKENIZE = {
    "prompt": _values(TEXTS),
    "messages": messages(),
    "add_special_tokens": _values([True, False]),
    "add_generation_prompt": _values([True, False]),
    "continue_final_message": _values([True, False]),
    "return_token_strs": _values([True, False]),
    "tools": _pick(TOOLS),
    "chat_template_kwargs": _pick([{"a": 1}, None, "x"]),
    "bogus_field": _pick(JUNK),
}
DETOKENIZE = {
    "tokens": st.one_of(_pick(TOKEN_IDS), _pick(JUNK), _pick([[1, "x"], [1.0], [True]])),
    "bogus_field": _pick(JUNK),
}

MESSAGE = [{"role": "user", "content": "hi"}]
APIS: dict[str, tuple[dict[str, Any], dict[str, st.SearchStrategy[Any]]]] = {
    "/v1/completions": ({"prompt": "hi", "max_tokens": 2}, COMPLETIONS),
    "/v1/chat/completions": ({"messages": MESSAGE, "max_tokens": 2}, CHAT),
    "/v1/responses": ({"input": "hi", "max_output_tokens": 2}, RESPONSES),
    "/v1/messages": ({"messages": MESSAGE, "max_tokens": 2}, MESSAGES),
    "/tokenize": ({"prompt": "hi"}, TOKENIZE),
    "/detokenize": ({"tokens": [1, 2]}, DETOKENIZE),
}
"""Each route's valid base body and the strategies of the fields that go on top of it."""
APIS["/v1/completions/render"] = APIS["/v1/completions"]
APIS["/v1/chat/completions/render"] = APIS["/v1/chat/completions"]
APIS["/v1/messages/count_tokens"] = APIS["/v1/messages"]


@st.composite
def request(
    draw: st.DrawFn, path: str, model: str, most: int = 3, stream: bool = False
) -> dict[str, Any]:
    """A body for ``path``: its base, the served ``model`` (rarely another), and up to ``most``
    fields drawn from the API's schema; ``stream``: a streamed request (``stream: true``)."""
    base, fields = APIS[path]
    body: dict[str, Any] = {"model": model, **base}
    for key in draw(st.lists(_pick(sorted(fields)), min_size=1, max_size=most, unique=True)):
        body[key] = draw(fields[key])
    if stream:
        body["stream"] = True
    if draw(st.integers(0, 15)) == 0:
        body["model"] = draw(_pick(["nope", None, 5, ""]))
    if draw(st.integers(0, 15)) == 0:
        del body["model"]
    return body

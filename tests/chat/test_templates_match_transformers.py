"""Every fixture chat template renders exactly what transformers renders for the same chat.

The reference is transformers' own renderer (``render_jinja_template``, what
``tokenizer.apply_chat_template(tokenize=False)`` calls). Where transformers raises for a
template/conversation pair (templates that refuse a role, a missing tool result, …) ours must
raise too, with the same message, since vLLM returns that message in its 400 response.
"""

from __future__ import annotations

import copy
import pathlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.utils.chat_template_utils import render_jinja_template

from tests.chat.conftest import TEMPLATE_FILES
from vllm_frontend.chat import ChatError, compile_template, render_template

pytestmark = pytest.mark.oracle  # imports vLLM or transformers as the reference

SPECIAL_TOKENS = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Zürich"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current local time.",
        "parameters": {"type": "object", "properties": {}},
    },
}
# As vLLM hands a tool declared with a name only to the template.
BARE_TOOL = {
    "type": "function",
    "function": {"name": "ping", "description": None, "parameters": None},
}


def _tool_call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "function": {"arguments": arguments, "name": name}, "type": "function"}


# name -> (messages, tools, documents, add_generation_prompt, continue_final_message, kwargs)
CASES: dict[str, tuple[list[dict[str, Any]], Any, Any, bool, bool, dict[str, Any]]] = {
    "single_user_turn": ([{"role": "user", "content": "Hello!"}], None, None, True, False, {}),
    "no_generation_prompt": (
        [{"role": "user", "content": "Hello!"}, {"role": "assistant", "content": "Hi there."}],
        None,
        None,
        False,
        False,
        {},
    ),
    "system_and_user": (
        [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Name a prime."},
        ],
        None,
        None,
        True,
        False,
        {},
    ),
    "multi_turn": (
        [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Name a prime."},
            {"role": "assistant", "content": "7"},
            {"role": "user", "content": "Another one?"},
        ],
        None,
        None,
        True,
        False,
        {},
    ),
    "multibyte_text": (
        [
            {"role": "user", "content": "Grüße aus Zürich 🇨🇭 — 你好，世界！ café\u0301"},
            {"role": "assistant", "content": "Ça va? 👋🏽 日本語も"},
            {"role": "user", "content": "Ελληνικά και עברית"},
        ],
        None,
        None,
        True,
        False,
        {},
    ),
    "tools_offered": (
        [{"role": "user", "content": "Weather in Paris?"}],
        [WEATHER_TOOL, TIME_TOOL],
        None,
        True,
        False,
        {},
    ),
    "tool_call_round_trip": (
        [
            {"role": "system", "content": "Use tools when useful."},
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [_tool_call("a1b2c3d4e", "get_weather", {"city": "Paris"})],
            },
            {"role": "tool", "content": '{"temp": 21}', "tool_call_id": "a1b2c3d4e"},
        ],
        [WEATHER_TOOL],
        None,
        True,
        False,
        {},
    ),
    "tool_without_description": (
        [{"role": "user", "content": "Ping?"}],
        [BARE_TOOL],
        None,
        True,
        False,
        {},
    ),
    "parallel_tool_calls": (
        [
            {"role": "user", "content": "Weather in Paris and the time?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    _tool_call("a1b2c3d4e", "get_weather", {"city": "Paris", "unit": "celsius"}),
                    _tool_call("f5g6h7i8j", "get_time", {}),
                ],
            },
            {"role": "tool", "content": "21 degrees", "tool_call_id": "a1b2c3d4e"},
            {"role": "tool", "content": "12:00", "tool_call_id": "f5g6h7i8j"},
            {"role": "assistant", "content": "It is 21 °C and noon."},
            {"role": "user", "content": "Thanks"},
        ],
        [WEATHER_TOOL, TIME_TOOL],
        None,
        True,
        False,
        {},
    ),
    "documents": (
        [{"role": "user", "content": "Summarise the documents."}],
        None,
        [
            {"title": "Alpha", "text": "The first document."},
            {"title": "Beta", "text": "Zweites Dokument — mit Umlauten."},
        ],
        True,
        False,
        {},
    ),
    "continue_final_message": (
        [
            {"role": "user", "content": "Count to five."},
            {"role": "assistant", "content": "One, two, "},
        ],
        None,
        None,
        False,
        True,
        {},
    ),
    "continue_with_trailing_space": (
        [
            {"role": "user", "content": "Write a haiku."},
            {"role": "assistant", "content": "Autumn moonlight "},
        ],
        None,
        None,
        False,
        True,
        {},
    ),
    "thinking_disabled": (
        [{"role": "user", "content": "Quick: 2+2?"}],
        None,
        None,
        True,
        False,
        {"enable_thinking": False},
    ),
    "reasoning_in_history": (
        [
            {"role": "user", "content": "2+2?"},
            {
                "role": "assistant",
                "content": "4",
                "reasoning": "Add them.",
                "reasoning_content": "Add them.",
            },
            {"role": "user", "content": "3+3?"},
        ],
        None,
        None,
        True,
        False,
        {"enable_thinking": True},
    ),
    "extra_kwargs": (
        [{"role": "user", "content": "Hi"}],
        None,
        None,
        True,
        False,
        {"tools_in_user_message": False, "date_string": "01 Jan 2025", "custom_flag": 3},
    ),
}


def _as_openai_parts(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = copy.deepcopy(messages)
    for message in out:
        if isinstance(message.get("content"), str) and message["role"] != "tool":
            message["content"] = [{"type": "text", "text": message["content"]}]
    return out


def _reference(source: str, messages: list[dict[str, Any]], **kw: Any) -> str:
    rendered, _ = render_jinja_template(
        conversations=[copy.deepcopy(messages)], chat_template=source, **kw
    )
    return str(rendered[0])


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("path", TEMPLATE_FILES, ids=lambda p: p.stem)
def test_template_renders_like_transformers(
    path: pathlib.Path, case: str, frozen_clock: object
) -> None:
    source = path.read_text()
    template = compile_template(source)
    messages, tools, documents, add_generation_prompt, continue_final, kwargs = CASES[case]
    if template.content_format == "openai":
        messages = _as_openai_parts(messages)
    call: dict[str, Any] = dict(
        tools=tools,
        documents=documents,
        add_generation_prompt=add_generation_prompt,
        continue_final_message=continue_final,
    )
    try:
        expected = _reference(source, messages, **call, **SPECIAL_TOKENS, **kwargs)
    except Exception as exc:
        with pytest.raises(ChatError) as raised:
            render_template(
                template,
                messages,
                **call,
                extra_context=kwargs,
                special_tokens=SPECIAL_TOKENS,
            )
        assert str(raised.value) == str(exc)
        return
    got = render_template(
        template, messages, **call, extra_context=kwargs, special_tokens=SPECIAL_TOKENS
    )
    assert got == expected


def test_most_template_and_conversation_pairs_render(frozen_clock: object) -> None:
    """Guard against a suite that passes only because everything raises."""
    rendered = total = 0
    for path in TEMPLATE_FILES:
        template = compile_template(path.read_text())
        for (
            messages,
            tools,
            documents,
            add_generation_prompt,
            continue_final,
            kwargs,
        ) in CASES.values():
            if template.content_format == "openai":
                messages = _as_openai_parts(messages)
            total += 1
            try:
                render_template(
                    template,
                    messages,
                    tools=tools,
                    documents=documents,
                    add_generation_prompt=add_generation_prompt,
                    continue_final_message=continue_final,
                    extra_context=kwargs,
                    special_tokens=SPECIAL_TOKENS,
                )
                rendered += 1
            except ChatError:
                pass
    assert rendered >= 0.9 * total


@pytest.mark.parametrize(
    "fmt",
    ["%d %b %Y", "%Y-%m-%d %H:%M:%S", "%A, %B %d"],
)
def test_strftime_now_gives_the_same_date_as_transformers(fmt: str, frozen_clock: object) -> None:
    source = "{{ strftime_now('" + fmt + "') }}|{{ messages[0].content }}"
    msgs = [{"role": "user", "content": "x"}]
    assert render_template(compile_template(source), msgs) == _reference(source, msgs)


def test_llama31_template_shows_todays_date_not_a_fixed_one(frozen_clock: object) -> None:
    path = next(p for p in TEMPLATE_FILES if p.stem == "tool_chat_template_llama3.1_json")
    prompt = render_template(
        compile_template(path.read_text()),
        [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        add_generation_prompt=True,
    )
    assert "Today Date: 29 Feb 2024" in prompt


@pytest.mark.parametrize(
    "expr",
    [
        "{{ messages | tojson }}",
        "{{ messages | tojson(indent=2) }}",
        "{{ messages | tojson(indent=4, sort_keys=true) }}",
        "{{ messages | tojson(separators=(',', ':')) }}",
        "{{ messages | tojson(true) }}",
        "{{ '<script>&\"' | tojson }}",
        "{{ raise_exception('Only user and assistant roles are supported!') }}",
        "{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}{{ m.content }}"
        "{% endfor %}",
        "{% for m in messages %}{% if m.role == 'user' %}{% continue %}{% endif %}[{{ m.content }}]"
        "{% endfor %}",
        "{% generation %}{{ messages[0].content }}{% endgeneration %}",
        "{{ messages.append(1) }}",
        "{{ ''.__class__ }}",
        "{{ undefined_thing.attr }}",
        "{% for m in messages %}\n  {{ m.content }}\n{% endfor %}\n",
    ],
)
def test_jinja_environment_matches_transformers(expr: str) -> None:
    msgs = [
        {"role": "user", "content": "Grüße 👋", "b": 1, "a": [1, 2]},
        {"role": "assistant", "content": "ok"},
    ]
    try:
        expected = _reference(expr, msgs)
    except Exception as exc:
        with pytest.raises(ChatError) as raised:
            render_template(compile_template(expr), msgs)
        assert str(raised.value) == str(exc)
        return
    assert render_template(compile_template(expr), msgs) == expected


def test_template_syntax_error_is_a_client_error_with_jinjas_message() -> None:
    import jinja2

    bad = "{% for m in messages %}{{ m.content }}"
    with pytest.raises(jinja2.TemplateSyntaxError) as jinja_exc:
        jinja2.Environment().parse(bad)
    with pytest.raises(ChatError) as raised:
        compile_template(bad)
    assert str(raised.value) == str(jinja_exc.value)


_PROPERTY_TEMPLATES = [
    p for p in TEMPLATE_FILES if p.stem in ("qwen3", "template_chatml", "tool_chat_template_hermes")
]


@settings(max_examples=150, deadline=None)
@given(
    turns=st.lists(st.text(max_size=40), min_size=1, max_size=4),
    system=st.one_of(st.none(), st.text(max_size=20)),
    add_generation_prompt=st.booleans(),
)
def test_arbitrary_text_renders_like_transformers(
    turns: list[str], system: str | None, add_generation_prompt: bool
) -> None:
    messages: list[dict[str, Any]] = []
    if system is not None:
        messages.append({"role": "system", "content": system})
    for i, text in enumerate(turns):
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": text})
    for path in _PROPERTY_TEMPLATES:
        source = path.read_text()
        try:
            expected = _reference(source, messages, add_generation_prompt=add_generation_prompt)
        except Exception as exc:
            with pytest.raises(ChatError) as raised:
                render_template(
                    compile_template(source), messages, add_generation_prompt=add_generation_prompt
                )
            assert str(raised.value) == str(exc)
            continue
        got = render_template(
            compile_template(source), messages, add_generation_prompt=add_generation_prompt
        )
        assert got == expected

"""Malformed chat input gets a clear 400-class ChatError, never a crash."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.chat.conftest import TEMPLATE_FILES
from vllm_frontend.chat import ChatError, ChatRenderer, ChatTemplateOptions, ModelChatTemplates

LLAMA31 = next(p for p in TEMPLATE_FILES if p.stem == "tool_chat_template_llama3.1_json")
CHATML = next(p for p in TEMPLATE_FILES if p.stem == "template_chatml")


def _renderer(path: Any = LLAMA31, **options: Any) -> ChatRenderer:
    return ChatRenderer(
        ModelChatTemplates(tokenizer=path.read_text()),
        {"bos_token": "<s>", "eos_token": "</s>"},
        ChatTemplateOptions(**options),
    )


BAD_MESSAGES: dict[str, tuple[Any, str]] = {
    "messages_not_a_list": ({"role": "user"}, "messages must be a list"),
    "message_not_an_object": (["hi"], "messages.0 must be an object"),
    "role_missing": ([{"content": "x"}], "messages.0.role is required"),
    "content_wrong_type": ([{"role": "user", "content": 3}], "messages.0.content must be"),
    "part_wrong_type": ([{"role": "user", "content": [3]}], "must be a string or an object"),
    "part_unknown_type": (
        [{"role": "user", "content": [{"type": "hologram"}]}],
        "Unsupported chat content part type: 'hologram'.",
    ),
    "part_without_type": ([{"role": "user", "content": [{"txt": "x"}]}], "Missing 'type' field"),
    "image_part": (
        [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
        "'image_url' is not supported",
    ),
    "tool_calls_not_a_list": (
        [{"role": "assistant", "tool_calls": {"id": "a"}}],
        "messages.0.tool_calls must be a list",
    ),
    "tool_call_not_an_object": (
        [{"role": "assistant", "tool_calls": ["x"]}],
        "assistant tool_calls entries must be objects.",
    ),
    "tool_call_without_id": (
        [{"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f"}}]}],
        "messages.0.tool_calls.0.id is required",
    ),
    "name_not_a_string": ([{"role": "user", "content": "x", "name": 5}], "name must be a string"),
    "empty": ([], "Cannot apply chat template to an empty conversation."),
}


@pytest.mark.parametrize("case", sorted(BAD_MESSAGES))
def test_malformed_messages_get_a_clear_error(case: str) -> None:
    messages, fragment = BAD_MESSAGES[case]
    with pytest.raises(ChatError) as raised:
        _renderer().render(messages)
    assert fragment in str(raised.value)


def test_request_without_any_template_fails_like_vllm() -> None:
    renderer = ChatRenderer(ModelChatTemplates(), {})
    with pytest.raises(ChatError, match="default chat template is no longer allowed"):
        renderer.render([{"role": "user", "content": "x"}])


def test_bad_tools_get_a_clear_error() -> None:
    for tools, fragment in [
        ("x", "tools must be a list"),
        ([{"type": "function"}], "tools.0.function must be an object"),
        ([{"type": "web_search"}], "tools.0.type must be 'function'"),
        ([{"function": {"name": 1}}], "tools.0.function.name must be a string"),
    ]:
        with pytest.raises(ChatError) as raised:
            _renderer().render([{"role": "user", "content": "x"}], tools=tools)
        assert fragment in str(raised.value)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)
roles = st.sampled_from(["user", "assistant", "system", "tool", "developer", "function", "x"])
parts = st.one_of(
    st.text(max_size=5),
    st.fixed_dictionaries(
        {"type": st.sampled_from(["text", "refusal", "thinking", "tool_reference", "image_url"])},
        optional={"text": json_values, "name": json_values, "refusal": json_values},
    ),
    json_values,
)
messages = st.lists(
    st.one_of(
        st.fixed_dictionaries(
            {"role": roles},
            optional={
                "content": st.one_of(
                    st.text(max_size=10), st.lists(parts, max_size=3), json_values
                ),
                "tool_calls": json_values,
                "reasoning": json_values,
                "name": json_values,
                "tool_call_id": json_values,
                "tools": json_values,
            },
        ),
        json_values,
    ),
    max_size=4,
)


@settings(max_examples=300, deadline=None)
@given(
    msgs=messages,
    tools=st.one_of(st.none(), json_values),
    kwargs=st.one_of(
        st.none(),
        st.dictionaries(
            st.sampled_from(["chat_template", "tools", "documents", "enable_thinking", "messages"])
            | st.text(max_size=6),
            json_values,
            max_size=3,
        ),
    ),
    documents=st.one_of(st.none(), json_values),
    continue_final=st.booleans(),
    add_generation_prompt=st.one_of(st.none(), st.booleans()),
)
def test_arbitrary_json_never_crashes_the_renderer(
    msgs: Any,
    tools: Any,
    kwargs: Any,
    documents: Any,
    continue_final: bool,
    add_generation_prompt: Any,
) -> None:
    for path in (LLAMA31, CHATML):
        try:
            result = _renderer(path, trust_request_chat_template=True).render(
                msgs,
                tools=tools,
                documents=documents,
                chat_template_kwargs=kwargs,
                continue_final_message=continue_final,
                add_generation_prompt=add_generation_prompt,
            )
        except ChatError:
            continue
        assert isinstance(result.prompt, str)

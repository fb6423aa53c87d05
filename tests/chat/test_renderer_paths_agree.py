"""A request with nothing to merge into the template kwargs (the common one) renders on the
renderer's short path; the same request made to take the general path (a kwarg the merge
skips) must give the same prompt, conversation and content format, or the same error."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from tests.chat.conftest import TEMPLATES_DIR
from vllm_frontend.chat import ChatError, ChatRenderer, ChatTemplateOptions, ModelChatTemplates

TEMPLATES = {
    "llama3.1": (TEMPLATES_DIR / "tool_chat_template_llama3.1_json.jinja").read_text(),
    "chatml": (TEMPLATES_DIR / "template_chatml.jinja").read_text(),
    "qwen3": (TEMPLATES_DIR / "qwen3.jinja").read_text(),
    "dump": "{{ messages | tojson }}|{{ tools }}|{{ documents }}|{{ add_generation_prompt }}",
    "developer": "{# 'developer' #}{% for m in messages %}{{ m.role }}:{{ m.content }};"
    "{% endfor %}",
    "openai": "{% for m in messages %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endfor %}",
}
SPECIAL = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}

CONVERSATIONS: list[Any] = [
    [{"role": "user", "content": "Hi there"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
    [{"role": "developer", "content": "Dev."}, {"role": "user", "content": "Hi"}],
    [
        {"role": "user", "content": [{"type": "text", "text": "Part one"}]},
        {"role": "assistant", "content": "Sure"},
    ],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Partial answer"}],
    [],
    [{"role": "user", "content": 3}],
    "not a list",
]
FLAGS = list(
    itertools.product(
        (None, True, False),  # add_generation_prompt
        (False, True),  # continue_final_message
    )
)


def _render(renderer: ChatRenderer, messages: Any, **fields: Any) -> Any:
    try:
        out = renderer.render(messages, **fields)
    except ChatError as exc:
        return ("error", str(exc), exc.param)
    return (out.prompt, out.conversation, out.content_format)


@pytest.mark.parametrize("content_format", ["auto", "string", "openai"])
@pytest.mark.parametrize("name", TEMPLATES)
def test_short_and_general_paths_agree(name: str, content_format: Any) -> None:
    renderer = ChatRenderer(
        ModelChatTemplates(tokenizer=TEMPLATES[name]),
        SPECIAL,
        ChatTemplateOptions(content_format=content_format),
    )
    for messages, (add_generation_prompt, continue_final_message) in itertools.product(
        CONVERSATIONS, FLAGS
    ):
        fields = {
            "add_generation_prompt": add_generation_prompt,
            "continue_final_message": continue_final_message,
        }
        short = _render(renderer, messages, **fields)
        # None-valued request kwargs are skipped by the merge: the same kwargs, the long way
        general = _render(renderer, messages, chat_template_kwargs={"unused_kwarg": None}, **fields)
        assert short == general, (messages, fields)

"""A chat template compiled by an earlier process is read back from the code cache instead of
being compiled again, and renders exactly what a fresh compilation renders."""

from __future__ import annotations

import os
import pathlib
from typing import Any

import pytest

from tests.chat.conftest import TEMPLATE_FILES
from vllm_frontend.chat import ChatRenderer, ModelChatTemplates
from vllm_frontend.chat.renderer import ChatTemplateOptions
from vllm_frontend.chat.template import ENVIRONMENT, CompiledTemplate, render_template
from vllm_frontend.chat.template_cache import TemplateCodeCache

CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hello"},
    {"role": "assistant", "content": "Hi!"},
    {"role": "user", "content": "What is 2+2?"},
]
SPECIAL = {"bos_token": "<s>", "eos_token": "</s>"}


def _render(template: CompiledTemplate) -> str | BaseException:
    try:
        return render_template(
            template, CONVERSATION, add_generation_prompt=True, special_tokens=SPECIAL
        )
    except Exception as e:  # some fixtures refuse this conversation: that must match too
        return e


def _same(a: str | BaseException, b: str | BaseException) -> bool:
    if isinstance(a, BaseException) or isinstance(b, BaseException):
        return type(a) is type(b) and str(a) == str(b)
    return a == b


@pytest.mark.oracle
@pytest.mark.parametrize("path", TEMPLATE_FILES, ids=lambda p: p.name)
def test_a_cached_template_behaves_as_a_freshly_compiled_one(
    path: pathlib.Path, tmp_path: pathlib.Path, frozen_clock: Any
) -> None:
    source = path.read_text()
    cache = TemplateCodeCache(tmp_path, ENVIRONMENT)
    fresh = CompiledTemplate(source)
    assert cache.load(source) is None
    CompiledTemplate(source, cache)  # compiles and stores
    assert cache.load(source) is not None
    cached = CompiledTemplate(source, cache)
    assert cached.variables == fresh.variables
    assert cached.content_format == fresh.content_format
    assert cached.supports_developer_role == fresh.supports_developer_role
    assert _same(_render(cached), _render(fresh))


def test_a_damaged_entry_is_compiled_again_and_replaced(tmp_path: pathlib.Path) -> None:
    source = TEMPLATE_FILES[0].read_text()
    cache = TemplateCodeCache(tmp_path, ENVIRONMENT)
    CompiledTemplate(source, cache)
    (entry,) = tmp_path.iterdir()
    entry.write_bytes(entry.read_bytes()[:20])
    assert cache.load(source) is None
    again = CompiledTemplate(source, cache)
    assert cache.load(source) is not None
    assert _same(_render(again), _render(CompiledTemplate(source)))


def test_entries_of_another_user_are_not_read(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = TEMPLATE_FILES[0].read_text()
    cache = TemplateCodeCache(tmp_path, ENVIRONMENT)
    CompiledTemplate(source, cache)
    monkeypatch.setattr(os, "getuid", lambda: os.geteuid() + 1)
    assert cache.load(source) is None


def test_another_environment_or_source_does_not_share_entries(tmp_path: pathlib.Path) -> None:
    source = TEMPLATE_FILES[0].read_text()
    CompiledTemplate(source, TemplateCodeCache(tmp_path, ENVIRONMENT))
    assert TemplateCodeCache(tmp_path, ENVIRONMENT + "-other").load(source) is None
    assert TemplateCodeCache(tmp_path, ENVIRONMENT).load(source + " ") is None


def test_the_environment_variable_turns_the_cache_off(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_FRONTEND_CACHE_ROOT", str(tmp_path))
    cache = TemplateCodeCache.from_env(ENVIRONMENT)
    assert cache is not None
    CompiledTemplate(TEMPLATE_FILES[0].read_text(), cache)
    assert list((tmp_path / "chat-templates").iterdir())
    monkeypatch.setenv("VLLM_FRONTEND_TEMPLATE_CACHE", "0")
    assert TemplateCodeCache.from_env(ENVIRONMENT) is None


def test_the_renderer_stores_its_own_templates_only(tmp_path: pathlib.Path) -> None:
    own = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    theirs = "{% for m in messages %}[{{ m['content'] }}]{% endfor %}"
    cache = TemplateCodeCache(tmp_path, ENVIRONMENT)
    renderer = ChatRenderer(
        ModelChatTemplates(tokenizer=own),
        SPECIAL,
        ChatTemplateOptions(trust_request_chat_template=True),
        code_cache=cache,
    )
    assert renderer.render(CONVERSATION).prompt.startswith("system: Be brief.")
    assert renderer.render(CONVERSATION, chat_template=theirs).prompt.startswith("[Be brief.]")
    assert cache.load(own) is not None
    assert cache.load(theirs) is None

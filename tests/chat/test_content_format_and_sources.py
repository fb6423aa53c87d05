"""Content-format detection and template-source resolution agree with vLLM and transformers."""

from __future__ import annotations

import json
import pathlib

import pytest

from tests.chat.conftest import TEMPLATE_FILES
from vllm_frontend.chat import (
    ChatError,
    ChatRenderer,
    ModelChatTemplates,
    compile_template,
    load_chat_template_option,
    special_tokens_map,
)

TRICKY_TEMPLATES = {
    "direct_loop": "{% for m in messages %}{% for c in m['content'] %}{{ c.text }}{% endfor %}"
    "{% endfor %}",
    "attr_loop": "{% for m in messages %}{% for c in m.content %}{{ c }}{% endfor %}{% endfor %}",
    "aliased_messages": "{% set msgs = messages[1:] %}{% for m in msgs %}"
    "{% for c in m.content %}{{ c }}{% endfor %}{% endfor %}",
    "alias_chain": "{% set a = messages %}{% set b = a|list %}{% for m in b %}"
    "{% for p in m.content|reverse %}{{ p }}{% endfor %}{% endfor %}",
    "content_variable": "{% for m in messages %}{% set content = m.content %}"
    "{% for c in content %}{{ c }}{% endfor %}{% endfor %}",
    "macro_param": "{% macro render(x) %}{% for i in x %}{{ i.text }}{% endfor %}{% endmacro %}"
    "{% for m in messages %}{{ render(m.content) }}{% endfor %}",
    "macro_kwarg": "{% macro render(x) %}{% for i in x %}{{ i.text }}{% endfor %}{% endmacro %}"
    "{% for m in messages %}{{ render(x=m['content']) }}{% endfor %}",
    "macro_named_content": "{% macro r(content) %}{% for i in content %}{{ i }}{% endfor %}"
    "{% endmacro %}{% for m in messages %}{{ m.content }}{% endfor %}",
    "string_only": "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}",
    "tuple_target": "{% for i, m in messages|enumerate %}{{ m.content }}{% endfor %}",
    "loop_over_string_test": "{% for m in messages %}{% if m.content is string %}{{ m.content }}"
    "{% else %}{% for c in m.content %}{{ c.text }}{% endfor %}{% endif %}{% endfor %}",
    "unparsable": "{% for m in messages %}",
}


def _vllm_detect(source: str) -> str:
    from vllm.renderers.hf import _detect_content_format

    return str(_detect_content_format(source, default="string"))


@pytest.mark.oracle
@pytest.mark.parametrize("path", TEMPLATE_FILES, ids=lambda p: p.stem)
def test_fixture_template_content_format_is_detected_like_vllm(path: pathlib.Path) -> None:
    source = path.read_text()
    assert compile_template(source).content_format == _vllm_detect(source)


@pytest.mark.oracle
@pytest.mark.parametrize("name", sorted(TRICKY_TEMPLATES))
def test_tricky_template_content_format_is_detected_like_vllm(name: str) -> None:
    source = TRICKY_TEMPLATES[name]
    try:
        ours = compile_template(source).content_format
    except ChatError:
        ours = "string"  # vLLM falls back to "string" for templates it cannot parse
    assert ours == _vllm_detect(source)


def test_cyclic_aliases_of_messages_do_not_hang_detection() -> None:
    # vLLM's detector loops forever on this template; ours terminates with the same answer it
    # gives for the acyclic equivalent.
    cyclic = "{% set a = messages %}{% set b = a %}{% set a = b %}{% for m in a %}"
    cyclic += "{% for c in m.content %}{{ c }}{% endfor %}{% endfor %}"
    assert compile_template(cyclic).content_format == "openai"


@pytest.mark.oracle
def test_template_variables_are_the_ones_vllm_passes_kwargs_for() -> None:
    from vllm.renderers.hf import _resolve_chat_template_kwargs

    for path in TEMPLATE_FILES:
        source = path.read_text()
        assert compile_template(source).variables == _resolve_chat_template_kwargs(source)


# --- template sources ---------------------------------------------------------------------

NAMED = [
    {"name": "default", "template": "DEFAULT {{ messages[0].content }}"},
    {"name": "tool_use", "template": "TOOLS {{ tools | length }}"},
    {"name": "rag", "template": "RAG"},
]


def _write_tokenizer(root: pathlib.Path, **config: object) -> pathlib.Path:
    from tokenizers import Tokenizer, models

    root.mkdir(parents=True, exist_ok=True)
    Tokenizer(models.WordLevel(vocab={"<unk>": 0, "<s>": 1, "</s>": 2}, unk_token="<unk>")).save(
        str(root / "tokenizer.json")
    )
    base = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "<unk>"}
    (root / "tokenizer_config.json").write_text(json.dumps({**base, **config}))
    return root


LAYOUTS = {
    "config_string": lambda root: _write_tokenizer(root, chat_template="CFG {{ messages }}"),
    "config_named_list": lambda root: _write_tokenizer(root, chat_template=NAMED),
    "config_named_no_default": lambda root: _write_tokenizer(root, chat_template=NAMED[1:]),
    "jinja_file_wins": lambda root: (
        _write_tokenizer(root, chat_template="CFG"),
        (root / "chat_template.jinja").write_text("FILE {{ messages }}\n"),
    ),
    "jinja_file_plus_extra_templates": lambda root: (
        _write_tokenizer(root, chat_template="CFG"),
        (root / "chat_template.jinja").write_text("FILE"),
        (root / "additional_chat_templates").mkdir(),
        (root / "additional_chat_templates" / "tool_use.jinja").write_text("EXTRA TOOLS"),
    ),
    "no_template": lambda root: _write_tokenizer(root),
}


@pytest.mark.oracle
@pytest.mark.parametrize("has_tools", [False, True])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_model_template_selection_matches_transformers(
    layout: str, has_tools: bool, tmp_path: pathlib.Path
) -> None:
    from transformers import AutoTokenizer

    root = tmp_path / "model"
    LAYOUTS[layout](root)
    tokenizer = AutoTokenizer.from_pretrained(root)
    tools = [{"type": "function", "function": {"name": "f"}}] if has_tools else None
    try:
        expected: str | None = tokenizer.get_chat_template(None, tools=tools)
    except ValueError:
        expected = None  # vLLM swallows this and reports that no template is available
    assert ModelChatTemplates.from_model_dir(root).select(None, has_tools=has_tools) == expected
    # A request or --chat-template value may name one of the model's templates.
    for name in ("rag", "tool_use", "{{ 'inline' }}"):
        assert ModelChatTemplates.from_model_dir(root).select(
            name, has_tools=has_tools
        ) == tokenizer.get_chat_template(name, tools=tools)


@pytest.mark.oracle
def test_chat_template_option_reads_files_and_inline_text_like_vllm(tmp_path: pathlib.Path) -> None:
    from vllm.renderers.chat_utils import _load_chat_template

    path = tmp_path / "t.jinja"
    path.write_text("{{ messages[0].content }}\n  \\n  ")
    for value in (str(path), "{{ messages }}", "line one\nline two", None):
        assert load_chat_template_option(value) == _load_chat_template(value)
    with pytest.raises(ChatError, match="looks like a file path"):
        load_chat_template_option(str(tmp_path / "missing.jinja"))


CONFIGS = {
    "plain_strings": {"bos_token": "<s>", "eos_token": "</s>", "pad_token": None},
    "added_token_objects": {
        "bos_token": {"content": "<s>", "lstrip": False, "__type": "AddedToken"},
        "eos_token": {"content": "</s>", "special": True, "__type": "AddedToken"},
        "unk_token": "<unk>",
        "mask_token": "<unk>",
    },
    "model_specific_tokens": {
        "eos_token": "</s>",
        "image_token": "<s>",
        "extra_special_tokens": {"audio_token": "</s>"},
    },
}


LEGACY_MAP = {"bos_token": "<unk>", "pad_token": {"content": "</s>", "special": True}}


@pytest.mark.oracle
@pytest.mark.parametrize("legacy_file", [False, True])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_special_tokens_in_the_template_context_match_transformers(
    name: str, legacy_file: bool, tmp_path: pathlib.Path
) -> None:
    from transformers import AutoTokenizer

    root = _write_tokenizer(tmp_path / "model", **CONFIGS[name])
    if legacy_file:
        (root / "special_tokens_map.json").write_text(json.dumps(LEGACY_MAP))
    expected = AutoTokenizer.from_pretrained(root).special_tokens_map
    assert ChatRenderer.from_model_dir(root).special_tokens == expected


@pytest.mark.oracle
def test_special_tokens_map_json_is_ignored_when_the_config_lists_added_tokens(
    tmp_path: pathlib.Path,
) -> None:
    from transformers import AutoTokenizer

    decoder = {"1": {"content": "<s>", "special": True}, "2": {"content": "</s>", "special": True}}
    root = _write_tokenizer(tmp_path / "m", bos_token="<s>", added_tokens_decoder=decoder)
    (root / "special_tokens_map.json").write_text(json.dumps(LEGACY_MAP))
    config = json.loads((root / "tokenizer_config.json").read_text())
    expected = AutoTokenizer.from_pretrained(root).special_tokens_map
    assert special_tokens_map(config, LEGACY_MAP) == expected

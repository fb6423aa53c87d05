"""A chat request renders to the same prompt as vLLM 0.32's own frontend, or fails the same way.

The reference is vLLM's real rendering path (``ChatCompletionRequest`` validation →
``OnlineRenderer.render_chat`` → ``HfRenderer`` → ``safe_apply_chat_template``) on a small
byte-level model directory, run in the test process. Templates that print ``messages | tojson``
compare the normalised messages structurally (key order included).
"""

from __future__ import annotations

import asyncio
import json
import pathlib
from typing import Any

import pytest

from tests.chat.conftest import TEMPLATE_FILES, TEMPLATES_DIR
from vllm_frontend.chat import (
    ChatError,
    ChatRenderer,
    ChatTemplateOptions,
    ModelChatTemplates,
    special_tokens_map,
)

pytestmark = pytest.mark.oracle  # imports vLLM or transformers as the reference

pytest.importorskip("vllm")

LLAMA31 = (TEMPLATES_DIR / "tool_chat_template_llama3.1_json.jinja").read_text()
CHATML = (TEMPLATES_DIR / "template_chatml.jinja").read_text()
QWEN3 = (TEMPLATES_DIR / "qwen3.jinja").read_text()
DUMP = "{{ messages | tojson }}|{{ tools | tojson }}|{{ add_generation_prompt }}"
DUMP_DEV = "{# 'developer' #}" + DUMP
SPECIALS = ["<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>"]


def _build_model_dir(root: pathlib.Path) -> pathlib.Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(sorted(alphabet))}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIALS)
    tok.save(str(root / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|begin_of_text|>",
        "eos_token": {"content": "<|eot_id|>", "special": True, "__type": "AddedToken"},
        "chat_template": LLAMA31,
    }
    (root / "tokenizer_config.json").write_text(json.dumps(config))
    model = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "num_hidden_layers": 1,
        "vocab_size": tok.get_vocab_size(),
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "torch_dtype": "float32",
    }
    (root / "config.json").write_text(json.dumps(model))
    return root


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return _build_model_dir(tmp_path_factory.mktemp("chat-model"))


@pytest.fixture(scope="module")
def vllm_renderer(model_dir: pathlib.Path) -> Any:
    from vllm.config import ModelConfig, VllmConfig
    from vllm.renderers import renderer_from_config

    model_config = ModelConfig(model=str(model_dir), tokenizer=str(model_dir), max_model_len=4096)
    return model_config, renderer_from_config(VllmConfig(model_config=model_config))


def _vllm(vllm_renderer: Any, body: dict[str, Any], options: ChatTemplateOptions) -> Any:
    """("ok", prompt) or ("error", message) from vLLM's own frontend code."""
    import pydantic
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.entrypoints.serve.engine.protocol import ErrorResponse
    from vllm.entrypoints.serve.exception_handling.error_response import create_error_response
    from vllm.renderers.online_renderer import OnlineRenderer

    model_config, renderer = vllm_renderer
    try:
        request = ChatCompletionRequest.model_validate({"model": "m", **body})
    except pydantic.ValidationError as exc:
        inner = exc.errors()[0].get("ctx", {}).get("error")
        return ("error", str(inner if inner is not None else exc), None)
    except Exception as exc:  # vLLM's own validators raise VLLMValidationError directly
        return ("error", str(exc), getattr(exc, "parameter", None))
    online = OnlineRenderer(
        model_config,
        renderer,
        request_logger=None,
        chat_template=options.chat_template,
        chat_template_content_format=options.content_format,
        trust_request_chat_template=options.trust_request_chat_template,
        exclude_tools_when_tool_choice_none=options.exclude_tools_when_tool_choice_none,
        default_chat_template_kwargs=dict(options.default_chat_template_kwargs),
    )
    try:
        result = asyncio.run(online.render_chat(request))
    except Exception as exc:
        error = create_error_response(exc)
        assert error.error.code == 400, error
        return ("error", str(exc), error.error.param)
    if isinstance(result, ErrorResponse):
        assert result.error.code == 400
        return ("error", result.error.message, result.error.param)
    _, engine_inputs = result
    return ("ok", engine_inputs[0]["prompt"])


def _ours(model_dir: pathlib.Path, body: dict[str, Any], options: ChatTemplateOptions) -> Any:
    config = json.loads((model_dir / "tokenizer_config.json").read_text())
    renderer = ChatRenderer(
        ModelChatTemplates.from_model_dir(model_dir), special_tokens_map(config), options
    )
    try:
        rendered = renderer.render(
            body["messages"],
            tools=body.get("tools"),
            tool_choice=body.get("tool_choice"),
            documents=body.get("documents"),
            add_generation_prompt=body.get("add_generation_prompt"),
            continue_final_message=body.get("continue_final_message", False),
            chat_template=body.get("chat_template"),
            chat_template_kwargs=body.get("chat_template_kwargs"),
            reasoning_effort=body.get("reasoning_effort"),
        )
    except ChatError as exc:
        return ("error", str(exc), exc.param)
    return ("ok", rendered.prompt)


TRUSTED = ChatTemplateOptions(trust_request_chat_template=True)
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        "strict": True,
    },
}
ASSISTANT_CALLS = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {
            "id": "c1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Zürich", "n": [1, 2]}'},
        },
        {"id": "c2", "type": "function", "function": {"name": "f", "arguments": "not json"}},
        {"type": "function", "function": {"arguments": "[1]", "name": "g"}, "id": "c3"},
        {"id": "c4", "type": "function", "function": {"name": "h", "arguments": ""}},
    ],
}

CASES: dict[str, tuple[dict[str, Any], ChatTemplateOptions]] = {
    "model_template_plain": (
        {"messages": [{"role": "user", "content": "Hello 👋"}]},
        ChatTemplateOptions(),
    ),
    "model_template_parts_and_system": (
        {
            "messages": [
                {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
                {"role": "user", "content": [{"type": "text", "text": "a"}, "b"]},
            ]
        },
        ChatTemplateOptions(),
    ),
    "string_format_joins_parts_with_newlines": (
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}],
                }
            ]
        },
        ChatTemplateOptions(chat_template=CHATML),
    ),
    "string_format_drops_empty_texts": (
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": ""},
                        {"type": "text", "text": "one"},
                        "",
                        {"type": "input_text", "text": "two"},
                        {"type": "text", "text": ""},
                    ],
                }
            ]
        },
        ChatTemplateOptions(chat_template=CHATML),
    ),
    "text_part_with_a_uuid_refused": (
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "a", "uuid": "u"}]}]},
        ChatTemplateOptions(),
    ),
    "forced_openai_format": (
        {"messages": [{"role": "user", "content": "hi"}], "chat_template": DUMP},
        ChatTemplateOptions(trust_request_chat_template=True, content_format="openai"),
    ),
    "developer_folded_into_system": (
        {
            "messages": [
                {"role": "system", "content": "S1"},
                {"role": "user", "content": "u"},
                {"role": "developer", "content": "D1"},
            ]
        },
        ChatTemplateOptions(chat_template=CHATML),
    ),
    "developer_kept_when_template_knows_it": (
        {
            "messages": [
                {"role": "developer", "content": "D", "tools": [TOOL]},
                {"role": "user", "content": "u"},
            ],
            "chat_template": DUMP_DEV,
        },
        TRUSTED,
    ),
    "tool_calls_and_results_structure": (
        {
            "messages": [
                {"role": "user", "content": "weather?", "name": "bob"},
                ASSISTANT_CALLS,
                {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "21"}]},
                {"role": "tool", "tool_call_id": "c2", "content": "err"},
                {"role": "assistant", "content": "ok", "tool_calls": []},
            ],
            "tools": [TOOL, {"type": "function", "function": {"name": "bare"}}],
            "tool_choice": "none",
            "chat_template": DUMP,
        },
        TRUSTED,
    ),
    "tool_call_history_in_llama_template": (
        {
            "messages": [
                {"role": "user", "content": "weather?"},
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [ASSISTANT_CALLS["tool_calls"][0]],
                },
                {"role": "tool", "tool_call_id": "c1", "content": '{"t": 21}'},
            ],
            "tools": [TOOL],
            "tool_choice": "none",
        },
        ChatTemplateOptions(),
    ),
    "tools_excluded_when_tool_choice_none": (
        {
            "messages": [{"role": "user", "content": "x"}],
            "tools": [TOOL],
            "tool_choice": "none",
            "chat_template": DUMP,
        },
        ChatTemplateOptions(
            trust_request_chat_template=True, exclude_tools_when_tool_choice_none=True
        ),
    ),
    "reasoning_content_alias_and_extras": (
        {
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "q", "cache_control": 1}]},
                {"role": "assistant", "content": "a", "reasoning_content": "thought"},
                {"role": "user", "content": "q2", "reasoning": "ignored for users"},
                {"role": "wizard", "content": "custom role"},
            ],
            "chat_template": DUMP,
        },
        ChatTemplateOptions(trust_request_chat_template=True, content_format="openai"),
    ),
    "qwen3_reasoning_effort_enables_thinking": (
        {
            "messages": [
                {"role": "user", "content": "2+2"},
                {"role": "assistant", "content": "4", "reasoning": "add"},
                {"role": "user", "content": "3+3"},
            ],
            "reasoning_effort": "none",
        },
        ChatTemplateOptions(chat_template=QWEN3, default_chat_template_kwargs={"x": 1}),
    ),
    "default_kwargs_overridden_by_request": (
        {
            "messages": [{"role": "user", "content": "hi"}],
            "chat_template_kwargs": {"enable_thinking": True},
        },
        ChatTemplateOptions(
            chat_template=QWEN3, default_chat_template_kwargs={"enable_thinking": False}
        ),
    ),
    "default_kwargs_apply": (
        {"messages": [{"role": "user", "content": "hi"}]},
        ChatTemplateOptions(
            chat_template=QWEN3, default_chat_template_kwargs={"enable_thinking": False}
        ),
    ),
    "kwargs_filtered_and_special_tokens": (
        {
            "messages": [{"role": "user", "content": "hi"}],
            "chat_template": "{{ bos_token }}{{ foo }}|{{ baz }}|{{ eos_token }}"
            "{{ reasoning_effort }}",
            "chat_template_kwargs": {"foo": "F", "unused": "U", "bos_token": "B"},
            "reasoning_effort": "low",
        },
        TRUSTED,
    ),
    "auto_values_in_kwargs": (
        {
            "messages": [{"role": "user", "content": "hi"}],
            "chat_template": "{{ foo }}|{{ bar }}",
            "chat_template_kwargs": {"foo": "auto", "bar": None},
        },
        ChatTemplateOptions(
            trust_request_chat_template=True, default_chat_template_kwargs={"foo": "D"}
        ),
    ),
    "documents_reach_the_template": (
        {
            "messages": [{"role": "user", "content": "hi"}],
            "documents": [{"title": "T", "text": "body ü"}],
            "chat_template": "{% for d in documents %}{{ d.title }}={{ d.text }};{% endfor %}"
            "{{ messages[0].content }}",
        },
        TRUSTED,
    ),
    "continue_final_message": (
        {
            "messages": [
                {"role": "user", "content": "count"},
                {"role": "assistant", "content": "one, two, "},
            ],
            "continue_final_message": True,
            "add_generation_prompt": False,
        },
        ChatTemplateOptions(),
    ),
    "continue_final_message_chatml": (
        {
            "messages": [
                {"role": "user", "content": "count"},
                {"role": "assistant", "content": "one, two"},
            ],
            "continue_final_message": True,
            "add_generation_prompt": False,
        },
        ChatTemplateOptions(chat_template=CHATML),
    ),
    "continue_without_disabling_generation_prompt": (
        {
            "messages": [
                {"role": "user", "content": "count"},
                {"role": "assistant", "content": "one"},
            ],
            "continue_final_message": True,
        },
        ChatTemplateOptions(),
    ),
    "continue_and_generation_prompt": (
        {
            "messages": [{"role": "user", "content": "x"}],
            "continue_final_message": True,
            "add_generation_prompt": True,
        },
        ChatTemplateOptions(),
    ),
    "no_generation_prompt": (
        {"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": False},
        ChatTemplateOptions(chat_template=CHATML),
    ),
    "untrusted_request_template": (
        {"messages": [{"role": "user", "content": "x"}], "chat_template": "{{ 1 }}"},
        ChatTemplateOptions(),
    ),
    "untrusted_template_in_kwargs": (
        {
            "messages": [{"role": "user", "content": "x"}],
            "chat_template_kwargs": {"chat_template": "{{ 1 }}"},
        },
        ChatTemplateOptions(),
    ),
    "trusted_template_in_kwargs": (
        {
            "messages": [{"role": "user", "content": "x"}],
            "chat_template_kwargs": {"chat_template": "[{{ messages[0].content }}]"},
        },
        TRUSTED,
    ),
    "empty_messages": ({"messages": []}, ChatTemplateOptions()),
    "template_raises": (
        {
            "messages": [{"role": "user", "content": "x"}],
            "chat_template": "{{ raise_exception('no!') }}",
        },
        TRUSTED,
    ),
    "template_syntax_error": (
        {"messages": [{"role": "user", "content": "x"}], "chat_template": "{% if %}"},
        TRUSTED,
    ),
    "custom_tool_call_rejected": (
        {
            "messages": [
                {
                    "role": "assistant",
                    "tool_calls": [
                        {"id": "a", "type": "custom", "custom": {"name": "f", "input": ""}}
                    ],
                }
            ]
        },
        ChatTemplateOptions(),
    ),
    "claude_billing_header_dropped": (
        {
            "messages": [
                {"role": "system", "content": "x-anthropic-billing-header: cch=1\nReal system"},
                {
                    "role": "system",
                    "content": [{"type": "text", "text": "x-anthropic-billing-header: a"}],
                },
                {"role": "user", "content": "x"},
            ],
            "chat_template": DUMP,
        },
        TRUSTED,
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_chat_request_renders_like_vllm(
    case: str, model_dir: pathlib.Path, vllm_renderer: Any
) -> None:
    body, options = CASES[case]
    expected = _vllm(vllm_renderer, json.loads(json.dumps(body)), options)
    got = _ours(model_dir, json.loads(json.dumps(body)), options)
    assert got == expected


def test_special_tokens_match_the_transformers_tokenizer(model_dir: pathlib.Path) -> None:
    from transformers import AutoTokenizer

    config = json.loads((model_dir / "tokenizer_config.json").read_text())
    assert special_tokens_map(config) == AutoTokenizer.from_pretrained(model_dir).special_tokens_map


CALL_ID = "a1b2c3d4e"  # Mistral templates insist on 9 alphanumeric characters
REQUESTS: dict[str, dict[str, Any]] = {
    "plain": {"messages": [{"role": "user", "content": "Hello there"}]},
    "multi_turn_with_system": {
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Prime?"},
            {"role": "assistant", "content": "7"},
            {"role": "user", "content": [{"type": "text", "text": "An"}, "other?"]},
        ]
    },
    "multibyte": {
        "messages": [
            {"role": "user", "content": "Grüße 🇨🇭 你好 café\u0301"},
            {"role": "assistant", "content": "Ça va 👋🏽"},
            {"role": "user", "content": "עברית"},
        ]
    },
    "tool_round_trip": {
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": CALL_ID,
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": CALL_ID, "content": "21 C"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Weather for a city",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                },
            }
        ],
        "tool_choice": "none",
    },
    "developer_message": {
        "messages": [
            {"role": "developer", "content": "Answer in French."},
            {"role": "user", "content": "Hi"},
        ]
    },
    "continue_final_message": {
        "messages": [
            {"role": "user", "content": "Count"},
            {"role": "assistant", "content": "One, two, "},
        ],
        "continue_final_message": True,
        "add_generation_prompt": False,
    },
    "reasoning_history_and_effort": {
        "messages": [
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "4", "reasoning_content": "Add."},
            {"role": "user", "content": "3+3?"},
        ],
        "reasoning_effort": "high",
        "chat_template_kwargs": {"custom_tools": None, "unknown": 1},
    },
    "documents": {
        "messages": [{"role": "user", "content": "Summarise"}],
        "documents": [{"title": "A", "text": "First"}, {"title": "B", "text": "Second"}],
    },
}


@pytest.mark.parametrize("request_name", sorted(REQUESTS))
@pytest.mark.parametrize("path", TEMPLATE_FILES, ids=lambda p: p.stem)
def test_every_fixture_template_serves_like_vllm(
    path: pathlib.Path,
    request_name: str,
    model_dir: pathlib.Path,
    vllm_renderer: Any,
    frozen_clock: object,
) -> None:
    options = ChatTemplateOptions(chat_template=path.read_text())
    body = REQUESTS[request_name]
    expected = _vllm(vllm_renderer, json.loads(json.dumps(body)), options)
    got = _ours(model_dir, json.loads(json.dumps(body)), options)
    assert got == expected

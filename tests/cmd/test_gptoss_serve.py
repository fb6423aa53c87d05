"""``serve`` a gpt-oss model (``model_type`` ``gpt_oss``) in front of the mock engine: with the
gpt-oss parsers it starts, renders chat prompts through Harmony (the library is loaded, the
prompt is Harmony's) and answers chat completions (structured outputs included) and Responses
requests, whole and streamed; other parsers are refused at startup for gpt-oss models, and the
gpt-oss ones for other models, with a reason."""

from __future__ import annotations

import json
import pathlib

import pytest
from tests.support.mock_serve import mock_serve
from tests.support.tiny_gptoss import tiny_gptoss_dir

from vllm_frontend.chat.output_parser import OutputParsers, ParserConfigError

PARSERS = ("--reasoning-parser", "openai_gptoss", "--tool-call-parser", "openai",
           "--enable-auto-tool-choice")  # fmt: skip
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


def test_serve_answers_gpt_oss_chat_through_harmony(tmp_path: pathlib.Path) -> None:
    model = tiny_gptoss_dir()
    with mock_serve(model, tmp_path / "frontend.log", serve_args=PARSERS) as serve:
        assert "openai_harmony" in pathlib.Path(f"/proc/{serve.process.pid}/maps").read_text()
        chat = {"model": str(model), "messages": [{"role": "user", "content": "Hi"}],
                "max_tokens": 4, "tools": TOOLS, "return_token_ids": True}  # fmt: skip
        status, body = serve.request("POST", "/v1/chat/completions", json.dumps(chat))
        assert status == 200, body
        response = json.loads(body)
        # The prompt is Harmony's: system message first, the assistant's turn last.
        ids = response["prompt_token_ids"]
        assert ids[:2] == [200006, 17360] and ids[-2:] == [200006, 173781]  # <|start|>system …
        assert response["usage"]["completion_tokens_details"] == {"reasoning_tokens": 0}
        status, body = serve.request(
            "POST", "/v1/chat/completions", json.dumps({**chat, "stream": True})
        )
        assert status == 200 and body.endswith(b"data: [DONE]\n\n"), body
        status, body = serve.request(
            "POST", "/v1/chat/completions", json.dumps({**chat, "reasoning_effort": "none"})
        )
        assert status == 400, body
        assert json.loads(body)["error"]["message"] == (
            "Harmony does not support reasoning_effort='none' (parameter=reasoning_effort)"
        )
        # A constraint goes to the engine in a Harmony structural tag, as vLLM sends it
        # (tests/chat/test_harmony_serving.py compares the tag), a Lark grammar converted to
        # EBNF by xgrammar's native library first.
        status, body = serve.request(
            "POST",
            "/v1/chat/completions",
            json.dumps({**chat, "response_format": {"type": "json_object"}}),
        )
        assert status == 200, body
        status, body = serve.request(
            "POST",
            "/v1/chat/completions",
            json.dumps({**chat, "structured_outputs": {"grammar": 'start: "a"'}}),
        )
        assert status == 200, body
        # The Responses API goes through Harmony too (tests/server/test_responses_harmony.py
        # compares it with vLLM's).
        responses = {"model": str(model), "input": "Hi", "max_output_tokens": 4,
                     "tools": [{"type": "function", "name": "f"}]}  # fmt: skip
        status, body = serve.request("POST", "/v1/responses", json.dumps(responses))
        assert status == 200, body
        assert json.loads(body)["usage"]["input_tokens_details"]["input_tokens_per_turn"]
        status, body = serve.request(
            "POST", "/v1/responses", json.dumps({**responses, "stream": True})
        )
        assert status == 200 and b"event: response.completed" in body, body


def test_gpt_oss_models_take_only_the_gpt_oss_parsers() -> None:
    OutputParsers({}, reasoning_parser="openai_gptoss", tool_call_parser="openai",
                  enable_auto_tool_choice=True, harmony=True)  # fmt: skip
    with pytest.raises(ParserConfigError, match=r"Harmony requires .*got 'deepseek_r1'"):
        OutputParsers({"<think>": 1, "</think>": 2}, reasoning_parser="deepseek_r1", harmony=True)
    with pytest.raises(ParserConfigError, match=r"Harmony requires .*got 'hermes'"):
        OutputParsers({"<tool_call>": 1, "</tool_call>": 2}, tool_call_parser="hermes",
                      enable_auto_tool_choice=True, harmony=True)  # fmt: skip


def test_the_gpt_oss_parsers_are_refused_for_other_models() -> None:
    with pytest.raises(ParserConfigError, match=r"gpt-oss .* only"):
        OutputParsers({}, reasoning_parser="openai_gptoss")
    with pytest.raises(ParserConfigError, match=r"gpt-oss .* only"):
        OutputParsers({}, tool_call_parser="openai", enable_auto_tool_choice=True)
    # Without --enable-auto-tool-choice vLLM builds no tool parser, whatever its name.
    assert not OutputParsers({}, tool_call_parser="openai").active

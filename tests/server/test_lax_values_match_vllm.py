"""Loosely typed values in request bodies read as vLLM's pydantic models read them.

vLLM validates bodies in pydantic's lax mode: ``"yes"`` is a boolean, ``"5.00"`` and ``5.0``
are integers, ``true`` is a number. msgspec's lax mode takes fewer of these; whatever it refuses
and pydantic takes is converted the pydantic way (``server/validation.py``). Each case parses one
body through vLLM's request model and through ours and compares what each field became (value
and type), or that both refuse it.

msgspec also takes what pydantic refuses: an exponent string ("5e0") as an integer (a body's
integer fields are looked at for strings before converting it), an integral float beyond 64 bits
(1e19) as an integer it then range-checks.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from vllm_frontend.server.messages_protocol import parse_messages_request
from vllm_frontend.server.protocol import parse_chat_request, parse_completion_request
from vllm_frontend.server.responses_protocol import parse_responses_request

pytestmark = pytest.mark.oracle  # imports vLLM as the reference

pytest.importorskip("vllm")

M = [{"role": "user", "content": "hi"}]

# Field values pydantic's lax mode reads in its own way, with a few it refuses.
BOOLS = ["yes", "No", "on", "OFF", "t", "F", "y", "n", "1", "0", 1, 0, 1.0, 0.0, "TRUE",
         " yes", "2", 2, "none", None]  # fmt: skip
INTS = ["5", " 5 ", "5.00", "+5", "1_000", "5.5", "5.", "٥", 5.0, 5.5, True, False,
        "0x10", None, "5e0", "1E1", "0.5e1", 1e19, 9.3e18, -9.223372036854775808e18,
        9.2e18]  # fmt: skip
FLOATS = ["0.5", " 0.5 ", ".5", "1e-1", "1_0.5", True, False, 3, "nan", "inf", "x", None]


def _outcome(parse: Callable[[], Any], fields: list[str]) -> Any:
    try:
        parsed = parse()
    except Exception:
        return "refused"
    out = []
    for name in fields:
        value = getattr(parsed, name)
        if hasattr(value, "model_dump"):  # a pydantic sub-model: compare its fields
            value = value.model_dump()
        elif hasattr(value, "__struct_fields__"):
            value = {k: getattr(value, k) for k in value.__struct_fields__}
        if isinstance(value, dict):  # a tagged Struct keeps its tag out of its fields
            value.pop("type", None)
        out.append((type(value).__name__, repr(value)))
    return out


def _cases() -> list[tuple[str, dict[str, Any]]]:
    cases: list[tuple[str, dict[str, Any]]] = []
    for v in BOOLS:
        cases += [("chat", {"stream": v}), ("chat", {"echo": v}), ("completion", {"echo": v})]
        cases += [("chat", {"skip_special_tokens": v}), ("completion", {"ignore_eos": v})]
        cases += [("chat", {"stream": True, "stream_options": {"include_usage": v}})]
        cases += [("responses", {"store": v}), ("messages", {"stream": v})]
    for v in INTS:
        cases += [("chat", {"max_tokens": v}), ("completion", {"max_tokens": v})]
        cases += [("chat", {"seed": v}), ("completion", {"n": v}), ("chat", {"top_k": v})]
        cases += [("chat", {"stop_token_ids": [v]}), ("responses", {"max_output_tokens": v})]
        cases += [("messages", {"max_tokens": v})]
    cases += [("messages", {"max_tokens": "5e0"})]
    thinking = {"type": "enabled", "budget_tokens": "2048.0"}
    cases += [("messages", {"max_tokens": "4096", "thinking": thinking})]
    cases += [("messages", {"max_tokens": 1024.0, "thinking": thinking})]
    for v in FLOATS:
        cases += [("chat", {"temperature": v}), ("completion", {"top_p": v})]
        cases += [("chat", {"logit_bias": {"7": v}}), ("responses", {"temperature": v})]
        cases += [("messages", {"temperature": v})]
    return cases


def _ours(api: str, body: dict[str, Any]) -> Callable[[], Any]:
    raw = json.dumps(body).encode()
    parse = {
        "chat": parse_chat_request,
        "completion": parse_completion_request,
        "responses": parse_responses_request,
        "messages": parse_messages_request,
    }[api]
    return lambda: parse(raw)


def _theirs(api: str, body: dict[str, Any]) -> Callable[[], Any]:
    from vllm.entrypoints.anthropic.protocol import AnthropicMessagesRequest
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.entrypoints.openai.completion.protocol import CompletionRequest
    from vllm.entrypoints.openai.responses.protocol import ResponsesRequest

    model = {
        "chat": ChatCompletionRequest,
        "completion": CompletionRequest,
        "responses": ResponsesRequest,
        "messages": AnthropicMessagesRequest,
    }[api]
    return lambda: model.model_validate(body)


BASES = {
    "chat": {"model": "m", "messages": M},
    "completion": {"model": "m", "prompt": "hi"},
    "responses": {"model": "m", "input": "hi"},
    "messages": {"model": "m", "messages": M, "max_tokens": 4},
}


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize(("api", "extra"), _cases(), ids=repr)
def test_lax_values_read_like_vllm(api: str, extra: dict[str, Any]) -> None:
    body = {**BASES[api], **extra}
    fields = list(extra)
    assert _outcome(_ours(api, body), fields) == _outcome(_theirs(api, body), fields)

"""A constraint xgrammar refuses to build gets vLLM 0.32's 400 over HTTP with the ``xgrammar``
backend: the body vLLM's error handler makes of ``validate_xgrammar_grammar``'s message (its
``sanitize_message`` hides xgrammar's source path). xgrammar's message starts with the time it was
raised (``[HH:MM:SS]``): compared with that stamp removed. No engine request is sent."""

from __future__ import annotations

import asyncio
import json
import pathlib
import re
from typing import Any

import pytest

from tests.server.test_generation_failures import ScriptedClient, _call
from tests.text.test_structured_outputs_match_vllm import vllm_outcome
from vllm_frontend.chat import ChatRenderer, ModelChatTemplates, special_tokens_map
from vllm_frontend.engine.protocol import EngineCoreRequest
from vllm_frontend.llm import LLM
from vllm_frontend.server.app import App, ServerSettings
from vllm_frontend.server.chat import ChatHandler
from vllm_frontend.server.completions import CompletionsHandler
from vllm_frontend.server.generation import ServingContext
from vllm_frontend.server.protocol import parse_chat_request, parse_completion_request
from vllm_frontend.text.sampling import ModelSamplingInfo
from vllm_frontend.text.tokenizer import Tokenizer

pytestmark = pytest.mark.oracle  # imports vLLM or transformers as the reference

pytest.importorskip("vllm")
pytest.importorskip("xgrammar")

_STAMP = re.compile(r"\[\d\d:\d\d:\d\d\] ")
CONSTRAINTS = [
    {"structured_outputs": {"regex": "(unclosed"}},
    {"structured_outputs": {"grammar": "root ::= missing"}},
    {"structured_outputs": {"grammar": "start: missing"}},
    {"structured_outputs": {"json": {"type": "integer", "minimum": 5, "maximum": 1}}},
    {"response_format": {"type": "json_schema",
                         "json_schema": {"name": "x", "schema": {"$ref": "#/defs/x"}}}},
]  # fmt: skip


@pytest.fixture(scope="module")
def served(tiny_model: pathlib.Path) -> tuple[App, ScriptedClient, Any]:
    """Our app on the tiny model with the xgrammar backend, its scripted client, and the fast
    tokenizer vLLM's checks take."""
    from transformers import AutoTokenizer

    client = ScriptedClient()
    tokenizer = Tokenizer.from_dir(tiny_model)
    cfg = json.loads((tiny_model / "tokenizer_config.json").read_text())
    sampling = ModelSamplingInfo(
        max_model_len=128, eos_token_id=tokenizer.eos_token_id,
        structured_outputs_backend="xgrammar",
    )  # fmt: skip

    def ctx() -> ServingContext:
        return ServingContext(
            llm=LLM(client, EngineCoreRequest), tokenizer=tokenizer, served_model_names=["m"],
            max_model_len=128, sampling=sampling,
            chat_renderer=ChatRenderer(ModelChatTemplates.from_model_dir(tiny_model, cfg),
                                       special_tokens_map(cfg)))  # fmt: skip

    app = App(ServerSettings(served_model_names=["m"], max_model_len=128))
    app.route("POST", "/v1/completions", CompletionsHandler(ctx(), parse_completion_request))
    app.route("POST", "/v1/chat/completions", ChatHandler(ctx(), parse_chat_request))
    return app, client, AutoTokenizer.from_pretrained(str(tiny_model))


@pytest.mark.parametrize("chat", [True, False], ids=["chat", "completions"])
@pytest.mark.parametrize("fields", CONSTRAINTS, ids=lambda f: json.dumps(f)[:40])
def test_a_constraint_xgrammar_refuses_is_vllms_400(
    served: tuple[App, ScriptedClient, Any], fields: dict[str, Any], chat: bool
) -> None:
    from vllm.entrypoints.serve.exception_handling.utils import sanitize_message

    app, client, hf = served
    body: dict[str, Any] = {"max_tokens": 4, **fields}
    body.update({"messages": [{"role": "user", "content": "hi"}]} if chat else {"prompt": "hi"})
    refused = vllm_outcome(body, chat, "xgrammar", hf)
    assert isinstance(refused, tuple)
    expected = {"message": _STAMP.sub("", sanitize_message(refused[1])),
                "type": "BadRequestError", "param": None, "code": 400}  # fmt: skip
    sent = len(client.added)
    status, raw = asyncio.run(
        _call(app, "/v1/chat/completions" if chat else "/v1/completions", body)
    )
    error = json.loads(raw)["error"]
    error["message"] = _STAMP.sub("", error["message"])
    assert (status, error) == (400, expected)
    assert len(client.added) == sent

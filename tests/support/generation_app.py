"""The completions and chat routes of an App over any engine-client stand-in, for in-process
tests and the pipeline benchmark (no sockets, no engine process)."""

from __future__ import annotations

import json
import pathlib
from typing import Any

from tests.support.shared_tokenizer import shared_tokenizer
from vllm_frontend.chat import ChatRenderer, ModelChatTemplates, special_tokens_map
from vllm_frontend.engine.protocol import EngineCoreRequest
from vllm_frontend.engine.validate import RequestLimits
from vllm_frontend.llm import LLM
from vllm_frontend.metrics.frontend import FrontendMetrics
from vllm_frontend.server.app import App, ServerSettings
from vllm_frontend.server.chat import ChatHandler
from vllm_frontend.server.completions import CompletionsHandler
from vllm_frontend.server.generation import ServingContext
from vllm_frontend.server.protocol import parse_chat_request, parse_completion_request
from vllm_frontend.text.sampling import ModelSamplingInfo
from vllm_frontend.text.tokenizer import Tokenizer


def generation_app(
    model: pathlib.Path,
    client: Any,
    *,
    max_model_len: int,
    metrics: FrontendMetrics | None = None,
    tokenizer: Tokenizer | None = None,
    **context: Any,
) -> App:
    """``/v1/completions`` and ``/v1/chat/completions`` serving model ``"m"`` from ``client``;
    ``context`` adds ServingContext options (stream_interval, sse_keep_alive_interval, …)."""
    ctx = generation_context(
        model,
        client,
        max_model_len=max_model_len,
        metrics=metrics,
        tokenizer=tokenizer,
        **context,
    )
    app = App(ServerSettings(served_model_names=["m"], max_model_len=max_model_len))
    app.route("POST", "/v1/completions", CompletionsHandler(ctx, parse_completion_request))
    app.route("POST", "/v1/chat/completions", ChatHandler(ctx, parse_chat_request))
    return app


def generation_context(
    model: pathlib.Path,
    client: Any,
    *,
    max_model_len: int,
    metrics: FrontendMetrics | None = None,
    tokenizer: Tokenizer | None = None,
    limits: RequestLimits | None = None,
    tracer: Any = None,
    **context: Any,
) -> ServingContext:
    """The serving context of :func:`generation_app` (model ``"m"`` from ``client``);
    ``limits``: the engines' request limits the text layer checks (None: none); ``tracer``:
    the request tracer (``metrics.tracing.RequestTracer`` or a stand-in); ``tokenizer``: the
    process's shared one for ``model`` (tests/support/shared_tokenizer.py) unless given."""
    tokenizer = tokenizer or shared_tokenizer(model)
    cfg = json.loads((model / "tokenizer_config.json").read_text())
    return ServingContext(
        llm=LLM(client, EngineCoreRequest, metrics, tracer=tracer),
        tokenizer=tokenizer,
        served_model_names=["m"],
        max_model_len=max_model_len,
        sampling=ModelSamplingInfo(
            max_model_len=max_model_len, eos_token_id=tokenizer.eos_token_id, limits=limits
        ),
        chat_renderer=ChatRenderer(
            ModelChatTemplates.from_model_dir(model, cfg), special_tokens_map(cfg)
        ),
        **context,
    )

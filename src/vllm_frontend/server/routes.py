"""The non-generation routes (health, models, version, load, metrics, tokenize, detokenize) and
:func:`build_app`, which assembles the route table once at startup.

Response shapes follow vLLM 0.32 (vllm/entrypoints/serve/instrumentator/basic.py, health.py,
openai/models/, serve/tokenize/). Engine, tokenizer and chat rendering are injected through the
small interfaces below, so this module imports nothing above the server layer's own needs.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import msgspec

from vllm_frontend.metrics.http_series import HttpMetrics
from vllm_frontend.metrics.registry import MetricsRegistry
from vllm_frontend.text.prompts import encode_prompt

from . import errors
from .app import App, Handler, ServerSettings
from .metrics_route import METRICS_PREFIX, metrics_handlers
from .protocol import (
    TokenizeChatRequest,
    TokenizeCompletionRequest,
    parse_detokenize_request,
    parse_tokenize_request,
)
from .transport import Request, Response, json_response

VLLM_VERSION = "0.32.0"
"""What ``GET /version`` reports: the vLLM release whose API this frontend implements."""


class EngineHealth(Protocol):
    """What ``/health`` asks the engine client (``EngineCoreClient`` satisfies it)."""

    @property
    def is_dead(self) -> bool:
        """True once the engines are dead or unreachable."""
        ...


class TokenizerLike(Protocol):
    """The tokenizer operations ``/tokenize`` and ``/detokenize`` need (text.Tokenizer)."""

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text``."""
        ...

    def encode_batch(
        self, texts: Sequence[str], add_special_tokens: bool = True
    ) -> list[list[int]]:
        """Token ids of several texts (releasing the GIL)."""
        ...

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """Text of ``token_ids``."""
        ...

    def convert_ids_to_tokens(self, token_ids: Sequence[int]) -> list[str | None]:
        """Vocabulary strings of ``token_ids``."""
        ...


ChatTokenizer = Callable[[TokenizeChatRequest], Awaitable[list[int]] | list[int]]
"""Renders a ``/tokenize`` messages request through the chat template and tokenizes it (the
chat layer's ``chat_tokenizer``); raises the chat layer's errors for bad messages."""


class Services(msgspec.Struct):
    """What the routes are served from; built once at startup and injected."""

    engine: EngineHealth | None = None
    tokenizer: TokenizerLike | None = None
    chat_tokenizer: ChatTokenizer | None = None
    model_root: str | None = None
    """``root`` in ``/v1/models``: the model path or hub name (vLLM's ``model_path``)."""
    metrics_registry: MetricsRegistry | None = None
    """Registry rendered by ``/metrics`` (default: an empty one of the app's own)."""


class _Permission(msgspec.Struct):
    id: str
    object: str
    created: int
    allow_create_engine: bool = False
    allow_sampling: bool = True
    allow_logprobs: bool = True
    allow_search_indices: bool = False
    allow_view: bool = True
    allow_fine_tuning: bool = False
    organization: str = "*"
    group: str | None = None
    is_blocking: bool = False


class _ModelCard(msgspec.Struct):
    id: str
    object: str
    created: int
    owned_by: str
    root: str | None
    parent: str | None
    max_model_len: int | None
    permission: list[_Permission]


class _ModelList(msgspec.Struct):
    object: str
    data: list[_ModelCard]


class _TokenizeResponse(msgspec.Struct):
    count: int
    max_model_len: int | None
    tokens: list[int]
    token_strs: list[str | None] | None


class _DetokenizeResponse(msgspec.Struct):
    prompt: str


def _permission(now: int) -> _Permission:
    return _Permission(id=f"modelperm-{uuid.uuid4().hex}", object="model_permission", created=now)


def _check_model(settings: ServerSettings, model: str | None) -> None:
    # vLLM's OpenAIServing._check_model (serve/engine/serving.py)
    if model and model not in settings.served_model_names:
        names = ", ".join(settings.served_model_names)
        raise errors.NotFound(
            f"The model `{model}` does not exist. Valid aliases: {names}.", param="model"
        )


def build_app(
    settings: ServerSettings,
    services: Services,
    generation_routes: dict[tuple[str, str], Handler] | None = None,
) -> App:
    """The app with every route: ours plus ``generation_routes`` (e.g.
    ``{("POST", "/v1/completions"): handler}``, which get the JSON content-type check)."""
    registry = services.metrics_registry
    if registry is None:
        registry = MetricsRegistry()
    http_metrics = HttpMetrics(registry) if settings.http_metrics else None
    app = App(settings, http_metrics)

    async def health(request: Request) -> Response:
        engine = services.engine
        if engine is not None and engine.is_dead:
            return Response(status=503)
        return Response()

    async def version(request: Request) -> Response:
        return json_response({"version": VLLM_VERSION})

    async def load(request: Request) -> Response:
        return json_response({"server_load": app.server_load})

    async def models(request: Request) -> Response:
        now = int(time.time())
        cards = [
            _ModelCard(
                id=name,
                object="model",
                created=now,
                owned_by="vllm",
                root=services.model_root,
                parent=None,
                max_model_len=settings.max_model_len,
                permission=[_permission(now)],
            )
            for name in settings.served_model_names
        ]
        return json_response(_ModelList(object="list", data=cards))

    metrics, metrics_mount = metrics_handlers(registry)

    async def tokenize(request: Request) -> Response:
        req = parse_tokenize_request(request.body)
        _check_model(settings, req.model)
        tokenizer = services.tokenizer
        if tokenizer is None:
            raise errors.NotImplementedFeature("Tokenization is not available.")
        if isinstance(req, TokenizeCompletionRequest):
            ids = await encode_prompt(tokenizer, req.prompt, req.add_special_tokens)
        else:
            if services.chat_tokenizer is None:
                raise errors.NotImplementedFeature("Chat tokenization is not available.")
            result = services.chat_tokenizer(req)
            ids = result if isinstance(result, list) else await result
        strs = tokenizer.convert_ids_to_tokens(ids) if req.return_token_strs else None
        return json_response(_TokenizeResponse(len(ids), settings.max_model_len, ids, strs))

    async def detokenize(request: Request) -> Response:
        req = parse_detokenize_request(request.body)
        _check_model(settings, req.model)
        tokenizer = services.tokenizer
        if tokenizer is None:
            raise errors.NotImplementedFeature("Detokenization is not available.")
        return json_response(_DetokenizeResponse(tokenizer.decode(req.tokens)))

    app.route("GET", "/health", health)
    # SageMaker's health probe (vLLM serves it on both methods)
    app.route("GET", "/ping", health)
    app.route("POST", "/ping", health)
    app.route("GET", "/version", version)
    app.route("GET", "/load", load)
    app.route("GET", "/v1/models", models)
    app.route("GET", METRICS_PREFIX, metrics)
    app.mount(METRICS_PREFIX, metrics_mount)
    app.route("POST", "/tokenize", tokenize, json_body=True)
    app.route("POST", "/detokenize", detokenize, json_body=True)
    for (method, path), handler in (generation_routes or {}).items():
        app.route(method, path, handler, json_body=True)
    return app

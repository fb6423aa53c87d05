"""Assemble the frontend from its configuration: model files, tokenizer, chat renderer, request
pipeline and HTTP app, over an already connected engine client. The one place that wires layers.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from vllm_frontend.chat import ChatRenderer, ModelChatTemplates, special_tokens_map
from vllm_frontend.chat.harmony_encoding import is_harmony_model
from vllm_frontend.chat.harmony_renderer import HarmonyRenderer
from vllm_frontend.chat.llm import ChatLlm, chat_tokenizer
from vllm_frontend.chat.mistral_renderer import MistralChatRenderer
from vllm_frontend.chat.output_parser import OutputParsers
from vllm_frontend.chat.reasoning.base import ModelFacts
from vllm_frontend.chat.renderer import ChatTemplateOptions
from vllm_frontend.chat.sources import load_chat_template_option
from vllm_frontend.chat.template import ENVIRONMENT as TEMPLATE_ENVIRONMENT
from vllm_frontend.chat.template_cache import TemplateCodeCache
from vllm_frontend.cmd.config import ConfigError, FrontendConfig
from vllm_frontend.engine.client import EngineCoreClient
from vllm_frontend.engine.protocol import EngineCoreRequest
from vllm_frontend.engine.validate import RequestLimits
from vllm_frontend.llm import LLM, LoraAdapters
from vllm_frontend.llm.admission import AdmissionControl, SharedRequestCounts
from vllm_frontend.metrics.engine_gauges import EngineGauges
from vllm_frontend.metrics.frontend import FrontendMetrics
from vllm_frontend.metrics.lora_info import LoraInfo
from vllm_frontend.metrics.registry import MetricsRegistry
from vllm_frontend.metrics.stats_log import StatsLog
from vllm_frontend.metrics.weight_ops import WeightOperationMetrics
from vllm_frontend.multimodal.family import is_multimodal_config
from vllm_frontend.multimodal.media.policy import MediaPolicy
from vllm_frontend.server import errors as api_errors
from vllm_frontend.server.app import App, ServerSettings
from vllm_frontend.server.chat import ChatHandler
from vllm_frontend.server.completions import CompletionsHandler
from vllm_frontend.server.derender import DerenderHandlers
from vllm_frontend.server.dev import add_dev_routes, add_profiler_routes, dev_mode
from vllm_frontend.server.dev_abort import dev_abort_requests_handler
from vllm_frontend.server.elastic_ep import add_elastic_ep_routes
from vllm_frontend.server.generate import (
    ABORT_PATH,
    GENERATE_PATH,
    GenerateHandler,
    abort_requests_handler,
)
from vllm_frontend.server.generation import ServingContext
from vllm_frontend.server.lora import load_adapter, lora_routes, runtime_lora_updating
from vllm_frontend.server.messages import MessagesHandler
from vllm_frontend.server.protocol import parse_chat_request, parse_completion_request
from vllm_frontend.server.render import (
    RenderHandlers,
    scale_out_disabled,
    scale_out_not_served,
)
from vllm_frontend.server.responses import ResponsesHandler
from vllm_frontend.server.responses_protocol import parse_responses_request
from vllm_frontend.server.responses_store import store_from_env
from vllm_frontend.server.routes import Services, build_app
from vllm_frontend.server.sagemaker import invocations_handler
from vllm_frontend.server.tokenizer_info import tokenizer_info, tokenizer_info_handler
from vllm_frontend.server.weights import weight_handlers
from vllm_frontend.text.llm import TextLlm
from vllm_frontend.text.model_files import (
    ModelFiles,
    load_model_files,
    override_max_tokens,
    resolve_model_dir,
)
from vllm_frontend.text.request_log import RequestLog
from vllm_frontend.text.sampling import ModelSamplingInfo, uses_v2_model_runner
from vllm_frontend.text.tokenizer import Tokenizer
from vllm_frontend.text.tokenizer_cache import TokenizerCache
from vllm_frontend.text.tokenizer_mistral import MistralTokenizer, is_mistral_repo

if TYPE_CHECKING:
    from vllm_frontend.multimodal.llm import MultimodalLlm

logger = logging.getLogger(__name__)


class ModelResources(msgspec.Struct):
    """What is loaded from the model's files before the engines are up."""

    files: ModelFiles
    tokenizer: Tokenizer
    renderer: ChatRenderer
    tokenizer_dir: str = ""
    """The directory the tokenizer was loaded from (the model's, or ``--tokenizer``'s)."""
    mistral: MistralChatRenderer | None = None
    """Renders chat prompts with mistral_common (``--tokenizer-mode mistral``)."""


def load_model_resources(config: FrontendConfig) -> ModelResources:
    """Read config, tokenizer, generation config and chat templates (no engine needed)."""
    files = load_model_files(
        config.model,
        revision=config.revision,
        generation_config=config.generation_config,
        override_generation_config=config.override_generation_config,
    )
    tokenizer_dir = (
        resolve_model_dir(config.tokenizer, config.tokenizer_revision or config.revision)
        if config.tokenizer
        else files.path
    )
    tokenizer: Tokenizer
    if uses_mistral_tokenizer(config.tokenizer_mode, Path(tokenizer_dir)):
        # (vllm_frontend.text.tokenizer_mistral imports mistral_common only when it loads one)
        tokenizer = MistralTokenizer.from_dir(tokenizer_dir)
    else:
        # fastokens loads once the server is up (`start_fast_encoder`): not on startup's time.
        tokenizer = Tokenizer.from_dir(
            tokenizer_dir, cache=TokenizerCache.from_env(), start_fast_encoder=False
        )
    tokenizer_config: dict[str, Any] = dict(files.tokenizer_config)
    templates = ModelChatTemplates.from_model_dir(tokenizer_dir, tokenizer_config)
    # An unservable parser fails before engines start.
    output_parsers(
        config,
        tokenizer,
        _facts(
            tokenizer_config,
            templates.tokenizer,
            tokenizer,
            _architecture(files.config),
            _model_types(files.config),
        ),
        harmony=is_harmony_model(files.config),
    )
    options = ChatTemplateOptions(
        chat_template=load_chat_template_option(config.chat_template),
        content_format=config.chat_template_content_format,  # type: ignore[arg-type]
        trust_request_chat_template=config.trust_request_chat_template,
        default_chat_template_kwargs=default_chat_template_kwargs(config),
        exclude_tools_when_tool_choice_none=config.exclude_tools_when_tool_choice_none,
        model_name=config.served_model_names[0],
    )
    renderer = ChatRenderer(
        templates,
        special_tokens_map(tokenizer_config),
        options,
        code_cache=TemplateCodeCache.from_env(TEMPLATE_ENVIRONMENT),
    )
    mistral = None
    if isinstance(tokenizer, MistralTokenizer):
        mistral = MistralChatRenderer(
            tokenizer,
            model_name=config.served_model_names[0],
            exclude_tools_when_none=config.exclude_tools_when_tool_choice_none,
            trust_request_chat_template=config.trust_request_chat_template,
        )
    return ModelResources(
        files=files,
        tokenizer=tokenizer,
        renderer=renderer,
        tokenizer_dir=str(tokenizer_dir),
        mistral=mistral,
    )


def mistral_kind(tokenizer: Tokenizer) -> str | None:
    """``tekken`` or ``spm`` for a mistral_common tokenizer, else None."""
    if isinstance(tokenizer, MistralTokenizer):
        return "tekken" if tokenizer.is_tekken else "spm"
    return None


def uses_mistral_tokenizer(mode: str, tokenizer_dir: Path) -> bool:
    """``--tokenizer-mode mistral``, or ``auto`` on a Mistral-format repository (vLLM 0.32's
    rule: consolidated weights and a tekken or versioned SentencePiece file)."""
    return mode == "mistral" or (mode == "auto" and is_mistral_repo(tokenizer_dir))


def default_chat_template_kwargs(config: FrontendConfig) -> dict[str, Any]:
    """``--default-chat-template-kwargs`` with ``--cohere-format`` added unless they name one
    (vLLM's ``resolve_default_chat_template_kwargs``)."""
    kwargs = dict(config.default_chat_template_kwargs)
    if config.cohere_format:
        kwargs.setdefault("cohere_format", config.cohere_format)
    return kwargs


def vocab_bound(model: ModelResources) -> int:
    """Token ids below this are in vocabulary: vLLM takes the larger of the tokenizer's and the
    model's vocabulary (vllm/renderers/base.py ``validate_token_ids``; they differ for Qwen3)."""
    config = model.files.config
    text_config = config.get("text_config")
    model_vocab = config.get("vocab_size")
    if model_vocab is None and isinstance(text_config, dict):
        model_vocab = text_config.get("vocab_size")
    bound = model.tokenizer.max_token_id + 1
    return max(bound, model_vocab) if isinstance(model_vocab, int) else bound


async def load_lora_modules(config: FrontendConfig, client: EngineCoreClient) -> LoraAdapters:
    """The adapter table, with ``--lora-modules`` loaded on the engines (vLLM's
    ``init_static_loras``); an adapter that does not load stops startup with vLLM's message."""
    adapters = LoraAdapters(client)
    for module in config.lora_modules:
        try:
            await load_adapter(
                adapters,
                config.served_model_names,
                module.name,
                module.path,
                is_3d_lora_weight=module.is_3d_lora_weight,
                base_model_name=module.base_model_name,
            )
        except api_errors.ApiError as e:
            raise ConfigError(api_errors.sanitize_message(e.message)) from None
    return adapters


def build_frontend_app(
    config: FrontendConfig,
    model: ModelResources,
    client: EngineCoreClient,
    *,
    sibling_counts: SharedRequestCounts | None = None,
    adapters: LoraAdapters | None = None,
) -> App:
    """The HTTP app serving ``config``'s model through ``client``. ``sibling_counts`` is set
    when this is one of several API-server processes: their in-flight request counts, summed
    for ``--max-num-queued-reqs``; ``adapters``: the LoRA adapters loaded so far (see
    :func:`load_lora_modules`; None: none yet)."""
    if adapters is None:
        adapters = LoraAdapters(client)
    runtime_lora = runtime_lora_updating()
    max_model_len = client.max_model_len or model.files.max_position_embeddings
    if max_model_len is None:
        raise RuntimeError("the engines reported no max_model_len and config.json has none")
    if config.max_model_len is not None and config.max_model_len > 0:
        # As vLLM's frontend: its own --max-model-len, lowered to the engines' (which may be
        # smaller, e.g. external engines started with less); -1 (auto) takes the engines'.
        max_model_len = min(max_model_len, config.max_model_len)
    served = config.served_model_names
    # /metrics is rendered by the server itself. As in vLLM, process and gc series only when
    # this is the one API-server process (siblings use multiprocess mode).
    registry = MetricsRegistry(process_metrics=client.client_count == 1)
    # vLLM's vllm:* families are its stat logger's, which --disable-log-stats does not make:
    # then they are kept out of /metrics (the process and http_* series stay).
    stat_registry = None if config.disable_log_stats else registry
    metrics = FrontendMetrics(served[0], max_model_len, client.engine_indices, stat_registry)
    if stat_registry is not None:
        gauges = EngineGauges(served[0], client.engine_indices, client.scheduler_stats)
        stat_registry.register(gauges)
        if client.limits.supports_lora and client.limits.max_loras is not None:
            metrics.lora_info = LoraInfo(client.limits.max_loras)
            stat_registry.register(metrics.lora_info)
    # Outputs come back on the socket named by client_index: stamp this frontend's (§8.1). The
    # first frontend's is the struct's default: the class itself then, since a partial with a
    # keyword calls it through a merged keyword dict (~1,500 instructions more per request).
    client_index = client.limits.client_index
    factory: Callable[..., EngineCoreRequest] = (
        EngineCoreRequest
        if client_index == 0
        else functools.partial(EngineCoreRequest, client_index=client_index)
    )
    admission = AdmissionControl(
        config.max_num_queued_reqs,
        config.max_num_queued_tokens,
        shared=sibling_counts,
        on_reject=metrics.record_admission_rejection,
    )
    stats_log: StatsLog | None = None
    if not config.disable_log_stats:
        stats_log = StatsLog(metrics, client.scheduler_stats, client.engine_indices)
        metrics.stats_log = stats_log
        with contextlib.suppress(RuntimeError):  # no running loop: no periodic line
            stats_log.start()
    tracer = None
    if config.otlp_traces_endpoint is not None:
        from vllm_frontend.metrics.tracing import RequestTracer  # OpenTelemetry: only with it

        tracer = RequestTracer(config.otlp_traces_endpoint)
    llm = LLM(
        client,
        factory,
        metrics,
        admission,
        log_requests=config.enable_log_requests,
        tracer=tracer,
    )
    sampling = ModelSamplingInfo(
        max_model_len=max_model_len,
        eos_token_id=model.tokenizer.eos_token_id,
        generation_eos_token_ids=list(model.files.generation_eos_token_ids),
        sampling_defaults=dict(model.files.sampling_defaults),
        override_max_tokens=override_max_tokens(
            config.generation_config, config.override_generation_config, model.files
        ),
        limits=client.limits,
        structured_outputs_backend=config.structured_outputs_backend,
        watermarking=config.watermark_configured,
        v2_model_runner=uses_v2_model_runner(config.watermark_configured),
        trace_replay=config.enable_trace_replay,
        mistral_tokenizer=mistral_kind(model.tokenizer),
        thinking_budget=config.thinking_budget,
    )
    request_log = RequestLog(config.max_log_len) if config.enable_log_requests else None
    ctx = ServingContext(
        multimodal=multimodal_facade(config, model, client),
        llm=llm,
        tokenizer=model.tokenizer,
        served_model_names=served,
        max_model_len=max_model_len,
        sampling=sampling,
        chat_renderer=model.renderer,
        return_tokens_as_token_ids=config.return_tokens_as_token_ids,
        enable_force_include_usage=config.enable_force_include_usage,
        enable_prompt_tokens_details=config.enable_prompt_tokens_details,
        response_role=config.response_role,
        stream_interval=config.stream_interval,
        sse_keep_alive_interval=float(config.sse_keep_alive_interval),
        # vLLM's entrypoints/serve/utils/fingerprint.py; its `full` mode's needs vLLM's config
        system_fingerprint=(
            config.fingerprint_value if config.fingerprint_mode == "custom" else None
        ),
        request_log=request_log,
        has_kv_connector=config.kv_transfer_config is not None,
        adapters=adapters,
        runtime_lora_updating=runtime_lora,
    )
    settings = server_settings(config, max_model_len)
    # vLLM renders gpt-oss chat completions with Harmony (/tokenize keeps the chat template).
    harmony = (
        HarmonyRenderer(
            exclude_tools_when_tool_choice_none=config.exclude_tools_when_tool_choice_none
        )
        if is_harmony_model(model.files.config)
        else None
    )
    services = Services(
        engine=client,
        tokenizer=model.tokenizer,
        chat_tokenizer=chat_tokenizer(model.mistral or model.renderer, model.tokenizer, ctx.media),
        model_root=config.model,
        metrics_registry=registry,
        media_policy=media_policy(config),
        adapters=adapters,
        runtime_lora_updating=runtime_lora,
        request_log=request_log,
    )
    parsers = output_parsers(
        config, model.tokenizer, model_facts(model), harmony=harmony is not None
    )
    completions = CompletionsHandler(ctx, parse_completion_request)
    chat = ChatHandler(ctx, parse_chat_request, parsers, harmony=harmony, mistral=model.mistral)
    responses = ResponsesHandler(
        ctx,
        parse_responses_request,
        parsers,
        store=store_from_env(),
        harmony=harmony,
        mistral=model.mistral,
    )
    messages = MessagesHandler(
        ctx, chat.chat, disabled_thinking_effort=config.anthropic_disabled_thinking_effort
    )
    app = build_app(
        settings,
        services,
        {
            ("POST", "/v1/completions"): completions,
            ("POST", "/v1/chat/completions"): chat,
            ("POST", "/invocations"): invocations_handler(chat, completions),
            ("POST", "/v1/messages"): messages.messages,
            ("POST", "/v1/messages/count_tokens"): messages.count_tokens,
        },
        responses.routes(),
    )
    if runtime_lora:
        logger.warning(
            "LoRA dynamic loading & unloading is enabled in the API server. This should ONLY "
            "be used for local development!"
        )
        for (method, path), handler in lora_routes(adapters, served).items():
            app.route(method, path, handler, json_body=True)
    add_scale_out_routes(app, config, ctx, chat, max_num_seqs(client), messages, responses)
    add_elastic_ep_routes(app, config.data_parallel_size)
    if config.enable_tokenizer_info_endpoint:
        app.route(
            "GET", "/tokenizer_info", tokenizer_info_handler(model_tokenizer_info(config, model))
        )
    if dev_mode():
        shown = msgspec.structs.asdict(config)
        shown["api_key"] = ["***"] if config.api_key else []
        media = ctx.media
        add_dev_routes(
            app, client, config, shown, media.clear_mm_cache if media is not None else None
        )
        weight_ops = WeightOperationMetrics(registry)
        for (method, path), handler in weight_handlers(client, weight_ops).items():
            app.route(method, path, handler)
        app.route("POST", "/abort_requests", dev_abort_requests_handler(ctx.text.llm))
    if config.profiler_config.get("profiler"):
        logger.warning(
            "Profiler with mode '%s' is enabled in the API server. This should ONLY be used "
            "for local development!",
            config.profiler_config["profiler"],
        )
        add_profiler_routes(app, client)
    if ctx.media is not None:
        app.on_close(ctx.media.aclose)
    if stats_log is not None:
        app.on_close(stats_log.stop)
    if tracer is not None:
        app.on_close(tracer.aclose)
    return app


def server_settings(config: FrontendConfig, max_model_len: int) -> ServerSettings:
    """The HTTP server's settings from the configuration."""
    return ServerSettings(
        served_model_names=config.served_model_names,
        max_model_len=max_model_len,
        api_key=list(config.api_key),
        allowed_origins=list(config.allowed_origins),
        allowed_methods=list(config.allowed_methods),
        allowed_headers=list(config.allowed_headers),
        allow_credentials=config.allow_credentials,
        enable_request_id_headers=config.enable_request_id_headers,
        enable_server_load_tracking=config.enable_server_load_tracking,
        http_timeout_keep_alive=config.http_timeout_keep_alive,
        http_timeout_head=config.http_timeout_head,
        http_timeout_body=config.http_timeout_body,
        max_head_size=config.h11_max_incomplete_event_size,
        max_header_count=config.h11_max_header_count,
        max_body_size=config.http_max_body_size,
        root_path=config.root_path,
        scheme="https" if config.ssl_certfile else "http",
    )


class _NoEngine:
    """The engine client of a render server: there is none (nothing may reach it)."""

    is_dead = False

    def add_request(self, request: Any) -> Any:
        """Refuse: a render server runs nothing."""
        raise RuntimeError("this render server has no engines")

    def abort_requests(self, request_ids: Any) -> None:
        """Nothing runs, so nothing is aborted."""


def build_render_app(config: FrontendConfig, model: ModelResources) -> App:
    """An engine-free server of ``config``'s model, as ``vllm launch render``: the render routes
    with ``/health``, ``/ping``, ``/version``, ``/v1/models``, ``/tokenize``, ``/detokenize`` and
    ``/metrics`` (no generation routes)."""
    explicit = config.max_model_len if config.max_model_len and config.max_model_len > 0 else None
    max_model_len = explicit or model.files.max_position_embeddings  # -1: auto, the model's
    if max_model_len is None:
        raise ConfigError("config.json gives no context length: pass --max-model-len")
    limits = RequestLimits(
        max_model_len=max_model_len,
        vocab_size=vocab_bound(model),
        max_logprobs=config.max_logprobs,
    )
    sampling = ModelSamplingInfo(
        max_model_len=max_model_len,
        eos_token_id=model.tokenizer.eos_token_id,
        generation_eos_token_ids=list(model.files.generation_eos_token_ids),
        sampling_defaults=dict(model.files.sampling_defaults),
        override_max_tokens=override_max_tokens(
            config.generation_config, config.override_generation_config, model.files
        ),
        limits=limits,
        structured_outputs_backend=config.structured_outputs_backend,
        watermarking=config.watermark_configured,
        v2_model_runner=uses_v2_model_runner(config.watermark_configured),
        trace_replay=config.enable_trace_replay,
        mistral_tokenizer=mistral_kind(model.tokenizer),
        thinking_budget=config.thinking_budget,
    )
    no_engine = _NoEngine()
    ctx = ServingContext(
        multimodal=multimodal_facade(config, model, None),
        llm=LLM(no_engine, EngineCoreRequest),
        tokenizer=model.tokenizer,
        served_model_names=config.served_model_names,
        max_model_len=max_model_len,
        sampling=sampling,
        chat_renderer=model.renderer,
        response_role=config.response_role,
    )
    harmony = (
        HarmonyRenderer(
            exclude_tools_when_tool_choice_none=config.exclude_tools_when_tool_choice_none
        )
        if is_harmony_model(model.files.config)
        else None
    )
    parsers = output_parsers(
        config, model.tokenizer, model_facts(model), harmony=harmony is not None
    )
    chat = ChatLlm(
        ctx.text,
        model.renderer,
        parsers,
        response_role=config.response_role,
        harmony=harmony,
        mistral=model.mistral,
        media=ctx.media,
    )
    messages = MessagesHandler(ctx, chat)
    responses = ResponsesHandler(ctx, parse_responses_request, parsers, harmony=harmony)
    render = RenderHandlers(
        ctx, chat, parse_chat_request, parse_completion_request, messages, responses
    )
    derender = DerenderHandlers(ctx, chat)
    services = Services(
        engine=no_engine,
        tokenizer=model.tokenizer,
        chat_tokenizer=chat_tokenizer(model.mistral or model.renderer, model.tokenizer, ctx.media),
        model_root=config.model,
        media_policy=media_policy(config),
    )
    routes = render.routes() | derender.routes()
    app = build_app(server_settings(config, max_model_len), services, routes)
    for (method, path), handler in scale_out_not_served([p for _, p in routes]).items():
        if not path.startswith("/inference/"):  # vLLM's render server has no engine routes
            app.route(method, path, handler)
    if ctx.media is not None:
        app.on_close(ctx.media.aclose)
    return app


def max_num_seqs(client: EngineCoreClient) -> int | None:
    """The engines' ``max_num_seqs`` as they registered it (the smallest; None: unreported)."""
    values = [r.max_num_seqs for r in client.registrations.values() if r and r.max_num_seqs]
    return min(values) if values else None


def add_scale_out_routes(
    app: App,
    config: FrontendConfig,
    ctx: ServingContext,
    chat: ChatHandler,
    max_num_seqs: int | None = None,
    messages: MessagesHandler | None = None,
    responses: ResponsesHandler | None = None,
) -> None:
    """The render and token-in/token-out routes with ``--enable-scale-out``; without it,
    vLLM's 403 on every scale-out route (any body: no JSON check). ``max_num_seqs``: the
    engines' (the most samples a generate request may ask for)."""
    if not config.enable_scale_out:
        logger.info(
            "Scale-out endpoints are disabled. Restart vllm serve with --enable-scale-out to "
            "enable them."
        )
        for (method, path), handler in scale_out_disabled().items():
            app.route(method, path, handler)
        return
    render = RenderHandlers(
        ctx, chat.chat, parse_chat_request, parse_completion_request, messages, responses
    )
    routes = render.routes() | DerenderHandlers(ctx, chat.chat).routes()
    routes[("POST", GENERATE_PATH)] = GenerateHandler(ctx, max_num_seqs)
    for (method, path), handler in routes.items():
        app.route(method, path, handler, json_body=True)
    # vLLM's abort route reads its body itself (no content-type check)
    app.route("POST", ABORT_PATH, abort_requests_handler(ctx.text.llm))
    served = [p for _, p in routes] + [ABORT_PATH]
    for (method, path), handler in scale_out_not_served(served).items():
        app.route(method, path, handler)


def media_policy(config: FrontendConfig) -> MediaPolicy:
    """The media loading policy: the configuration's flags over vLLM's environment variables
    (read as vLLM 0.32 reads them; a malformed one stops startup)."""
    try:
        return MediaPolicy.from_env(
            allowed_local_media_path=config.allowed_local_media_path,
            allowed_media_domains=tuple(config.allowed_media_domains),
            allow_private_addresses=config.allow_private_media_addresses,
            media_io_kwargs=dict(config.media_io_kwargs),
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def multimodal_facade(
    config: FrontendConfig, model: ModelResources, client: EngineCoreClient | None
) -> Callable[[TextLlm], MultimodalLlm] | None:
    """What makes the multimodal facade over the text one, for a model that takes media (None
    for a text-only one); ``client`` None: no engine (the render server), the model's dtype
    from its config and no engine cache to mirror."""
    files = model.files
    if not is_multimodal_config(files.config):
        return None
    from vllm_frontend.multimodal.llm import MultimodalLlm, MultimodalOptions, load_family
    from vllm_frontend.multimodal.media import MediaLoader

    options = MultimodalOptions(
        limit_mm_per_prompt=dict(config.limit_mm_per_prompt),
        mm_processor_kwargs=dict(config.mm_processor_kwargs),
        media_io_kwargs=dict(config.media_io_kwargs),
        mm_hasher_algorithm=config.mm_hasher_algorithm,
        mm_device_do_normalize=config.mm_device_do_normalize,
        mm_processor_cache_gb=config.mm_processor_cache_gb,
        enable_mm_embeds=config.enable_mm_embeds,
        interleave_mm_strings=config.interleave_mm_strings,
    )
    tokenizer = model.tokenizer

    def encode(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False)

    # With a mistral_common tokenizer (--tokenizer-mode mistral) media stay refused: the
    # chat prompt is ids rendered by mistral_common, which this frontend does not expand.
    family = (
        None
        if model.mistral is not None
        else load_family(files.path, files.config, tokenizer.token_to_id, options, encode)
    )
    if family is None:
        logger.warning(
            "Media content parts are refused (400) for model type %r: this frontend does not "
            "process its multimodal inputs yet; text requests are served.",
            files.config.get("model_type"),
        )
    loader = MediaLoader(media_policy(config))
    registrations = client.registrations.values() if client is not None else ()
    dtypes = [r.dtype for r in registrations if r is not None and r.dtype]
    dtype = dtypes[0] if dtypes else str(files.config.get("dtype") or "bfloat16")

    def make(text: TextLlm) -> MultimodalLlm:
        return MultimodalLlm(
            text,
            family,
            loader,
            model_id=config.model,
            config=files.config,
            dtype=dtype.removeprefix("torch."),
            options=options,
            # vLLM's engine keeps the LRU cache its frontend mirrors only for one API process
            # in front of one engine (or external load balancing).
            mirror_engine_cache=(
                client is not None
                and config.mm_processor_cache_type == "lru"
                and config.api_server_count == 1
                and len(client.engine_indices) == 1
            ),
        )

    return make


def model_tokenizer_info(config: FrontendConfig, model: ModelResources) -> dict[str, Any]:
    """What ``/tokenizer_info`` answers for the served tokenizer."""
    tokenizer_config: dict[str, Any] = dict(model.files.tokenizer_config)
    if model.tokenizer_dir and model.tokenizer_dir != str(model.files.path):
        path = os.path.join(model.tokenizer_dir, "tokenizer_config.json")
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                tokenizer_config = json.load(f)
    return tokenizer_info(
        tokenizer_config,
        config.tokenizer or config.model,
        load_chat_template_option(config.chat_template),
    )


def model_facts(model: ModelResources) -> ModelFacts:
    """What reasoning parsers may read of the model besides its vocabulary."""
    return _facts(
        model.files.tokenizer_config,
        model.renderer.templates.tokenizer,
        model.tokenizer,
        _architecture(model.files.config),
        _model_types(model.files.config),
    )


def _facts(
    tokenizer_config: Any,
    chat_template: Any,
    tokenizer: Tokenizer,
    architecture: str | None,
    model_types: tuple[str, ...] = (),
) -> ModelFacts:
    if isinstance(tokenizer, MistralTokenizer):
        return ModelFacts(
            tokenizer_config,
            chat_template,
            mistral_version=tokenizer.version,
            mistral_grammar=tokenizer.supports_grammar,
            architecture=architecture,
            model_types=model_types,
        )
    return ModelFacts(
        tokenizer_config, chat_template, architecture=architecture, model_types=model_types
    )


def _model_types(model_config: Mapping[str, Any]) -> tuple[str, ...]:
    # vLLM's hf_config.model_type and hf_text_config.model_type
    text_config = model_config.get("text_config")
    found = [model_config.get("model_type")]
    if isinstance(text_config, Mapping):
        found.append(text_config.get("model_type"))
    return tuple(t for t in found if isinstance(t, str))


def _architecture(model_config: Mapping[str, Any]) -> str | None:
    # vLLM's ModelConfig.architecture: the config's first architecture
    architectures = model_config.get("architectures")
    if isinstance(architectures, list) and architectures and isinstance(architectures[0], str):
        return architectures[0]
    return None


def output_parsers(
    config: FrontendConfig,
    tokenizer: Tokenizer,
    model: ModelFacts | None = None,
    *,
    harmony: bool = False,
) -> OutputParsers:
    """The configured reasoning / tool-call parsers, checked against the tokenizer
    (``harmony``: a gpt-oss model, whose output is read through Harmony)."""
    return OutputParsers.for_tokenizer(
        tokenizer.token_to_id,
        tool_call_parser=config.tool_call_parser,
        reasoning_parser=config.reasoning_parser,
        enable_auto_tool_choice=config.enable_auto_tool_choice,
        tool_strict_level=config.tool_strict_level,
        model=model,
        harmony=harmony,
        decode=functools.partial(tokenizer.decode, skip_special_tokens=False),
        special_tokens=tokenizer.all_special_tokens,
        encode=functools.partial(tokenizer.encode, add_special_tokens=False),
        prompt_decode=tokenizer.decode_verbatim,
    )

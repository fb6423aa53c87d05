"""The frontend's configuration: one typed object built once at startup.

It is built either from ``--args-json`` (what ``vllm serve`` passes to a Rust-style frontend: the
non-default ``vllm serve`` options keyed by their argparse destination names) or from the flags of
``vllm-frontend serve``. Keys are vLLM's names so that both paths share one vocabulary.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import msgspec

from vllm_frontend.chat.output_parser import (
    ParserConfigError,
    resolve_reasoning_parser,
    resolve_tool_parser,
)
from vllm_frontend.chat.reasoning.budget import thinking_budget_enabled
from vllm_frontend.chat.tool_tags import STRICT_LEVELS
from vllm_frontend.cmd import flags
from vllm_frontend.server.transport import TlsSettings
from vllm_frontend.text.structured_outputs import BACKENDS as STRUCTURED_OUTPUTS_BACKENDS

logger = logging.getLogger(__name__)


class ConfigError(ValueError):
    """A configuration value is invalid or asks for behaviour this frontend does not implement."""


class LoraModule(msgspec.Struct, forbid_unknown_fields=True):
    """One ``--lora-modules`` adapter (vLLM's ``LoRAModulePath``), loaded at startup."""

    name: str
    path: str
    base_model_name: str | None = None
    is_3d_lora_weight: bool = False


def parse_lora_modules(values: Any) -> list[LoraModule]:
    """``--lora-modules`` values as vLLM's ``LoRAParserAction`` reads them: ``name=path``, or a
    JSON object with ``name``, ``path`` and optionally ``base_model_name`` and
    ``is_3d_lora_weight`` (``--args-json`` gives objects); empty items are skipped."""
    if values is None:
        return []
    if isinstance(values, (str, dict)):
        values = [values]
    modules: list[LoraModule] = []
    for item in values:
        if item is None or item == "":
            continue
        if isinstance(item, str) and "=" in item and "," not in item:
            name, path = item.split("=", 1)
            modules.append(LoraModule(name, path))
            continue
        if isinstance(item, str):
            try:
                item = json.loads(item)
            except json.JSONDecodeError:
                raise ConfigError(f"Invalid JSON format for --lora-modules: {item}") from None
        try:
            modules.append(msgspec.convert(item, LoraModule, strict=False))
        except msgspec.ValidationError as e:
            raise ConfigError(f"Invalid fields for --lora-modules: {item} - {e}") from None
    return modules


class FrontendConfig(msgspec.Struct):
    """Everything the frontend needs to know, with vLLM 0.32's defaults."""

    model: str
    """The model (``model_tag``): a local directory or a hub name resolved in the HF cache."""
    served_model_name: list[str] = msgspec.field(default_factory=list)
    """Public model names; the first is echoed in responses. Empty means ``[model]``."""
    tokenizer: str | None = None
    revision: str | None = None
    tokenizer_revision: str | None = None
    tokenizer_mode: str = "auto"
    """``auto`` (mistral for a Mistral-format repository, as vLLM decides), ``hf`` or
    ``mistral``."""
    hf_config_path: str | None = None
    generation_config: str = "auto"
    """``auto`` (model's generation_config.json), ``vllm`` (neutral defaults) or a folder."""
    override_generation_config: dict[str, Any] = msgspec.field(default_factory=dict)
    max_model_len: int | None = None
    max_logprobs: int = 20
    """Cap on requested logprobs (vLLM's ModelConfig default); -1 means no cap."""
    chat_template: str | None = None
    chat_template_content_format: str = "auto"
    trust_request_chat_template: bool = False
    default_chat_template_kwargs: dict[str, Any] = msgspec.field(default_factory=dict)
    response_role: str = "assistant"
    cohere_format: str | None = "cmd4"
    """Added to the chat template's default kwargs unless they name one (as vLLM does)."""
    anthropic_disabled_thinking_effort: str = "auto"
    """The ``reasoning_effort`` an Anthropic ``thinking: {"type": "disabled"}`` asks for
    (``auto``: probe the chat template, as vLLM does)."""
    return_tokens_as_token_ids: bool = False
    exclude_tools_when_tool_choice_none: bool = False
    enable_auto_tool_choice: bool = False
    tool_call_parser: str | None = None
    tool_strict_level: str = "auto"
    """``--tool-strict-level``: auto, function or parameter (chat/tool_tags.py)."""
    """A ``chat.tool_parsers`` name; used only with ``enable_auto_tool_choice``."""
    reasoning_parser: str | None = None
    """A ``chat.reasoning_parsers`` name (also read from ``structured_outputs_config``)."""
    enable_prompt_tokens_details: bool = False
    enable_force_include_usage: bool = False
    enable_request_id_headers: bool = False
    enable_server_load_tracking: bool = False
    enable_log_requests: bool = False
    enable_tokenizer_info_endpoint: bool = False
    """Serve ``GET /tokenizer_info``."""
    enable_scale_out: bool = False
    """Serve the render routes (``/v1/chat/completions/render``, ``/v1/completions/render``);
    without it they answer 403, as vLLM's."""
    max_log_len: int | None = None
    """Most prompt characters / token ids a request log line shows (None: all)."""
    disable_log_stats: bool = False
    api_key: list[str] = msgspec.field(default_factory=list)
    allowed_origins: list[str] = msgspec.field(default_factory=list)
    allowed_methods: list[str] = msgspec.field(default_factory=lambda: ["*"])
    allowed_headers: list[str] = msgspec.field(default_factory=lambda: ["*"])
    allow_credentials: bool = False
    host: str | None = None
    port: int = 8000
    uds: str | None = None
    ssl_keyfile: str | None = None
    ssl_certfile: str | None = None
    ssl_ca_certs: str | None = None
    ssl_cert_reqs: int = 0
    """0: no client certificate asked; 1: optional; 2: required (mutual TLS)."""
    ssl_ciphers: str | None = None
    enable_ssl_refresh: bool = False
    """Reload the TLS files when they change on disk."""
    root_path: str | None = None
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    prefill_context_parallel_size: int = 1
    data_parallel_size: int = 1
    kv_transfer_config: dict[str, Any] | None = None
    """``--kv-transfer-config``: the engines have a KV connector (disaggregated serving)."""
    profiler_config: dict[str, Any] = msgspec.field(default_factory=dict)
    """``--profiler-config``: with a ``profiler``, /start_profile and /stop_profile are served."""
    """The path prefix a proxy serves us under: requests under it are routed without it."""
    http_timeout_keep_alive: float = 5.0
    """Seconds an idle keep-alive connection stays open."""
    http_timeout_head: float = 30.0
    """Seconds a started request head may take to arrive (else 408)."""
    http_timeout_body: float = 30.0
    """Seconds a started request body may go without data (else 408)."""
    h11_max_incomplete_event_size: int = 64 * 1024
    """Most bytes of request line + headers (else 431). vLLM's name; its default is 4 MiB."""
    h11_max_header_count: int = 256
    """Most request headers (else 431)."""
    http_max_body_size: int = 64 * 1024 * 1024
    """Most bytes of a request body (else 413)."""
    engine_ready_timeout_secs: float = 600.0
    shutdown_timeout: float = 0.0
    api_server_count: int = 1
    structured_outputs_backend: str = "auto"
    watermark_configured: bool = False
    """The engines watermark their output (``--watermark-config``, theirs to apply)."""
    thinking_budget: bool = False
    """vLLM's reasoning config is enabled, so a request's thinking budget is taken: from
    ``--reasoning-parser`` (else ``--reasoning-config``'s parser) and ``--reasoning-config``'s
    start and end strings (the rest of it is the engines' to apply)."""
    enable_trace_replay: bool = False
    """The engines replay ``trace_decode_token_ids`` (theirs to apply; requests may set it)."""
    seed: int | None = None
    stream_interval: int = 1
    """Stream every N tokens (the first and last always go out); a request may ask for more."""
    sse_keep_alive_interval: float = 0
    """Seconds without a chunk before a stream gets an SSE ``: keep-alive`` comment; 0 = never."""
    fingerprint_mode: str = "full"
    """``--fingerprint-mode``: ``custom`` answers with ``fingerprint_value`` as
    ``system_fingerprint``; the others with none (vLLM's ``full`` has its config hash)."""
    fingerprint_value: str | None = None
    """``--fingerprint-value``: the ``system_fingerprint`` of the ``custom`` mode."""
    max_num_queued_reqs: int | None = None
    """Refuse new requests (503) while this many engine requests are in flight (None: no cap)."""
    max_num_queued_tokens: int | None = None
    """Refuse new requests (503) while the prompts still in prefill hold this many tokens."""
    allowed_local_media_path: str = ""
    """``file://`` media URLs are read only from under this directory (empty: never)."""
    allowed_media_domains: list[str] = msgspec.field(default_factory=list)
    """When non-empty, http(s) media URLs (and their redirects) must name one of these hosts."""
    allow_private_media_addresses: bool = False
    """Ours: media may be fetched from loopback, private, link-local and other non-global
    addresses (refused by default; ``VLLM_FRONTEND_ALLOW_PRIVATE_MEDIA_ADDRESSES=1`` too)."""
    media_io_kwargs: dict[str, dict[str, Any]] = msgspec.field(default_factory=dict)
    """Per-modality media decoding defaults (``{"video": {"num_frames": 40}}``)."""
    limit_mm_per_prompt: dict[str, Any] = msgspec.field(default_factory=dict)
    """Media items allowed per prompt by modality (999 where unnamed, as vLLM)."""
    mm_processor_kwargs: dict[str, Any] = msgspec.field(default_factory=dict)
    """The model processor's options (over its ``preprocessor_config.json``)."""
    mm_hasher_algorithm: str = "blake3"
    mm_device_do_normalize: bool | None = None
    """The engine rescales and normalizes pixels itself (None: vLLM's default per model)."""
    mm_processor_cache_gb: float = 4
    """The engines' multimodal processor cache (GiB): mirrored here, 0 for none."""
    mm_processor_cache_type: str = "lru"
    enable_mm_embeds: bool = False
    """``image_embeds`` / ``video_embeds`` / ``audio_embeds`` content parts are taken."""
    interleave_mm_strings: bool = False
    """"string"-format chat content keeps each media part's placeholder in its place."""
    lora_modules: list[LoraModule] = msgspec.field(default_factory=list)
    """``--lora-modules``: the LoRA adapters loaded on the engines at startup."""
    otlp_traces_endpoint: str | None = None
    """Where each finished request's OpenTelemetry span goes (OTLP; the ``otlp`` extra)."""

    @property
    def world_size(self) -> int:
        """Processes per engine, as vLLM's ParallelConfig counts them."""
        return (
            self.pipeline_parallel_size
            * self.tensor_parallel_size
            * self.prefill_context_parallel_size
        )

    @property
    def tls(self) -> TlsSettings:
        """The ``--ssl-*`` options for the HTTP server."""
        return TlsSettings(
            certfile=self.ssl_certfile,
            keyfile=self.ssl_keyfile,
            ca_certs=self.ssl_ca_certs,
            cert_reqs=self.ssl_cert_reqs,
            ciphers=self.ssl_ciphers,
            refresh=self.enable_ssl_refresh,
        )

    @property
    def served_model_names(self) -> list[str]:
        """The public model names (``--served-model-name`` or the model itself)."""
        return list(self.served_model_name) or [self.model]


_FIELD_NAMES = set(FrontendConfig.__struct_fields__)


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


def _as_dict(key: str, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{key}: not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{key}: expected a JSON object, got {type(value).__name__}")
    return value


def config_from_args(args: dict[str, Any]) -> FrontendConfig:
    """Build the configuration from ``vllm serve``-style arguments (``--args-json``).

    Each key is taken as ``cmd.flags`` routes it: the frontend's and both sides' are read, the
    engines' are left to them, ignored ones are logged, and refused or unknown keys raise
    ``ConfigError`` naming them.
    """
    model = args.get("model_tag") or args.get("model")
    if not model:
        raise ConfigError("no model given: --args-json needs `model_tag`")
    unknown = sorted(
        k
        for k in args
        if k not in flags.FLAGS and k not in _FIELD_NAMES and k not in flags.EXTRA_ARGS_JSON_KEYS
    )
    if unknown:
        raise ConfigError("unknown vllm serve options: " + ", ".join(unknown))
    refused = sorted(
        k
        for k in args
        if flags.FLAGS.get(k) == "refused" and args[k] is not None
        and not flags.is_neutral(k, args[k])
    )  # fmt: skip
    if refused:
        raise ConfigError(flags.refused_message(refused))
    for k in sorted(args):
        if flags.FLAGS.get(k) == "ignored":
            logger.info("ignoring option %s (%s)", flags.option_name(k), flags.note(k))
    kwargs: dict[str, Any] = {"model": str(model)}
    for key, value in args.items():
        if key in ("model_tag", "model") or value is None:
            continue
        if key == "structured_outputs_config":
            so_config = _as_dict(key, value)
            if backend := so_config.get("backend"):
                kwargs["structured_outputs_backend"] = str(backend)
            # vLLM copies --reasoning-parser into this object; either place names the parser.
            if (reasoning := so_config.get("reasoning_parser")) and not args.get(
                "reasoning_parser"
            ):
                kwargs["reasoning_parser"] = str(reasoning)
            continue
        if key == "reasoning_config":
            continue  # (see _thinking_budget)
        if key == "watermark_config":  # (``--watermark`` is the KV cache's, not this)
            kwargs["watermark_configured"] = True
            continue
        if key not in _FIELD_NAMES:
            continue
        if key in ("served_model_name", "api_key", "allowed_origins", "allowed_media_domains"):
            kwargs[key] = _as_list(value)
        elif key in ("allowed_methods", "allowed_headers"):
            kwargs[key] = _as_list(json.loads(value) if isinstance(value, str) else value)
        elif key == "lora_modules":
            kwargs[key] = parse_lora_modules(value)
        elif key in (
            "default_chat_template_kwargs",
            "override_generation_config",
            "limit_mm_per_prompt",
            "mm_processor_kwargs",
            "media_io_kwargs",
            "profiler_config",
            "kv_transfer_config",
        ):
            kwargs[key] = _as_dict(key, value)
        else:
            kwargs[key] = value
    kwargs["thinking_budget"] = _thinking_budget(args)
    if "api_key" not in kwargs and os.environ.get("VLLM_API_KEY"):
        kwargs["api_key"] = [os.environ["VLLM_API_KEY"]]
    config = FrontendConfig(**kwargs)
    _validate(config)
    return config


def _thinking_budget(args: dict[str, Any]) -> bool:
    # vLLM's EngineArgs: a reasoning config exists with --reasoning-config or
    # --reasoning-parser (which replaces the config's parser; the structured-outputs config's
    # parser plays no part); it is enabled with reasoning start and end strings
    parser = args.get("reasoning_parser") or None
    given = args.get("reasoning_config")
    reasoning = _as_dict("reasoning_config", given)
    if parser is None and given is not None:
        parser = reasoning.get("reasoning_parser") or None
    return thinking_budget_enabled(
        parser,
        str(reasoning.get("reasoning_start_str") or ""),
        str(reasoning.get("reasoning_end_str") or ""),
    )


_TOKENIZER_MODES = ("auto", "hf", "mistral")


def _validate(config: FrontendConfig) -> None:
    if config.tokenizer_mode not in _TOKENIZER_MODES:
        raise ConfigError(
            f"--tokenizer-mode {config.tokenizer_mode} is not supported by vllm-frontend "
            "(auto, hf and mistral are)"
        )
    if config.chat_template_content_format not in ("auto", "string", "openai"):
        raise ConfigError(
            "chat_template_content_format must be one of auto, string, openai; got "
            f"{config.chat_template_content_format!r}"
        )
    if config.generation_config not in ("auto", "vllm") and not os.path.isdir(
        config.generation_config
    ):
        raise ConfigError(
            f"generation_config must be 'auto', 'vllm' or a folder: {config.generation_config!r}"
        )
    if isinstance(config.ssl_cert_reqs, bool) or config.ssl_cert_reqs not in (0, 1, 2):
        raise ConfigError(
            f"ssl_cert_reqs must be 0 (none), 1 (optional) or 2 (required), "
            f"got {config.ssl_cert_reqs!r}"
        )
    if config.ssl_keyfile and not config.ssl_certfile:
        raise ConfigError("--ssl-keyfile needs --ssl-certfile")
    if config.api_server_count < 1:
        raise ConfigError("api_server_count must be at least 1")
    for name in ("max_model_len", "max_logprobs"):
        value = getattr(config, name)
        if value is not None and value < -1:
            # vLLM's ModelConfig (Field ge=-1) refuses it at startup too.
            raise ConfigError(f"{name} must be at least -1 (-1: auto / no cap), got {value}")
    if config.fingerprint_mode not in ("full", "custom", "none"):
        # (vLLM's `hash` mode holds vLLM's config hash, which needs vLLM to compute)
        raise ConfigError(
            "fingerprint_mode must be full, custom or none (hash is not supported), "
            f"got {config.fingerprint_mode!r}"
        )
    if isinstance(config.stream_interval, bool) or not isinstance(config.stream_interval, int):
        raise ConfigError(f"stream_interval must be an integer, got {config.stream_interval!r}")
    interval = config.sse_keep_alive_interval
    if isinstance(interval, bool) or not isinstance(interval, int | float) or not interval >= 0:
        # vLLM's validate_parsed_serve_args refuses negative values at startup.
        raise ConfigError(
            "sse_keep_alive_interval must be a non-negative number (0 disables keep-alive "
            f"comments), got {interval!r}"
        )
    for name in ("max_num_queued_reqs", "max_num_queued_tokens"):
        limit = getattr(config, name)
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 0
        ):
            # vLLM's SchedulerConfig (Field ge=0) refuses it at startup too.
            raise ConfigError(f"{name} must be a non-negative integer, got {limit!r}")
    for name in ("http_timeout_keep_alive", "http_timeout_head", "http_timeout_body"):
        seconds = getattr(config, name)
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds > 0:
            raise ConfigError(f"{name} must be a positive number of seconds, got {seconds!r}")
    for name in ("h11_max_incomplete_event_size", "h11_max_header_count", "http_max_body_size"):
        size = getattr(config, name)
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ConfigError(f"{name} must be a positive integer, got {size!r}")
    if config.stream_interval < 1:
        # vLLM's SchedulerConfig (Field ge=1) refuses it at startup too.
        raise ConfigError(f"stream_interval must be at least 1, got {config.stream_interval}")
    if config.structured_outputs_backend not in STRUCTURED_OUTPUTS_BACKENDS:
        # vLLM's StructuredOutputsConfig refuses other names at startup too.
        raise ConfigError(
            "structured_outputs_config.backend must be one of "
            f"{', '.join(STRUCTURED_OUTPUTS_BACKENDS)}; got {config.structured_outputs_backend!r}"
        )
    _validate_parsers(config)
    _validate_media(config)
    if config.otlp_traces_endpoint is not None:
        # As vLLM's ObservabilityConfig: refused at startup when it cannot be honoured.
        # OpenTelemetry is imported here, and only with the option.
        from vllm_frontend.metrics.tracing import TracingUnavailable, check_tracing

        try:
            check_tracing()
        except TracingUnavailable as e:
            raise ConfigError(str(e)) from None


def _validate_media(config: FrontendConfig) -> None:
    # vLLM checks the path when its first media request builds a MediaConnector; we at startup.
    if config.allowed_local_media_path:
        path = os.path.realpath(config.allowed_local_media_path)
        if not os.path.exists(path):
            raise ConfigError(
                f"Invalid `--allowed-local-media-path`: The path {path} does not exist."
            )
        if not os.path.isdir(path):
            raise ConfigError(
                f"Invalid `--allowed-local-media-path`: The path {path} must be a directory."
            )
    for modality, kwargs in config.media_io_kwargs.items():
        if not isinstance(kwargs, dict):
            raise ConfigError(
                f"media_io_kwargs[{modality!r}] must be a JSON object, got {kwargs!r}"
            )
    if os.environ.get("VLLM_FRONTEND_ALLOW_PRIVATE_MEDIA_ADDRESSES", "0") not in ("", "0"):
        config.allow_private_media_addresses = True


def _validate_parsers(config: FrontendConfig) -> None:
    # As vLLM's validate_api_server_args / validate_parsed_serve_args: a tool parser is needed
    # (and checked) only with --enable-auto-tool-choice; a reasoning parser always.
    if config.tool_call_parser in ("", "none"):
        config.tool_call_parser = None
    if config.reasoning_parser in ("", "none"):
        config.reasoning_parser = None
    if config.enable_auto_tool_choice and not config.tool_call_parser:
        raise ConfigError("--enable-auto-tool-choice requires --tool-call-parser")
    if config.tool_strict_level not in STRICT_LEVELS:
        raise ConfigError(
            f"--tool-strict-level: invalid choice {config.tool_strict_level!r} (choose from "
            + ", ".join(STRICT_LEVELS)
            + ")"
        )
    try:
        if config.enable_auto_tool_choice and config.tool_call_parser:
            resolve_tool_parser(config.tool_call_parser)
        if config.reasoning_parser:
            resolve_reasoning_parser(config.reasoning_parser)
    except ParserConfigError as e:
        raise ConfigError(str(e)) from None

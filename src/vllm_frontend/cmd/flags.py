"""Where each ``vllm serve`` 0.32 option goes: the frontend, the engines, both, or nowhere.

Every option of vLLM 0.32's ``vllm serve`` parser (keyed by its argparse destination, the name
``--args-json`` uses) is in :data:`FLAGS` with one of these routes:

- ``frontend``: this frontend implements it; the engines do not need it.
- ``engine``: it configures the engines (``vllm serve --headless`` gets it); the frontend does
  not read it.
- ``both``: the frontend implements it and the engines get it too.
- ``refused``: it would change what the frontend does and that is not implemented: giving it
  (with anything but vLLM's default value) stops startup, naming it.
- ``ignored``: it tunes something this frontend does not have (uvicorn's logs, FastAPI's docs
  pages, vLLM's data-parallel supervisor); accepted, logged, without effect.

tests/cmd/test_flags.py enumerates vLLM's own parser so that an option missing here fails.
"""

from __future__ import annotations

from typing import Any, Literal

Route = Literal["frontend", "engine", "both", "refused", "ignored"]

ROUTES: tuple[Route, ...] = ("frontend", "both", "engine", "refused", "ignored")
"""The routes, in the README table's order."""

_FRONTEND = """
api_server_count chat_template chat_template_content_format trust_request_chat_template
default_chat_template_kwargs response_role return_tokens_as_token_ids enable_auto_tool_choice
exclude_tools_when_tool_choice_none tool_call_parser tool_strict_level
enable_prompt_tokens_details
enable_server_load_tracking enable_force_include_usage sse_keep_alive_interval cohere_format
anthropic_disabled_thinking_effort
host port uds ssl_keyfile ssl_certfile ssl_ca_certs ssl_cert_reqs ssl_ciphers enable_ssl_refresh
root_path allow_credentials allowed_origins allowed_methods allowed_headers api_key
enable_request_id_headers h11_max_incomplete_event_size h11_max_header_count max_log_len
allowed_local_media_path allowed_media_domains media_io_kwargs enable_tokenizer_info_endpoint
lora_modules enable_scale_out fingerprint_mode fingerprint_value
"""

# The frontend reads these and the managed engines get them too (the model's files, limits
# the engines enforce or report, the structured-output backend and reasoning-end detection).
_BOTH = """
model_tag model headless tokenizer revision tokenizer_revision hf_config_path max_model_len
max_logprobs generation_config override_generation_config served_model_name reasoning_parser
structured_outputs_config stream_interval max_num_queued_reqs max_num_queued_tokens
disable_log_stats enable_log_requests shutdown_timeout data_parallel_size
data_parallel_size_local data_parallel_address data_parallel_rpc_port tensor_parallel_size
pipeline_parallel_size prefill_context_parallel_size profiler_config kv_transfer_config
limit_mm_per_prompt mm_processor_kwargs mm_processor_cache_gb mm_processor_cache_type
mm_hasher_algorithm mm_device_do_normalize enable_mm_embeds otlp_traces_endpoint
tokenizer_mode enable_trace_replay interleave_mm_strings
"""

_REFUSED: dict[str, str] = {
    "config": "YAML config files are not read; give the options on the command line",
    "grpc": "no gRPC server",
    "grpc_port": "no gRPC server",
    "default_mm_loras": "default multimodal LoRA adapters are not chosen by the frontend",
    "enable_tower_connector_lora": "tower-connector LoRA's multimodal cache keys are not made",
    "trust_request_mm_kwargs": "per-request mm_processor_kwargs / media_io_kwargs are not taken",
    "tool_parser_plugin": "tool parser plugins are not loaded",
    "tool_server": "no tool server (Responses API)",
    "enable_per_request_metrics": "per-request metrics in responses are not implemented",
    "enable_log_outputs": "output logging is not implemented",
    "tokens_only": "the token-only server mode is not implemented",
    "middleware": "ASGI middleware cannot run on this HTTP server",
    "skip_tokenizer_init": "the frontend always tokenizes",
    "hf_overrides": "the frontend reads config.json as it is",
    "enable_prompt_embeds": "prompt embeddings are not served",
    "io_processor_plugin": "IO processor plugins are not loaded",
    "reasoning_parser_plugin": "reasoning parser plugins are not loaded",
    "enable_return_routed_experts": "routed experts are not returned in responses",
    "return_sampling_mask": "sampling masks are not returned in responses",
    "show_hidden_metrics_for_version": "hidden (deprecated) metrics are not exported",
    "custom_histogram_buckets": "the metrics' histogram buckets are vLLM's defaults only",
    "kv_cache_metrics": "the KV-cache residency metrics are not exported",
    "cudagraph_metrics": "the CUDA graph metrics are not exported",
    "per_request_spec_decode_metrics": "per-request spec-decode metrics are not implemented",
    "enable_logging_iteration_details": "the periodic stats log has no iteration details",
}

_IGNORED: dict[str, str] = {
    "enable_log_deltas": "only with --enable-log-outputs",
    "log_error_stack": "error responses are logged at debug level with their stack",
    "cohere_is_reasoning_model": "no Cohere API routes",
    "data_parallel_supervisor_port": "vLLM's data-parallel supervisor is not used",
    "dp_supervisor_probe_interval_s": "vLLM's data-parallel supervisor is not used",
    "dp_supervisor_probe_timeout_s": "vLLM's data-parallel supervisor is not used",
    "dp_supervisor_probe_failure_threshold": "vLLM's data-parallel supervisor is not used",
    "uvicorn_log_level": "no uvicorn",
    "disable_uvicorn_access_log": "no access log is written",
    "disable_access_log_for_endpoints": "no access log is written",
    "disable_fastapi_docs": "no /docs pages are served",
    "enable_offline_docs": "no /docs pages are served",
    "renderer_num_workers": "prompts are rendered on the event loop and tokenizer threads",
    "aggregate_engine_logging": "the stats log has one line per engine, never an aggregate",
    "logging_config": "the frontend logs with its own format (VLLM_LOGGING_LEVEL)",
    "log_level": "the frontend logs at VLLM_LOGGING_LEVEL",
    "log_config_file": "the frontend logs with its own format (VLLM_LOGGING_LEVEL)",
}

_NOTES: dict[str, str] = {
    "otlp_traces_endpoint": "request spans; needs the `otlp` extra",
    "collect_detailed_traces": "vLLM 0.32 collects nothing more with it; the engines check it",
    "speculative_config": "the vllm:spec_decode_* metrics are not exported",
    "enable_flash_late_interaction": "no pooling routes; the engines apply it",
    "tokenizer_mode": "`auto`, `hf`, `mistral` (needs the `mistral` extra); others stop startup",
    "fingerprint_mode": "`custom` and `none` as vLLM; `full` (the default) gives no fingerprint "
    "(vLLM's holds its config hash), `hash` stops startup",
}

NEUTRAL_VALUES: dict[str, tuple[Any, ...]] = {
    "grpc": (False,),
    "grpc_port": (None,),
    "default_mm_loras": (None, {}),
    "enable_tower_connector_lora": (False,),
    "trust_request_mm_kwargs": (False,),
    "tool_parser_plugin": ("",),
    "tool_server": (None,),
    "enable_per_request_metrics": (False,),
    "enable_log_outputs": (False,),
    "tokens_only": (False,),
    "middleware": ([],),
    "skip_tokenizer_init": (False,),
    "hf_overrides": (None, {}),
    "enable_prompt_embeds": (False,),
    "reasoning_parser_plugin": ("",),
    "enable_return_routed_experts": (False,),
    "return_sampling_mask": (False,),
    "per_request_spec_decode_metrics": ("none",),
    "kv_cache_metrics": (False,),
    "cudagraph_metrics": (False,),
    "enable_logging_iteration_details": (False,),
}
"""Values of refused options that are vLLM's defaults (asking for the default is no request)."""

# Every other option of vLLM 0.32's `vllm serve` configures the engines alone.
_ENGINE = """
runner convert trust_remote_code dtype seed code_revision quantization quantization_config
allow_deprecated_quantization enforce_eager logprobs_mode use_fp64_gumbel
disable_sliding_window disable_cascade_attn config_format hf_token model_class_overrides
pooler_config enable_sleep_mode sleep_mode_offload_cudagraph sleep_preserve_parameter_names
enable_cumem_allocator enable_nccl_comm_suspend model_impl logits_processors load_format
download_dir safetensors_load_strategy safetensors_prefetch_num_threads
safetensors_prefetch_block_size model_loader_extra_config ignore_patterns use_tqdm_on_load
pt_load_map_location attention_backend mamba_backend mamba_ssu_algorithm
enable_mamba_cache_stochastic_rounding mamba_cache_philox_rounds distributed_executor_backend
master_addr master_port nnodes node_rank distributed_timeout_seconds
cpu_distributed_timeout_seconds numa_bind numa_bind_nodes numa_bind_cpus device_ids
decode_context_parallel_size dcp_comm_backend dcp_q_replicate dcp_kv_cache_interleave_size
cp_kv_cache_interleave_size data_parallel_rank data_parallel_start_rank data_parallel_backend
data_parallel_hybrid_lb data_parallel_external_lb data_parallel_multi_port_external_lb
enable_hc_sp enable_expert_parallel enable_batch_sharded_sampling enable_ep_weight_filter
all2all_backend enable_dbo enable_shm_tensor_arena ubatch_size enable_elastic_ep
elastic_ep_max_dp_size dbo_decode_token_threshold dp_sync_interval dbo_prefill_token_threshold
disable_nccl_for_dp_synchronization enable_eplb eplb_config expert_placement_strategy
max_parallel_loading_workers ray_workers_use_nsight disable_custom_all_reduce worker_cls
worker_extension_cls enable_fault_tolerance fault_tolerance_config block_size
gpu_memory_utilization kv_cache_memory_bytes kv_cache_dtype num_gpu_blocks_override
enable_prefix_caching prefix_caching_hash_algo prefix_cache_retention_interval
kv_cache_dtype_skip_layers kv_sharing_fast_prefill swa_bounded_replay mamba_cache_dtype
mamba_ssm_cache_dtype mamba_block_size prefix_match_unit mamba_cache_mode
enable_mamba_shared_prefix_checkpoint replayssm_buffer_len use_replayssm kv_offloading_size
kv_offloading_backend offload_backend cpu_offload_gb cpu_offload_params offload_group_size
offload_num_in_group offload_prefetch_step offload_params language_model_only
mm_shm_cache_max_object_size_mb mm_encoder_only
mm_encoder_tp_mode mm_encoder_attn_backend mm_encoder_attn_dtype mm_encoder_fp8_scale_path
mm_encoder_fp8_scale_save_path mm_encoder_fp8_scale_save_margin
skip_mm_profiling video_pruning_rate video_pruning_method mm_tensor_ipc mm_processor_device
mm_ipc_gpu_memory_gb enable_lora max_loras max_lora_rank lora_dtype
max_cpu_loras fully_sharded_loras lora_target_modules
specialize_active_lora enable_mixed_moe_lora_format enable_moe_shared_loras
max_lora_cls_labels kv_cache_metrics_sample enable_layerwise_nvtx_tracing enable_mfu_metrics
jit_monitor_mode jit_monitor_verbose max_num_batched_tokens max_num_scheduled_tokens
max_num_seqs max_num_active_seqs long_prefill_token_threshold
long_prefill_token_threshold_adaptive scheduling_policy enable_chunked_prefill
disable_chunked_mm_input scheduler_cls scheduler_reserve_full_isl watermark
prefill_schedule_interval disable_hybrid_kv_cache_manager async_scheduling
cudagraph_capture_sizes max_cudagraph_capture_size ir_op_priority enable_flashinfer_autotune
moe_backend linear_backend sparse_indexer_topk_backend speculative_config spec_method
spec_model spec_tokens watermark_config diffusion_config kv_events_config ec_transfer_config
ec_manager_config compilation_config attention_config engram_config reasoning_config
kernel_config additional_config aux_output_config optimization_level performance_mode
weight_transfer_config fail_on_environ_validation gdn_prefill_backend kda_prefill_backend
kda_decode_backend enable_flash_late_interaction collect_detailed_traces
"""


def _table() -> dict[str, Route]:
    table: dict[str, Route] = {}
    groups: tuple[tuple[Route, Any], ...] = (
        ("frontend", _FRONTEND.split()),
        ("both", _BOTH.split()),
        ("engine", _ENGINE.split()),
        ("refused", _REFUSED),
        ("ignored", _IGNORED),
    )
    for route, names in groups:
        for name in names:
            if name in table:
                raise AssertionError(f"{name} is classified twice")
            table[name] = route
    return table


FLAGS: dict[str, Route] = _table()
"""Every ``vllm serve`` 0.32 option's destination name -> its route."""

EXTRA_ARGS_JSON_KEYS = frozenset({"engine_ready_timeout_secs", "http_timeout_keep_alive"})
"""Keys ``vllm serve`` adds to ``--args-json`` besides its options (from its environment)."""


def note(dest: str) -> str:
    """Why a refused or ignored option is so, or a remark on another one ('' if none)."""
    return _REFUSED.get(dest) or _IGNORED.get(dest) or _NOTES.get(dest, "")


def option_name(dest: str) -> str:
    """The ``--option`` spelling of a destination name."""
    return "--" + dest.replace("_", "-")


def is_neutral(dest: str, value: Any) -> bool:
    """Whether ``value`` for the refused option ``dest`` is vLLM's default (no request)."""
    return any(value == v and type(value) is type(v) for v in NEUTRAL_VALUES.get(dest, ()))


def refused_message(dests: list[str]) -> str:
    """The startup error for refused options, each named with why."""
    return "these vllm serve options are not supported by vllm-frontend: " + "; ".join(
        f"{option_name(d)} ({note(d)})" for d in dests
    )


_ROUTE_TITLES: dict[Route, str] = {
    "frontend": "frontend",
    "both": "frontend and engines",
    "engine": "engines",
    "refused": "refused (stops startup)",
    "ignored": "ignored (logged)",
}


def markdown_table() -> str:
    """The README's table: each route and its options (with why, where there is a note)."""
    lines = ["| route | options |", "|---|---|"]
    for route in ROUTES:
        cells = []
        for dest in sorted(d for d, r in FLAGS.items() if r == route):
            why = note(dest)
            cells.append(f"`{option_name(dest)}`" + (f" ({why})" if why else ""))
        lines.append(f"| {_ROUTE_TITLES[route]} | {', '.join(cells)} |")
    return "\n".join(lines)

"""Wire structs of the vLLM 0.32 EngineCore protocol (engine-protocol.md §3–§5, §8).

Every struct mirrors its vLLM counterpart: same wire field names, field order, defaults and
array/map layout, so msgspec produces the same bytes vLLM does (§1.2, §1.3). vLLM files:
``vllm/v1/engine/__init__.py``, ``vllm/sampling_params.py``, ``vllm/pooling_params.py``,
``vllm/lora/request.py``, ``vllm/multimodal/inputs.py``, ``vllm/v1/outputs.py``,
``vllm/v1/metrics/stats.py``, ``vllm/v1/engine/utils.py``, ``vllm/v1/engine/coordinator.py``.

Deliberate differences from vLLM's Python classes (wire bytes are unaffected):

* Fields whose wire name starts with ``_`` (``_eos_token_id``, ``_backend`` …) have a public
  Python attribute without the underscore; the wire name is kept via ``msgspec.field(name=…)``.
* Python ``set`` fields (``_all_stop_token_ids``, ``finished_requests``) are lists, so the
  encoder keeps insertion order (the order is meaningless to the engine).
* vLLM dataclasses (``SchedulerStats``, ``PrefillStats``, ``EngineCoreReadyResponse`` …) are
  map structs that write all fields; every field has a default so that decoding is lenient.
* Tensors and arrays are :class:`~vllm_frontend.engine.tensors.Tensor` (torch-typed fields) and
  :class:`~vllm_frontend.engine.tensors.NdArray` (numpy-typed fields).

Decoding outputs is lenient by construction: msgspec fills missing trailing array elements from
defaults, ignores extra trailing elements and ignores unknown map keys.
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec

from vllm_frontend.engine.tensors import NdArray, Tensor

__all__ = [
    "COORDINATOR_READY",
    "COORDINATOR_SUBSCRIBE",
    "EEP_NOTIFICATION_CALL_ID",
    "ENGINE_CORE_DEAD",
    "FT_STATUS_CALL_ID",
    "CoordinatorFirstRequest",
    "CoordinatorPublish",
    "EngineCoreEvent",
    "EngineCoreEventType",
    "EngineCoreOutput",
    "EngineCoreOutputs",
    "EngineCoreReadyResponse",
    "EngineCoreRequest",
    "EngineHandshakeMetadata",
    "EngineZmqAddresses",
    "FinishReason",
    "HandshakeStatus",
    "LateInteractionParams",
    "LoRARequest",
    "LogprobsLists",
    "LogprobsTensors",
    "MultiModalFeatureSpec",
    "MultiModalFieldElem",
    "NdArray",
    "PlaceholderRange",
    "PoolingParams",
    "PrefillStats",
    "PrefixCacheStats",
    "RepetitionDetectionParams",
    "RequestOutputKind",
    "RequestSpecDecodeMetrics",
    "RequestType",
    "SamplingMaskLists",
    "SamplingParams",
    "SchedulerStats",
    "StartDpWave",
    "StructuredOutputsParams",
    "Tensor",
    "UtilityOutput",
    "UtilityRequest",
    "UtilityResult",
    "engine_identity",
]

# --------------------------------------------------------------------------------------------
# Constants and enums
# --------------------------------------------------------------------------------------------

ENGINE_CORE_DEAD = b"ENGINE_CORE_DEAD"
"""The single-frame sentinel an engine pushes to every output socket before dying (§9.1)."""

COORDINATOR_SUBSCRIBE = b"\x01"
"""Frame an XSUB socket sends to subscribe to everything on a coordinator XPUB (§8.4)."""

COORDINATOR_READY = b"READY"
"""Gate frame the coordinator broadcasts to engines once all have subscribed (§8.4)."""

EEP_NOTIFICATION_CALL_ID = -1
"""Utility ``call_id`` of unsolicited elastic-EP notifications (§5.7)."""

FT_STATUS_CALL_ID = -2
"""Utility ``call_id`` of unsolicited fault-tolerance status updates (§5.7)."""


def engine_identity(engine_index: int) -> bytes:
    """The ZMQ routing identity of engine ``engine_index``: 2-byte little-endian (§1.1)."""
    return engine_index.to_bytes(2, "little")


class RequestType(bytes, enum.Enum):
    """One-byte request type, the first frame after the identity (§4.1).

    Members are ``bytes`` themselves, so they can be sent as a frame directly.
    """

    ADD = b"\x00"
    ABORT = b"\x01"
    START_DP_WAVE = b"\x02"
    UTILITY = b"\x03"
    EXECUTOR_FAILED = b"\x04"
    """Engine-internal; sending it kills the engine. Never send."""
    WAKEUP = b"\x05"
    """Engine-internal. Never send."""


_FINISH_REASON_STRINGS = ("stop", "length", "abort", "error", "repetition")


class FinishReason(enum.IntEnum):
    """Why a request finished (§5.5); ``str()`` and :attr:`openai_name` give the OpenAI string."""

    STOP = 0
    LENGTH = 1
    ABORT = 2
    ERROR = 3
    REPETITION = 4

    @property
    def openai_name(self) -> str:
        """``"stop"``, ``"length"``, ``"abort"``, ``"error"`` or ``"repetition"``."""
        return _FINISH_REASON_STRINGS[self.value]

    def __str__(self) -> str:
        return _FINISH_REASON_STRINGS[self.value]


class EngineCoreEventType(enum.IntEnum):
    """Per-request scheduler event types (§5.5)."""

    QUEUED = 1
    SCHEDULED = 2
    PREEMPTED = 3


class RequestOutputKind(enum.IntEnum):
    """``SamplingParams.output_kind`` / ``PoolingParams.output_kind`` (frontend-only meaning)."""

    CUMULATIVE = 0
    DELTA = 1
    FINAL_ONLY = 2


# --------------------------------------------------------------------------------------------
# Frontend -> engine (§4)
# --------------------------------------------------------------------------------------------


class StructuredOutputsParams(msgspec.Struct, kw_only=True):
    """Structured-output constraint (§4.3); a dataclass in vLLM, so all 11 keys are written.

    Exactly one of ``json``, ``regex``, ``choice``, ``grammar``, ``json_object``,
    ``structural_tag`` must be set, and ``backend`` must name the engine's grammar backend.
    """

    json: str | dict[str, Any] | None = None
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None
    disable_any_whitespace: bool = False
    disable_additional_properties: bool = False
    whitespace_pattern: str | None = None
    structural_tag: str | None = None
    backend: str | None = msgspec.field(default=None, name="_backend")
    backend_was_auto: bool = msgspec.field(default=False, name="_backend_was_auto")


class RepetitionDetectionParams(msgspec.Struct, kw_only=True):
    """``SamplingParams.repetition_detection`` (a dataclass in vLLM: all keys written)."""

    max_pattern_size: int = 0
    min_pattern_size: int = 0
    min_count: int = 0


class SamplingParams(msgspec.Struct, omit_defaults=True, kw_only=True):
    """Sampling parameters (§4.3): a map with only non-default keys, header map16 (43 fields).

    The engine validates these on decode and dies on failure (§4.11), so validate first.
    """

    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    temperature: float = 1.0
    watermarking: bool | None = None
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    max_tokens: int | None = 16
    min_tokens: int = 0
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    prompt_logprob_token_ids: NdArray | None = None
    prompt_logprob_start: int | None = None
    logprob_token_ids: list[int] | None = None
    flat_logprobs: bool = False
    detokenize: bool = True
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE
    stream_interval: int | None = None
    skip_clone: bool = False
    output_text_buffer_length: int = 0
    eos_token_id: int | None = msgspec.field(default=None, name="_eos_token_id")
    all_stop_token_ids: list[int] = msgspec.field(default_factory=list, name="_all_stop_token_ids")
    watermarking_skipped: bool = msgspec.field(default=False, name="_watermarking_skipped")
    structured_outputs: StructuredOutputsParams | None = None
    logit_bias: dict[int, float] | None = None
    allowed_token_ids: list[int] | None = None
    extra_args: dict[str, Any] | None = None
    bad_words: list[str] | None = None
    bad_words_token_ids: list[list[int]] | None = msgspec.field(
        default=None, name="_bad_words_token_ids"
    )
    skip_reading_prefix_cache: bool | None = None
    thinking_token_budget: int | None = None
    repetition_detection: RepetitionDetectionParams | None = None
    routed_experts_prompt_start: int = 0
    trace_decode_token_ids: list[int] | None = None

    def __post_init__(self) -> None:
        # Canonical wire types, as vLLM's frontend produces them: msgspec omits a default only
        # when the value has the default's type, and writes an int 1 for a float field as an
        # int. So JSON-ish ints become floats and plain ints the enum; the bytes then match
        # vLLM's (the engine accepts either form).
        if type(self.output_kind) is not RequestOutputKind:
            self.output_kind = RequestOutputKind(self.output_kind)
        if type(self.temperature) is int:
            self.temperature = float(self.temperature)
        if type(self.top_p) is int:
            self.top_p = float(self.top_p)
        if type(self.min_p) is int:
            self.min_p = float(self.min_p)
        if type(self.presence_penalty) is int:
            self.presence_penalty = float(self.presence_penalty)
        if type(self.frequency_penalty) is int:
            self.frequency_penalty = float(self.frequency_penalty)
        if type(self.repetition_penalty) is int:
            self.repetition_penalty = float(self.repetition_penalty)


class LateInteractionParams(msgspec.Struct, array_like=True, omit_defaults=True):
    """``PoolingParams.late_interaction_params``: ``[mode, query_key, query_uses]``."""

    mode: str
    query_key: str
    query_uses: int | None = None


class PoolingParams(msgspec.Struct, array_like=True, omit_defaults=True, kw_only=True):
    """Pooling parameters (§4.4), a 10-element array. ``task`` must be engine-supported."""

    use_activation: bool | None = None
    dimensions: int | None = None
    step_tag_id: int | None = None
    returned_token_ids: list[int] | None = None
    task: str | None = None
    requires_token_ids: bool = False
    skip_reading_prefix_cache: bool | None = None
    late_interaction_params: LateInteractionParams | None = None
    extra_kwargs: dict[str, Any] | None = None
    output_kind: RequestOutputKind = RequestOutputKind.FINAL_ONLY

    def __post_init__(self) -> None:
        if type(self.output_kind) is not RequestOutputKind:  # see SamplingParams.__post_init__
            self.output_kind = RequestOutputKind(self.output_kind)


class LoRARequest(msgspec.Struct, array_like=True, omit_defaults=True):
    """A LoRA adapter (§4.5), 6-element array; also the argument of the ``add_lora`` utility."""

    lora_name: str
    lora_int_id: int
    lora_path: str = ""
    base_model_name: str | None = None
    load_inplace: bool = False
    is_3d_lora_weight: bool = False


class PlaceholderRange(msgspec.Struct):
    """Where a multimodal item's placeholder tokens sit in the prompt (§4.6)."""

    offset: int
    length: int
    is_embed: Tensor | None = None


class MultiModalFieldElem(msgspec.Struct):
    """One keyword of a multimodal item: ``{"data": nested tensors, "field": [factory, kwargs]}``.

    ``data`` is a :class:`Tensor`, an int, a float, or a list of those (recursively). ``field``
    is ``("batched" | "flat" | "shared", factory kwargs)`` (§4.6).
    """

    data: Any
    field: tuple[str, dict[str, Any]]


class MultiModalFeatureSpec(msgspec.Struct):
    """One multimodal item of a request (§4.6). ``data=None`` means "engine has it cached"."""

    data: dict[str, MultiModalFieldElem] | None
    modality: str
    identifier: str
    mm_position: PlaceholderRange
    mm_hash: str | None = None


class EngineCoreRequest(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    """ADD payload (§4.2): a 22-element array. Exactly one of sampling/pooling params is set."""

    request_id: str
    prompt_token_ids: list[int] | None
    mm_features: list[MultiModalFeatureSpec] | None
    sampling_params: SamplingParams | None
    pooling_params: PoolingParams | None
    arrival_time: float
    lora_request: LoRARequest | None
    cache_salt: str | None
    data_parallel_rank: int | None
    prompt_embeds: Tensor | None = None
    prompt_is_token_ids: list[bool] | None = None
    client_index: int = 0
    current_wave: int = 0
    priority: int = 0
    trace_headers: dict[str, str] | None = None
    resumable: bool = False
    external_req_id: str | None = None
    reasoning_ended: bool | None = None
    reasoning_parser_kwargs: dict[str, Any] | None = None
    abort_immediately: bool = False
    session_id: str | None = None
    kv_hints: dict[str, Any] | None = None


class UtilityRequest(msgspec.Struct, array_like=True):
    """UTILITY payload (§4.9): ``[client_index, call_id, method_name, args]``."""

    client_index: int
    call_id: int
    method_name: str
    args: list[Any]


class StartDpWave(msgspec.Struct, array_like=True):
    """START_DP_WAVE payload (§4.10, §8.5): ``[wave, exclude_engine_index]``.

    ``exclude_engine_index`` may be bytes when relayed from vLLM's Python client (§8.4).
    """

    wave: int
    exclude_engine_index: int | bytes | None = None


# --------------------------------------------------------------------------------------------
# Engine -> frontend (§5)
# --------------------------------------------------------------------------------------------


class LogprobsLists(msgspec.Struct, array_like=True, gc=False):
    """Sample logprobs of one output (§5.4): numpy arrays ``[P, K+1]``, ``[P, K+1]``, ``[P]``.

    Column 0 is the sampled token; keep only the first ``logprobs + 1`` columns.
    """

    logprob_token_ids: NdArray
    logprobs: NdArray
    sampled_token_ranks: NdArray
    cu_num_generated_tokens: list[int] | None = None


class LogprobsTensors(msgspec.Struct, array_like=True, gc=False):
    """Prompt logprobs (§5.4): torch tensors ``[R, K+1]``, ``[R, K+1]``, ``[R]`` (5 fields)."""

    logprob_token_ids: Tensor
    logprobs: Tensor
    selected_token_ranks: Tensor
    cu_num_generated_tokens: list[int] | None = None
    cu_num_generated_tokens_tensor: Tensor | None = None


class SamplingMaskLists(msgspec.Struct, array_like=True, gc=False):
    """``EngineCoreOutput.new_sampling_mask`` (only with ``--return-sampling-mask``)."""

    token_ids: NdArray
    offsets: NdArray | None = None
    cu_num_generated_tokens: list[int] | None = None


class EngineCoreEvent(msgspec.Struct, gc=False):
    """A timestamped scheduler event (engine monotonic clock), map ``{type, timestamp}``."""

    type: EngineCoreEventType
    timestamp: float


class PrefillStats(msgspec.Struct, kw_only=True, gc=False):
    """Prompt/cache token counts, on a request's first output (§5.3). All keys written."""

    num_prompt_tokens: int = 0
    num_computed_tokens: int = 0
    num_cached_tokens: int = 0
    num_local_cached_tokens: int = 0
    num_external_cached_tokens: int = 0
    num_cache_creation_tokens: int = 0


class RequestSpecDecodeMetrics(msgspec.Struct, kw_only=True):
    """Per-request speculative-decoding acceptance, on the final output."""

    num_spec_tokens: int = 0
    histogram: list[int] = msgspec.field(default_factory=list)
    num_draft_tokens: int = 0
    per_step_accepted: list[int] = msgspec.field(default_factory=list)
    per_step_drafted: list[int] = msgspec.field(default_factory=list)


class EngineCoreOutput(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    """One request's result of one engine step (§5.3): an 18-element array."""

    request_id: str
    new_token_ids: list[int]
    new_logprobs: LogprobsLists | None = None
    new_prompt_logprobs_tensors: LogprobsTensors | None = None
    pooling_output: Tensor | None = None
    finish_reason: FinishReason | None = None
    stop_reason: int | str | None = None
    events: list[EngineCoreEvent] | None = None
    kv_transfer_params: dict[str, Any] | None = None
    ec_transfer_params: dict[str, Any] | None = None
    trace_headers: dict[str, str] | None = None
    prefill_stats: PrefillStats | None = None
    routed_experts: NdArray | None = None
    num_nans_in_logits: int = 0
    mm_cache_miss_hashes: list[str] | None = None
    new_sampling_mask: SamplingMaskLists | None = None
    spec_decode_metrics: RequestSpecDecodeMetrics | None = None
    prompt_token_id_logprobs: Tensor | None = None

    @property
    def finished(self) -> bool:
        """Whether this is the request's last output (a finish reason is set)."""
        return self.finish_reason is not None


class PrefixCacheStats(msgspec.Struct, kw_only=True):
    """Prefix-cache counters (per-message deltas) inside :class:`SchedulerStats`."""

    reset: bool = False
    requests: int = 0
    queries: int = 0
    hits: int = 0
    preempted_requests: int = 0
    preempted_queries: int = 0
    preempted_hits: int = 0
    hits_by_source: dict[str, int] = msgspec.field(default_factory=dict)


class SchedulerStats(msgspec.Struct, kw_only=True):
    """Engine scheduler statistics (§5.6): map16 with 18 keys; decoded by key, unknown ignored.

    Nested members whose shape is connector- or feature-specific stay plain maps.
    """

    num_running_reqs: int = 0
    num_waiting_reqs: int = 0
    num_skipped_waiting_reqs: int = 0
    num_kv_fetch_reqs_by_stage: dict[str, int] = msgspec.field(default_factory=dict)
    step_counter: int = 0
    current_wave: int = 0
    kv_cache_usage: float = 0.0
    iteration_details: dict[str, Any] | None = None
    prefix_cache_stats: PrefixCacheStats = msgspec.field(default_factory=PrefixCacheStats)
    connector_prefix_cache_stats: PrefixCacheStats | None = None
    kv_cache_eviction_events: list[dict[str, Any]] = msgspec.field(default_factory=list)
    spec_decoding_stats: dict[str, Any] | None = None
    kv_connector_stats: dict[str, Any] | None = None
    ec_connector_stats: dict[str, Any] | None = None
    waiting_lora_adapters: dict[str, int] = msgspec.field(default_factory=dict)
    running_lora_adapters: dict[str, int] = msgspec.field(default_factory=dict)
    cudagraph_stats: dict[str, Any] | None = None
    perf_stats: dict[str, Any] | None = None


class UtilityResult(msgspec.Struct, array_like=True):
    """Successful utility result envelope ``[type_info, value]``; ``type_info`` is ignorable."""

    type_info: Any = None
    value: Any = None


class UtilityOutput(msgspec.Struct, array_like=True, gc=False):
    """Utility reply (§5.7): ``[call_id, failure_message, result]``."""

    call_id: int
    failure_message: str | None = None
    result: UtilityResult | None = None


class EngineCoreOutputs(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    """Everything on the output socket except the dead sentinel (§5.2): a 9-element array.

    ``timestamp`` is the engine's monotonic clock; vLLM fills it at construction, here the
    sender must set it.
    """

    engine_index: int = 0
    outputs: list[EngineCoreOutput] = msgspec.field(default_factory=list)
    scheduler_stats: SchedulerStats | None = None
    timestamp: float = 0.0
    utility_output: UtilityOutput | None = None
    finished_requests: list[str] | None = None
    wave_complete: int | None = None
    start_wave: int | None = None
    weight_version: str | None = None


class EngineCoreReadyResponse(msgspec.Struct, kw_only=True):
    """Engine registration message (§3.3): map16 with 25 keys, decoded by key.

    Keys that vLLM always sends have ``None`` defaults here so that a partial map from another
    engine version decodes; ``None`` means "not reported".
    """

    max_model_len: int | None = None
    num_gpu_blocks: int | None = None
    block_size: int | None = None
    dp_stats_address: str | None = None
    dtype: str | None = None
    vllm_version: str | None = None
    world_size: int | None = None
    data_parallel_size: int | None = None
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    decode_context_parallel_size: int | None = None
    data_parallel_rank: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    instance_id: str | None = None
    supports_lora: bool | None = None
    max_loras: int | None = None
    mamba_block_size: int | None = None
    kv_cache_size_tokens: int | None = None
    kv_cache_max_concurrency: float | None = None
    kv_events_config: dict[str, Any] | None = None
    weight_transfer_backend: str | None = None
    enable_sleep_mode: bool = False
    supports_draft_weight_updates: bool = False
    effective_attention_block_size: int | None = None


# --------------------------------------------------------------------------------------------
# Handshake (§3.1)
# --------------------------------------------------------------------------------------------


class HandshakeStatus(msgspec.Struct, omit_defaults=True, kw_only=True):
    """HELLO / READY from an engine on the handshake socket (§3.1.2).

    ``parallel_config_hash`` is written only when set (DP > 1).
    """

    status: str
    local: bool
    headless: bool
    parallel_config_hash: str | None = None


class EngineZmqAddresses(msgspec.Struct, kw_only=True):
    """Where an engine must connect (§3.1.3); all five keys are always written."""

    inputs: list[str]
    outputs: list[str]
    coordinator_input: str | None = None
    coordinator_output: str | None = None
    frontend_stats_publish_address: str | None = None


class EngineHandshakeMetadata(msgspec.Struct, kw_only=True):
    """INIT message the handshake owner sends in reply to HELLO (§3.1.3)."""

    addresses: EngineZmqAddresses
    parallel_config: dict[str, Any] = msgspec.field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# Coordinator (§8.4)
# --------------------------------------------------------------------------------------------


class CoordinatorPublish(msgspec.Struct, array_like=True):
    """Coordinator -> frontends: ``[counts, current_wave, engines_running]``.

    ``counts`` is None for a wave-state change, else one ``(waiting, running, kv_cache_usage)``
    per **global** engine index.
    """

    counts: list[tuple[int, int, float]] | None
    current_wave: int
    engines_running: bool


class CoordinatorFirstRequest(msgspec.Struct, array_like=True):
    """Frontend -> coordinator "first request while paused": ``[exclude_engine_index, wave]``.

    vLLM's Python client sends the engine identity as bytes; an int index is the intended form.
    """

    exclude_engine_index: int | bytes | None
    wave: int

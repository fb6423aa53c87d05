"""What shapes a mock engine, and the registration it answers the handshake with."""

from __future__ import annotations

from dataclasses import dataclass

from vllm_frontend.engine.protocol import EngineCoreReadyResponse

__all__ = ["VLLM_VERSION", "MockEngineOptions", "registration_message"]

VLLM_VERSION = "0.32.0"


@dataclass(frozen=True, kw_only=True)
class MockEngineOptions:
    """Everything that shapes a mock engine's behaviour (one per process, shared by engines)."""

    vocab_size: int = 128000
    """Generated token ids are uniform in ``[0, vocab_size)``."""
    tokens_per_step: int = 1
    """New tokens per running request per step (K > 1 looks like speculative decoding)."""
    step_ms: float = 5.0
    """Step period in milliseconds; 0 steps as fast as possible."""
    precise_steps: bool = False
    """Step on the clock: wait out the last fraction of a millisecond before a step with a
    sleep. Without it the engine polls its inputs for whole milliseconds (rounded up), so a
    step that no input arrival wakes it for runs up to 1 ms late."""
    seed: int = 0
    """Seed of the token/logprob generator (each engine mixes in its index)."""
    max_model_len: int = 8192
    data_parallel_size: int = 1
    log_stats: bool = True
    """Send SchedulerStats every step and request events, like an engine without
    ``--disable-log-stats``."""
    num_gpu_blocks: int = 1_000_000
    block_size: int = 16
    max_num_seqs: int = 1024
    """Requests beyond this many wait (reported as waiting) until a slot frees."""
    max_num_batched_tokens: int = 8192
    dtype: str = "bfloat16"
    max_logprobs: int = 20
    """Width used for ``logprobs=-1`` / ``prompt_logprobs=-1`` (the real engine sends the whole
    vocabulary; a mock caps it to stay cheap)."""
    die_after_requests: int | None = None
    """Fault injection: after this many ADDs the engine runs one more step, then dies."""
    mm_cache_misses: bool = False
    """Fault injection: the engine's multimodal cache holds nothing, so a request with an item
    sent without data (the frontend thought the engine held it) finishes with ERROR and the
    item in ``mm_cache_miss_hashes``, as vLLM's engine answers a cache drift."""
    record_requests: str | None = None
    """Append every ADD request's frames to this file (see :mod:`vllm_frontend.mock.recording`)."""
    script: tuple[int, ...] | None = None
    """Scripted output: every request emits these token ids in order (from the start again once
    through) instead of random ones, e.g. a tool-call text tokenized for a benchmark."""


def registration_message(
    options: MockEngineOptions,
    engine_index: int,
    *,
    dp_stats_address: str | None = None,
    instance_id: str = "mock-engine",
) -> EngineCoreReadyResponse:
    """The ``EngineCoreReadyResponse`` an engine with these options registers with (§3.3).

    The derived KV figures follow vLLM: capacity in tokens = blocks x block size, and
    concurrency = capacity / max_model_len.
    """
    kv_tokens = options.num_gpu_blocks * options.block_size
    return EngineCoreReadyResponse(
        max_model_len=options.max_model_len,
        num_gpu_blocks=options.num_gpu_blocks,
        block_size=options.block_size,
        dp_stats_address=dp_stats_address,
        dtype=options.dtype,
        vllm_version=VLLM_VERSION,
        world_size=1,
        data_parallel_size=options.data_parallel_size,
        tensor_parallel_size=1,
        pipeline_parallel_size=1,
        decode_context_parallel_size=1,
        data_parallel_rank=engine_index,
        max_num_seqs=options.max_num_seqs,
        max_num_batched_tokens=options.max_num_batched_tokens,
        instance_id=instance_id,
        supports_lora=False,
        max_loras=0,
        mamba_block_size=None,
        kv_cache_size_tokens=kv_tokens,
        kv_cache_max_concurrency=kv_tokens / options.max_model_len,
        kv_events_config=None,
        weight_transfer_backend=None,
        enable_sleep_mode=False,
        supports_draft_weight_updates=False,
        effective_attention_block_size=options.block_size,
    )

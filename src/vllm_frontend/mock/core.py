"""The mock engine's scheduler: a sans-IO stand-in for vLLM's ``EngineCore`` without a model.

It takes decoded requests (ADD, ABORT, UTILITY) and produces ``EngineCoreOutputs`` per client
for each step, following what vLLM 0.32's engine does around its model (``vllm/v1/engine/
core.py``, ``vllm/v1/core/sched/scheduler.py``, ``vllm/v1/core/sched/utils.py``): prefill is
instant, every step gives each running request ``tokens_per_step`` random tokens, requests finish
at ``max_tokens``/``max_model_len`` (LENGTH) or on a sampled EOS/stop token (STOP, masked below
``min_tokens``), client aborts produce no output, and malformed requests finish with ERROR. One
step yields at most one message per client, carrying every request of that client.

Nothing here touches a socket; :mod:`vllm_frontend.mock.engine` is the ZMQ adapter.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np

from vllm_frontend.engine.protocol import (
    EngineCoreEvent,
    EngineCoreEventType,
    EngineCoreOutput,
    EngineCoreOutputs,
    EngineCoreReadyResponse,
    EngineCoreRequest,
    FinishReason,
    LogprobsLists,
    LogprobsTensors,
    NdArray,
    PrefillStats,
    PrefixCacheStats,
    SchedulerStats,
    Tensor,
    UtilityOutput,
    UtilityRequest,
    UtilityResult,
)

__all__ = ["MockEngineCore", "MockEngineOptions", "registration_message"]

VLLM_VERSION = "0.32.0"

_STOP = FinishReason.STOP
_LENGTH = FinishReason.LENGTH
_ABORT = FinishReason.ABORT
_ERROR = FinishReason.ERROR


@dataclass(frozen=True, kw_only=True)
class MockEngineOptions:
    """Everything that shapes a mock engine's behaviour (one per process, shared by engines)."""

    vocab_size: int = 128000
    """Generated token ids are uniform in ``[0, vocab_size)``."""
    tokens_per_step: int = 1
    """New tokens per running request per step (K > 1 looks like speculative decoding)."""
    step_ms: float = 5.0
    """Step period in milliseconds; 0 steps as fast as possible."""
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


_encode = msgspec.msgpack.encode


def _raw_array(items: list[bytes]) -> msgspec.Raw:
    """A msgpack array of already-encoded elements."""
    n = len(items)
    if n < 16:
        header = bytes((0x90 | n,))
    elif n < 0x10000:
        header = b"\xdc" + n.to_bytes(2, "big")
    else:
        header = b"\xdd" + n.to_bytes(4, "big")
    return msgspec.Raw(header + b"".join(items))


class _Request:
    """One admitted request's decode state."""

    __slots__ = (
        "checks_stop",
        "client_index",
        "eos",
        "events",
        "limit",
        "logprobs",
        "mask",
        "min_tokens",
        "num_output",
        "prompt",
        "prompt_len",
        "prompt_logprobs",
        "request_id",
        "scheduled",
        "stop_ids",
        "trace_headers",
        "wire_prefix",
        "wire_suffix",
    )

    def __init__(self, req: EngineCoreRequest, limit: int, options: MockEngineOptions) -> None:
        sp = req.sampling_params
        assert sp is not None and req.prompt_token_ids is not None
        self.request_id = req.request_id
        self.client_index = req.client_index
        self.prompt = req.prompt_token_ids
        self.limit = limit
        self.min_tokens = sp.min_tokens
        self.eos = sp.eos_token_id
        self.stop_ids: frozenset[int] = frozenset(sp.stop_token_ids or ())
        # vLLM masks `_all_stop_token_ids` (which always includes stop_token_ids) while
        # fewer than min_tokens have been generated, so they cannot be sampled then.
        self.mask: frozenset[int] = (
            frozenset(sp.all_stop_token_ids) | self.stop_ids if sp.min_tokens else frozenset()
        )
        cap = options.max_logprobs
        self.logprobs = None if sp.logprobs is None else (cap if sp.logprobs < 0 else sp.logprobs)
        pl = sp.prompt_logprobs
        self.prompt_logprobs = None if pl is None else (cap if pl < 0 else pl)
        self.trace_headers = req.trace_headers
        self.prompt_len = len(self.prompt)
        self.checks_stop = self.eos is not None or bool(self.stop_ids) or bool(self.mask)
        # EngineCoreOutput (18-element array) with only request_id, new_token_ids and the echoed
        # trace_headers set, split around new_token_ids.
        self.wire_prefix = b"\xdc\x00\x12" + _encode(self.request_id)
        self.wire_suffix = (
            b"\xc0" * 8 + _encode(self.trace_headers) + b"\xc0\xc0\x00\xc0\xc0\xc0\xc0"
        )
        self.num_output = 0
        self.scheduled = False
        self.events: list[EngineCoreEvent] | None = None


def _validation_error(req: EngineCoreRequest, options: MockEngineOptions) -> str | None:
    """Why the engine could not run ``req`` (it then finishes with ERROR), or None."""
    sp = req.sampling_params
    if req.pooling_params is not None or sp is None:
        return "mock engine only supports the generate task"
    if req.prompt_token_ids is None:
        return "prompt embeddings are not enabled"
    if not req.prompt_token_ids:
        return "empty prompt"
    if sp.max_tokens is None or sp.max_tokens < 1:
        return f"max_tokens must be at least 1, got {sp.max_tokens}"
    if sp.min_tokens < 0 or sp.min_tokens > sp.max_tokens:
        return f"min_tokens must be in [0, max_tokens], got {sp.min_tokens}"
    if any(t < 0 for t in req.prompt_token_ids):
        # The model's vocabulary is unknown here (`vocab_size` only bounds generated ids).
        return "negative prompt token id"
    return None


class _Utilities:
    """Engine methods reachable through UTILITY calls (names and signatures as in vLLM 0.32).

    Methods are called with the decoded positional arguments, so a wrong arity raises the same
    TypeError the real engine would report.
    """

    def __init__(self, core: MockEngineCore) -> None:
        self._core = core

    def get_supported_tasks(self) -> tuple[str, ...]:
        return ("generate",)

    def is_sleeping(self) -> bool:
        return self._core.sleeping

    def sleep(self, level: int = 1, mode: str = "abort") -> None:
        self.pause_scheduler(mode)
        self._core.sleeping = True

    def wake_up(self, tags: list[str] | None = None) -> bool:
        self._core.sleeping = False
        self._core.paused = False
        return True

    def release_kv_cache_memory(self) -> None:
        return None

    def reset_prefix_cache(
        self, reset_running_requests: bool = False, reset_connector: bool = False
    ) -> bool:
        self._core.prefix_cache_reset = True
        return True

    def reset_mm_cache(self) -> None:
        return None

    def reset_encoder_cache(self) -> None:
        return None

    def pause_scheduler(self, mode: str = "abort", clear_cache: bool = True) -> None:
        if mode not in ("abort", "wait", "keep"):
            raise ValueError(f"Invalid pause mode: {mode}")
        if mode == "abort":
            self._core.abort_all(_ABORT)
        self._core.paused = True
        self._core.pause_mode = mode

    def resume_scheduler(self) -> None:
        self._core.paused = False

    def is_scheduler_paused(self) -> bool:
        return self._core.paused

    def add_lora(self, lora_request: Any) -> bool:
        raise RuntimeError("LoRA is not enabled")

    def remove_lora(self, lora_id: int) -> bool:
        raise RuntimeError("LoRA is not enabled")

    def pin_lora(self, lora_id: int) -> bool:
        raise RuntimeError("LoRA is not enabled")

    def list_loras(self) -> list[int]:
        return []

    def profile(
        self,
        is_start: bool = True,
        profile_prefix: str | None = None,
        delay_iterations: int | None = None,
        max_iterations: int | None = None,
    ) -> None:
        return None

    def collective_rpc(
        self,
        method: str,
        timeout: float | None = None,
        args: list[Any] | tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> list[Any]:
        # One (model-less) worker that answers every method with None.
        return [None]

    def execute_dummy_batch(self) -> None:
        return None

    def set_weight_version(self, weight_version: str) -> None:
        self._core.weight_version = weight_version

    def get_weight_version(self) -> str:
        return self._core.weight_version

    def save_sharded_state(
        self, path: str, pattern: str | None = None, max_size: int | None = None
    ) -> None:
        return None

    def compute_weight_checksums(self) -> list[dict[str, str]]:
        return [{}]

    def get_kv_cache_group_metadata(self) -> list[dict[str, Any]]:
        return [
            {
                "group_idx": 0,
                "kind": "full_attention",
                "block_size": self._core.options.block_size,
                "sliding_window": None,
            }
        ]


Message = tuple[int, EngineCoreOutputs]
"""An outgoing message and the client index (output socket) it goes to."""


class MockEngineCore:
    """One engine's request state and step function (sans-IO, single-threaded).

    Feed it with :meth:`add`, :meth:`abort` and :meth:`utility`, send what :meth:`take_pending`
    returns after each input, and call :meth:`step` whenever :attr:`has_work` and the step
    period has elapsed, sending what it returns.
    """

    def __init__(
        self,
        engine_index: int,
        options: MockEngineOptions,
        *,
        track_finished: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.engine_index = engine_index
        self.options = options
        self.track_finished = track_finished
        """Report finished ids on step messages (vLLM does so when a DP coordinator runs)."""
        self._clock = clock
        self._rng = np.random.default_rng([options.seed, engine_index])
        self._running: dict[str, _Request] = {}
        self._waiting: deque[_Request] = deque()
        self._live: dict[str, _Request] = {}
        self._pending: list[Message] = []
        self._finished_ids: dict[int, list[str]] = {}
        self._utilities = _Utilities(self)
        self._with_logprobs = 0
        self._new_prompt_logprobs = 0
        self._plain_encoder = msgspec.msgpack.Encoder()
        self.raw_outputs = True
        """Write common outputs as pre-encoded msgpack (tests compare it with the struct path)."""
        # vLLM's scheduler runs one more (empty) step after requests finish or are aborted,
        # which reports the new counts (and finished ids): `has_finished_requests()`.
        self._needs_flush = False
        self._new_scheduled = 0
        self._new_scheduled_tokens = 0
        self.sleeping = False
        self.paused = False
        self.pause_mode = "abort"
        self.prefix_cache_reset = False
        self.weight_version = "default"
        self.shutting_down = False
        # Counters for the process's cost report.
        self.requests_added = 0
        self.output_tokens = 0
        self.steps = 0

    # ------------------------------------------------------------------ state

    @property
    def has_work(self) -> bool:
        """Whether a step would generate tokens (running requests, or admittable waiting ones)."""
        if self._needs_flush:
            return True
        if self.paused:
            return self.pause_mode == "wait" and bool(self._running)
        return bool(self._running) or bool(self._waiting)

    @property
    def num_running(self) -> int:
        """Requests currently generating."""
        return len(self._running)

    @property
    def num_waiting(self) -> int:
        """Requests queued behind ``max_num_seqs`` or a pause."""
        return len(self._waiting)

    @property
    def quota_reached(self) -> bool:
        """Fault injection: the engine has taken ``die_after_requests`` requests."""
        limit = self.options.die_after_requests
        return limit is not None and self.requests_added >= limit

    def take_pending(self) -> list[Message]:
        """Messages produced outside a step (ERROR/ABORT finishes, utility replies), in order."""
        pending, self._pending = self._pending, []
        now = self._clock()
        for _, msg in pending:
            msg.timestamp = now
        return pending

    def _emit_finish(self, client_index: int, request_id: str, reason: FinishReason) -> None:
        # vLLM builds one message per batch of engine-initiated finishes, with the ids in
        # finished_requests (scheduler.py / core.py `_send_abort_outputs`).
        output = EngineCoreOutput(request_id, [], finish_reason=reason)
        if self._pending:
            client, last = self._pending[-1]
            if client == client_index and last.utility_output is None:
                last.outputs.append(output)
                assert last.finished_requests is not None
                last.finished_requests.append(request_id)
                return
        msg = EngineCoreOutputs(
            engine_index=self.engine_index, outputs=[output], finished_requests=[request_id]
        )
        self._pending.append((client_index, msg))

    # ------------------------------------------------------------------ inputs

    def add(self, req: EngineCoreRequest) -> None:
        """Queue an ADD; invalid ones finish at once with ERROR (see take_pending)."""
        self.requests_added += 1
        rid = req.request_id
        if self.shutting_down:
            # vLLM answers ADDs that arrive during shutdown with an ABORT finish.
            self._emit_finish(req.client_index, rid, _ABORT)
            return
        problem = _validation_error(req, self.options)
        if problem is None and rid in self._live:
            # A real engine dies on a duplicate live id; the mock fails both requests instead.
            problem = "duplicate request id"
            self._drop(rid)
        if problem is not None:
            self._emit_finish(req.client_index, rid, _ERROR)
            return
        sp = req.sampling_params
        assert sp is not None and sp.max_tokens is not None and req.prompt_token_ids is not None
        room = self.options.max_model_len - len(req.prompt_token_ids)
        request = _Request(req, max(1, min(sp.max_tokens, room)), self.options)
        if self.options.log_stats:
            request.events = [EngineCoreEvent(EngineCoreEventType.QUEUED, self._clock())]
        self._live[rid] = request
        self._waiting.append(request)

    def _drop(self, rid: str) -> _Request | None:
        request = self._live.pop(rid, None)
        if request is None:
            return None
        if self._running.pop(rid, None) is None:
            self._waiting.remove(request)
        elif request.logprobs is not None:
            self._with_logprobs -= 1
        return request

    def fail(self, client_index: int, request_id: str) -> None:
        """Finish a request the engine could not even decode with ERROR."""
        self._drop(request_id)
        self._emit_finish(client_index, request_id, _ERROR)

    def abort(self, request_ids: list[str]) -> None:
        """Client abort: drop the requests without any output, as vLLM does."""
        for rid in request_ids:
            request = self._drop(rid)
            if request is None:
                continue
            self._needs_flush = True
            if self.track_finished:
                self._finished_ids.setdefault(request.client_index, []).append(rid)

    def abort_all(self, reason: FinishReason = _ABORT) -> None:
        """Engine-initiated finish of every live request (pause/sleep ``abort``, shutdown)."""
        for request in self._live.values():
            self._emit_finish(request.client_index, request.request_id, reason)
        self._live.clear()
        self._running.clear()
        self._waiting.clear()
        self._with_logprobs = 0

    def utility(self, call: UtilityRequest) -> None:
        """Run a utility method; its reply goes to ``call.client_index`` (see take_pending)."""
        name = call.method_name
        out = UtilityOutput(call.call_id)
        if self.shutting_down:
            out.failure_message = "Server shutting down"
        elif name.startswith("_") or not hasattr(_Utilities, name):
            # The text of the AttributeError the real engine's getattr raises.
            out.failure_message = (
                f"Call to {name} method failed: 'EngineCoreProc' object has no attribute '{name}'"
            )
        else:
            try:
                value = getattr(self._utilities, name)(*call.args)
            except Exception as exc:
                out.failure_message = f"Call to {name} method failed: {exc}"
            else:
                out.result = UtilityResult(None, value)
        reply = EngineCoreOutputs(engine_index=self.engine_index, utility_output=out)
        self._pending.append((call.client_index, reply))

    # ------------------------------------------------------------------ stepping

    def _admit(self, now: float) -> None:
        limit = self.options.max_num_seqs
        while self._waiting and len(self._running) < limit:
            request = self._waiting.popleft()
            if request.events is not None:
                request.events.append(EngineCoreEvent(EngineCoreEventType.SCHEDULED, now))
            self._running[request.request_id] = request
            if request.logprobs is not None:
                self._with_logprobs += 1
            if request.prompt_logprobs is not None:
                self._new_prompt_logprobs += 1
            self._new_scheduled += 1
            self._new_scheduled_tokens += len(request.prompt)

    def step(self) -> list[Message]:
        """One engine step: new tokens for every running request, one message per client."""
        now = self._clock()
        if not self.paused:
            self._admit(now)
        running = self._running
        flush, self._needs_flush = self._needs_flush, False
        if not running:
            return self._step_messages({}, 0, now) if flush else []
        self.steps += 1
        opts = self.options
        k = opts.tokens_per_step
        token_ids: list[int] = self._rng.integers(0, opts.vocab_size, len(running) * k).tolist()
        width = 0
        lp_row = 0
        with_logprobs = bool(self._with_logprobs)
        if with_logprobs:
            width = max(r.logprobs for r in running.values() if r.logprobs is not None)
            lp_ids, lp_lps, lp_ranks = self._logprob_batch(self._with_logprobs * k, width)
        block = opts.block_size
        # Fast path: outputs are written as msgpack bytes (msgspec.Raw) unless some output of
        # this step carries arrays, whose out-of-band frame numbering needs the full encoder.
        raw = self.raw_outputs and not self._with_logprobs and not self._new_prompt_logprobs
        plain = self._plain_encoder.encode
        by_client: dict[int, list[Any]] = {}
        finished: list[_Request] = []
        used_blocks = 0
        emitted = 0
        base = 0
        for request in running.values():
            take = request.limit - request.num_output
            if take > k:
                take = k
            toks = token_ids[base : base + take]
            base += k
            finish: FinishReason | None = None
            stop_reason: int | None = None
            if request.checks_stop:
                toks, finish, stop_reason = self._check_stop(request, toks)
            first = request.num_output == 0
            request.num_output += len(toks)
            emitted += len(toks)
            if finish is None and request.num_output >= request.limit:
                finish = _LENGTH
            out: Any
            if raw and finish is None and not first:
                # The common case: only request_id and new_token_ids differ from defaults.
                out = request.wire_prefix + plain(toks) + request.wire_suffix
            else:
                out = EngineCoreOutput(
                    request.request_id,
                    toks,
                    finish_reason=finish,
                    stop_reason=stop_reason,
                    trace_headers=request.trace_headers,
                )
                if request.events is not None:
                    out.events = request.events
                    request.events = None
                if first:
                    self._first_output(request, out)
                if request.logprobs is not None:
                    end = lp_row + len(toks)
                    lp_ids[lp_row:end, 0] = toks
                    out.new_logprobs = LogprobsLists(
                        NdArray.from_numpy(lp_ids[lp_row:end]),
                        NdArray.from_numpy(lp_lps[lp_row:end]),
                        NdArray.from_numpy(lp_ranks[lp_row:end]),
                    )
                    lp_row += k
                if raw:
                    out = plain(out)
            outs = by_client.get(request.client_index)
            if outs is None:
                by_client[request.client_index] = [out]
            else:
                outs.append(out)
            if finish is not None:
                finished.append(request)
            else:
                used_blocks += -(-(request.prompt_len + request.num_output) // block)
        self._new_prompt_logprobs = 0
        if with_logprobs:
            # The outputs hold views of these arrays; they are encoded after this returns.
            self._place_sampled(lp_ids, lp_ranks, width)
        if raw:
            by_client = {c: _raw_array(outs) for c, outs in by_client.items()}  # type: ignore[misc]
        for request in finished:
            rid = request.request_id
            del running[rid]
            del self._live[rid]
            if request.logprobs is not None:
                self._with_logprobs -= 1
            if self.track_finished:
                self._finished_ids.setdefault(request.client_index, []).append(rid)
        self.output_tokens += emitted
        self._needs_flush = bool(finished)
        return self._step_messages(by_client, used_blocks, now)

    def _step_messages(
        self, by_client: dict[int, Any], used_blocks: int, now: float
    ) -> list[Message]:
        messages: dict[int, EngineCoreOutputs] = {
            client: EngineCoreOutputs(
                engine_index=self.engine_index,
                outputs=outs,
                timestamp=now,
                weight_version=self.weight_version,
            )
            for client, outs in by_client.items()
        }
        if self._finished_ids:
            for client, ids in self._finished_ids.items():
                msg = messages.get(client)
                if msg is None:
                    msg = messages[client] = EngineCoreOutputs(
                        engine_index=self.engine_index,
                        timestamp=now,
                        weight_version=self.weight_version,
                    )
                msg.finished_requests = ids
            self._finished_ids = {}
        if self.options.log_stats:
            # vLLM attaches the stats to the first client's message of the step.
            stats = self._scheduler_stats(used_blocks)
            if messages:
                next(iter(messages.values())).scheduler_stats = stats
            else:
                messages[0] = EngineCoreOutputs(
                    engine_index=self.engine_index,
                    scheduler_stats=stats,
                    timestamp=now,
                    weight_version=self.weight_version,
                )
        return list(messages.items())

    def _check_stop(
        self, request: _Request, toks: list[int]
    ) -> tuple[list[int], FinishReason | None, int | None]:
        # Mirrors vllm/v1/core/sched/utils.py `check_stop` token by token (several tokens per
        # step behave like accepted speculative tokens: generation ends at the first stop).
        for j, tok in enumerate(toks):
            if request.num_output + j < request.min_tokens and tok in request.mask:
                # The sampler masks these until min_tokens: draw the next allowed id instead.
                while tok in request.mask:
                    tok = (tok + 1) % self.options.vocab_size
                toks[j] = tok
            if tok == request.eos:
                return toks[: j + 1], _STOP, None
            if tok in request.stop_ids:
                return toks[: j + 1], _STOP, tok
        return toks, None, None

    def _first_output(self, request: _Request, out: EngineCoreOutput) -> None:
        prompt_len = len(request.prompt)
        block = self.options.block_size
        out.prefill_stats = PrefillStats(
            num_prompt_tokens=prompt_len,
            num_computed_tokens=prompt_len,
            num_cache_creation_tokens=prompt_len // block * block,
        )
        if request.prompt_logprobs is not None:
            out.new_prompt_logprobs_tensors = self._prompt_logprobs(
                request.prompt, request.prompt_logprobs
            )

    def _distribution(self, rows: int, width: int) -> tuple[np.ndarray, np.ndarray]:
        """Plausible top-``width`` log-probabilities (descending, total mass < 1) and ranks."""
        rng = self._rng
        mass = rng.exponential(size=(rows, width + 4))
        mass[:, 0] += 2.0  # a clear favourite, like a trained model
        mass = -np.sort(-mass, axis=1)
        probs = mass / (mass.sum(axis=1, keepdims=True) * 1.25)
        ranks = np.minimum(rng.geometric(0.6, size=rows), width + 4).astype(np.int64)
        return np.log(probs).astype(np.float32), ranks

    def _logprob_batch(self, rows: int, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sample-logprob arrays for ``rows`` positions; column 0 of the ids is left to fill.

        One batch per step keeps the numpy work per step, not per request: each request gets
        row views of these arrays (see :meth:`_place_sampled`).
        """
        logp, ranks = self._distribution(rows, width)
        ids = np.empty((rows, width + 1), dtype=np.int32)
        ids[:, 1:] = self._rng.integers(0, self.options.vocab_size, size=(rows, width))
        lps = np.empty((rows, width + 1), dtype=np.float32)
        lps[:, 1:] = logp[:, :width]
        lps[:, 0] = logp[np.arange(rows), ranks - 1]
        return ids, lps, ranks

    @staticmethod
    def _place_sampled(ids: np.ndarray, ranks: np.ndarray, width: int) -> None:
        # The sampled token also sits at its rank among the candidates when it made the top-k.
        in_top = np.nonzero(ranks <= width)[0]
        ids[in_top, ranks[in_top]] = ids[in_top, 0]

    def _prompt_logprobs(self, prompt: list[int], width: int) -> LogprobsTensors:
        # Row r scores prompt token r+1 (the first prompt token has no logprob).
        ids, lps, ranks = self._logprob_batch(max(len(prompt) - 1, 0), width)
        ids[:, 0] = prompt[1:]
        self._place_sampled(ids, ranks, width)
        return LogprobsTensors(
            Tensor.from_numpy(ids), Tensor.from_numpy(lps), Tensor.from_numpy(ranks)
        )

    def _scheduler_stats(self, used_blocks: int) -> SchedulerStats:
        prefix = PrefixCacheStats(
            reset=self.prefix_cache_reset,
            requests=self._new_scheduled,
            queries=self._new_scheduled_tokens,
        )
        self.prefix_cache_reset = False
        self._new_scheduled = self._new_scheduled_tokens = 0
        return SchedulerStats(
            num_running_reqs=len(self._running),
            num_waiting_reqs=len(self._waiting),
            kv_cache_usage=min(used_blocks / self.options.num_gpu_blocks, 1.0),
            prefix_cache_stats=prefix,
        )

    def load_stats(self) -> SchedulerStats:
        """The request counts an engine publishes to a DP coordinator (§8.4)."""
        used = sum(
            math.ceil((len(r.prompt) + r.num_output) / self.options.block_size)
            for r in self._running.values()
        )
        return SchedulerStats(
            num_running_reqs=len(self._running),
            num_waiting_reqs=len(self._waiting),
            kv_cache_usage=min(used / self.options.num_gpu_blocks, 1.0),
        )

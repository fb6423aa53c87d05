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

import time
from collections import deque
from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np

from vllm_frontend.engine.protocol import (
    EngineCoreEvent,
    EngineCoreEventType,
    EngineCoreOutput,
    EngineCoreOutputs,
    EngineCoreRequest,
    FinishReason,
    LogprobsLists,
    NdArray,
    PrefillStats,
    SchedulerStats,
    UtilityOutput,
    UtilityRequest,
    UtilityResult,
)
from vllm_frontend.mock.logprobs import MockLogprobs
from vllm_frontend.mock.options import MockEngineOptions, registration_message
from vllm_frontend.mock.reports import Message, PendingMessages, StepReports
from vllm_frontend.mock.requests import MockRequest, check_stop, validation_error

__all__ = ["MockEngineCore", "MockEngineOptions", "registration_message"]

_STOP = FinishReason.STOP
_LENGTH = FinishReason.LENGTH
_ABORT = FinishReason.ABORT
_ERROR = FinishReason.ERROR


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


def _scripted(script: tuple[int, ...], start: int, n: int) -> list[int]:
    """``n`` ids of ``script`` from position ``start``, wrapping around at its end."""
    length = len(script)
    return [script[(start + i) % length] for i in range(n)]


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
        self._core._report.prefix_cache_reset = True
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
        self._core._report.weight_version = weight_version

    def get_weight_version(self) -> str:
        return self._core._report.weight_version

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


def _utility_reply(utilities: _Utilities, call: UtilityRequest) -> EngineCoreOutputs:
    """The reply to a UTILITY call: its result, or the failure the real engine reports."""
    core = utilities._core
    name = call.method_name
    out = UtilityOutput(call.call_id)
    if core.shutting_down:
        out.failure_message = "Server shutting down"
    elif name.startswith("_") or not hasattr(_Utilities, name):
        # The text of the AttributeError the real engine's getattr raises.
        out.failure_message = (
            f"Call to {name} method failed: 'EngineCoreProc' object has no attribute '{name}'"
        )
    else:
        try:
            value = getattr(utilities, name)(*call.args)
        except Exception as exc:
            out.failure_message = f"Call to {name} method failed: {exc}"
        else:
            out.result = UtilityResult(None, value)
    return EngineCoreOutputs(engine_index=core.engine_index, utility_output=out)


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
        self._logprobs = MockLogprobs(self._rng, options.vocab_size)
        self._running: dict[str, MockRequest] = {}
        self._waiting: deque[MockRequest] = deque()
        self._live: dict[str, MockRequest] = {}
        self._pending = PendingMessages(engine_index)
        self._report = StepReports(engine_index, options)
        self._utilities = _Utilities(self)
        self._with_logprobs = 0
        self._new_prompt_logprobs = 0
        self._plain_encoder = msgspec.msgpack.Encoder()
        self.raw_outputs = True
        """Write common outputs as pre-encoded msgpack (tests compare it with the struct path)."""
        # vLLM's scheduler runs one more (empty) step after requests finish or are aborted,
        # which reports the new counts (and finished ids): `has_finished_requests()`.
        self._needs_flush = False
        self.sleeping = False
        self.paused = False
        self.pause_mode = "abort"
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
        return self._pending.take(self._clock())

    # ------------------------------------------------------------------ inputs

    def add(self, req: EngineCoreRequest) -> None:
        """Queue an ADD; invalid ones finish at once with ERROR (see take_pending)."""
        self.requests_added += 1
        rid = req.request_id
        if self.shutting_down:
            # vLLM answers ADDs that arrive during shutdown with an ABORT finish.
            self._pending.finish(req.client_index, rid, _ABORT)
            return
        problem = validation_error(req, self.options)
        if problem is None and rid in self._live:
            # A real engine dies on a duplicate live id; the mock fails both requests instead.
            problem = "duplicate request id"
            self._drop(rid)
        if problem is not None:
            self._pending.finish(req.client_index, rid, _ERROR)
            return
        if self.options.mm_cache_misses and req.mm_features:
            missed = [f.mm_hash for f in req.mm_features if f.data is None and f.mm_hash]
            if missed:
                self._pending.finish(req.client_index, rid, _ERROR, missed)
                return
        sp = req.sampling_params
        assert sp is not None and sp.max_tokens is not None and req.prompt_token_ids is not None
        room = self.options.max_model_len - len(req.prompt_token_ids)
        request = MockRequest(req, max(1, min(sp.max_tokens, room)), self.options)
        if self.options.log_stats:
            request.events = [EngineCoreEvent(EngineCoreEventType.QUEUED, self._clock())]
        self._live[rid] = request
        self._waiting.append(request)

    def _drop(self, rid: str) -> MockRequest | None:
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
        self._pending.finish(client_index, request_id, _ERROR)

    def abort(self, request_ids: list[str]) -> None:
        """Client abort: drop the requests without any output, as vLLM does."""
        for rid in request_ids:
            request = self._drop(rid)
            if request is None:
                continue
            self._needs_flush = True
            if self.track_finished:
                self._report.finished(request)

    def abort_all(self, reason: FinishReason = _ABORT) -> None:
        """Engine-initiated finish of every live request (pause/sleep ``abort``, shutdown)."""
        for request in self._live.values():
            self._pending.finish(request.client_index, request.request_id, reason)
        self._live.clear()
        self._running.clear()
        self._waiting.clear()
        self._with_logprobs = 0

    def utility(self, call: UtilityRequest) -> None:
        """Run a utility method; its reply goes to ``call.client_index`` (see take_pending)."""
        self._pending.add(call.client_index, _utility_reply(self._utilities, call))

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
            self._report.scheduled(request)

    def step(self) -> list[Message]:
        """One engine step: new tokens for every running request, one message per client."""
        now = self._clock()
        if not self.paused:
            self._admit(now)
        running = self._running
        flush, self._needs_flush = self._needs_flush, False
        if not running:
            return self._report.messages({}, 0, now, 0, len(self._waiting)) if flush else []
        self.steps += 1
        opts = self.options
        k = opts.tokens_per_step
        script = opts.script
        token_ids: list[int] = (
            [] if script else self._rng.integers(0, opts.vocab_size, len(running) * k).tolist()
        )
        width = 0
        lp_row = 0
        with_logprobs = bool(self._with_logprobs)
        if with_logprobs:
            width = max(r.logprobs for r in running.values() if r.logprobs is not None)
            lp_ids, lp_lps, lp_ranks = self._logprobs.batch(self._with_logprobs * k, width)
        block = opts.block_size
        # Fast path: outputs are written as msgpack bytes (msgspec.Raw) unless some output of
        # this step carries arrays, whose out-of-band frame numbering needs the full encoder.
        raw = self.raw_outputs and not self._with_logprobs and not self._new_prompt_logprobs
        plain = self._plain_encoder.encode
        by_client: dict[int, list[Any]] = {}
        finished: list[MockRequest] = []
        used_blocks = 0
        emitted = 0
        base = 0
        for request in running.values():
            take = request.limit - request.num_output
            if take > k:
                take = k
            toks = (
                _scripted(script, request.num_output, take)
                if script
                else token_ids[base : base + take]
            )
            base += k
            finish: FinishReason | None = None
            stop_reason: int | None = None
            if request.checks_stop:
                toks, finish, stop_reason = check_stop(request, toks, opts.vocab_size)
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
            self._logprobs.place_sampled(lp_ids, lp_ranks, width)
        if raw:
            by_client = {c: _raw_array(outs) for c, outs in by_client.items()}  # type: ignore[misc]
        for request in finished:
            rid = request.request_id
            del running[rid]
            del self._live[rid]
            if request.logprobs is not None:
                self._with_logprobs -= 1
            if self.track_finished:
                self._report.finished(request)
        self.output_tokens += emitted
        self._needs_flush = bool(finished)
        return self._report.messages(by_client, used_blocks, now, len(running), len(self._waiting))

    def _first_output(self, request: MockRequest, out: EngineCoreOutput) -> None:
        prompt_len = len(request.prompt)
        block = self.options.block_size
        out.prefill_stats = PrefillStats(
            num_prompt_tokens=prompt_len,
            num_computed_tokens=prompt_len,
            num_cache_creation_tokens=prompt_len // block * block,
        )
        if request.prompt_logprobs is not None:
            out.new_prompt_logprobs_tensors = self._logprobs.prompt(
                request.prompt, request.prompt_logprobs
            )

    def load_stats(self) -> SchedulerStats:
        """The request counts an engine publishes to a DP coordinator (§8.4)."""
        return self._report.load_stats(self._running.values(), len(self._waiting))

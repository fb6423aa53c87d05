"""Token-in / token-out generation over the engine client.

One call to :meth:`LLM.generate` is one client request: it becomes ``n`` engine requests (vLLM's
parallel sampling, ``vllm/v1/engine/parallel_sampling.py``: child ``i`` gets ``seed + i`` when
seeded and the id ``<i>_<parent engine id>``), all aborted together when the consumer stops early.
The stream yields :class:`SampleOutput` values: each engine output as it comes (``DELTA``; the
outputs a slow consumer finds queued together arrive merged into one) or one merged output per
sample when it finishes (``FINAL_ONLY``). Text, stop strings and logprob
rendering live above this layer; a caller that decides a sample is done (a stop string matched)
calls :meth:`GenerationStream.finish_sample`, which aborts that engine request.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import inspect
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from vllm_frontend.engine.protocol import SamplingParams
from vllm_frontend.llm.admission import AdmissionControl
from vllm_frontend.llm.ids import child_request_id, engine_request_id
from vllm_frontend.llm.step_metrics import observe_step
from vllm_frontend.metrics.frontend import FrontendMetrics
from vllm_frontend.metrics.request_stats import RequestStats

if TYPE_CHECKING:
    from vllm_frontend.metrics.tracing import RequestTracer

__all__ = [
    "FINISH_REASONS",
    "LLM",
    "EngineClientLike",
    "GenerateRequest",
    "GenerationStream",
    "OutputKind",
    "SampleOutput",
    "TokenConsumer",
]

logger = logging.getLogger(__name__)

#: Engine FinishReason codes (engine-protocol.md §5.5) as OpenAI strings.
FINISH_REASONS: tuple[str, ...] = ("stop", "length", "abort", "error", "repetition")


class OutputKind(enum.IntEnum):
    """When the stream yields (vLLM's ``RequestOutputKind`` values)."""

    DELTA = 1
    """Every engine output, as new tokens."""
    FINAL_ONLY = 2
    """One output per sample, with all its tokens, when it finishes."""


class EngineClientLike(Protocol):
    """What the llm layer needs from ``vllm_frontend.engine.client.EngineCoreClient``."""

    def add_request(self, request: Any) -> AsyncIterator[Any]:
        """Submit an ``EngineCoreRequest``; iterate its ``EngineCoreOutput`` values."""
        ...

    def abort_requests(self, request_ids: Sequence[str]) -> Any:
        """Abort engine requests by id (a coroutine or a plain call)."""
        ...


class GenerateRequest(msgspec.Struct, kw_only=True):
    """A token-level request: prompt ids, engine sampling parameters, ``n`` samples."""

    request_id: str
    """The public id (``cmpl-…``); engine ids are derived from it."""
    prompt_token_ids: list[int]
    sampling_params: Any
    """The engine ``SamplingParams`` struct, already validated and lowered."""
    n: int = 1
    output_kind: OutputKind = OutputKind.DELTA
    arrival_time: float | None = None
    priority: int = 0
    data_parallel_rank: int | None = None
    cache_salt: str | None = None
    trace_headers: dict[str, str] | None = None
    mm_features: list[Any] | None = None
    """Multimodal items (``MultiModalFeatureSpec``); every sample's engine request carries
    them, and they are dropped from the engine requests once sent."""
    lora_request: Any = None
    """The adapter the request runs with (an engine ``LoRARequest``; None: the base model)."""
    mm_cache: Any = None
    """The engine's multimodal cache mirror (``apply(features)`` right before sending drops
    the data the engine holds; ``invalidate(hashes)`` on ``mm_cache_miss_hashes``), or None."""
    reasoning_ended: bool | None = None
    """Whether generation starts past the reasoning (the engine's structured-output gate);
    None lets the engine check the prompt with its own reasoning parser."""
    reasoning_parser_kwargs: dict[str, Any] | None = None
    """What the engine's reasoning parser is built with (``{"chat_template_kwargs": ...}``)."""


class SampleOutput(msgspec.Struct, gc=False):
    """New tokens of one sample (DELTA) or all of them (FINAL_ONLY).

    Untracked by the cyclic GC (it holds no cycles): one is made per sample per engine step."""

    index: int
    token_ids: list[int]
    logprobs: list[Any]
    """The engine's ``LogprobsLists`` for ``token_ids``, one per engine output, in order."""
    prompt_logprobs: Any | None = None
    """The engine's prompt ``LogprobsTensors`` (on the output that completed the prefill)."""
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    num_cached_tokens: int | None = None
    kv_transfer_params: dict[str, Any] | None = None
    ec_transfer_params: dict[str, Any] | None = None
    """The encoder-cache connector's parameters (disaggregated encode), on the final output."""

    @property
    def finished(self) -> bool:
        """Whether this is the sample's last output."""
        return self.finish_reason is not None


def _finish_reason(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    code = int(value)
    return FINISH_REASONS[code] if 0 <= code < len(FINISH_REASONS) else "error"


def _num_cached_tokens(output: Any) -> int | None:
    return _prefill_stat(output, "num_cached_tokens")


def _prefill_stat(output: Any, name: str) -> int | None:
    stats = getattr(output, "prefill_stats", None)
    if stats is None:
        return None
    value = stats.get(name) if isinstance(stats, dict) else getattr(stats, name, None)
    return int(value) if value is not None else None


def _merge_into(acc: SampleOutput, out: SampleOutput) -> None:
    """Append ``out``, the same sample's next output, to ``acc``."""
    acc.token_ids.extend(out.token_ids)
    acc.logprobs.extend(out.logprobs)
    if out.prompt_logprobs is not None:
        acc.prompt_logprobs = out.prompt_logprobs
    if out.num_cached_tokens is not None:
        acc.num_cached_tokens = out.num_cached_tokens
    acc.finish_reason = out.finish_reason
    acc.stop_reason = out.stop_reason
    if out.kv_transfer_params is not None:
        acc.kv_transfer_params = out.kv_transfer_params
    if out.ec_transfer_params is not None:
        acc.ec_transfer_params = out.ec_transfer_params


class TokenConsumer(Protocol):
    """What :meth:`GenerationStream.on_tokens` offers plain new tokens to."""

    def tokens(self, token_ids: list[int]) -> bool:
        """Consume a running output's new token ids (True), or leave them to ``take`` (False)."""
        ...


class _Sample:
    """State of one engine request (one sample), and the handler of its engine outputs that
    :meth:`GenerationStream.on_tokens` registers (the sample itself, so that a plain token
    visits one object of this layer, not two)."""

    __slots__ = (
        "acc",
        "admitted",
        "cached",
        "consumer",
        "done",
        "engine_id",
        "index",
        "metrics",
        "prefilling",
        "stats",
        "stream",
    )

    def __init__(self, index: int, engine_id: str, stats: RequestStats) -> None:
        self.index = index
        self.engine_id = engine_id
        self.stats = stats
        self.done = False
        self.acc: SampleOutput | None = None
        self.admitted = False
        """Counted by the admission limits (sent, not yet done)."""
        self.prefilling = False
        """Counted in the admission limits' prefill backlog (no output yet)."""
        self.consumer: TokenConsumer | None = None
        """The on_tokens consumer (then the engine stream offers outputs to ``__call__``)."""
        self.metrics: FrontendMetrics | None = None
        """The metrics ``__call__`` accounts consumed tokens in."""
        self.stream: GenerationStream | None = None
        """The stream, while a quiet consumer (see :meth:`GenerationStream.on_tokens`) is
        offered the outputs ``take()`` would also account (``__call__`` does that then)."""
        self.cached: int | None = None
        """The cached-token count of an output ``__call__`` consumed, for the next update."""

    def __call__(self, output: Any) -> bool:
        """An engine output as the engine client reads it: its plain new tokens go to the
        consumer when ``take()`` would turn the output into an update of token ids alone
        (finished outputs never come here); anything else is left to ``take()``. For a quiet
        consumer, an output with more to account (the first: the prefill's end, its metrics
        and cached-token count; events) is offered too, and accounted here as ``take()``
        would (the count then rides on the sample's next update)."""
        if (
            output.new_logprobs is not None
            or output.new_prompt_logprobs_tensors is not None
            or output.kv_transfer_params is not None
            or output.ec_transfer_params is not None
            or self.done
        ):
            return False
        metrics = self.metrics
        stats = self.stats
        stream = self.stream  # None unless the consumer is quiet
        more = (
            output.events is not None
            or output.prefill_stats is not None
            or self.prefilling  # a first output also leaves the prefill backlog
            or (metrics is not None and not stats.num_generation_tokens)  # and is recorded
        )
        if more and stream is None:
            return False
        token_ids = output.new_token_ids
        consumer = self.consumer
        if not token_ids or consumer is None or not consumer.tokens(token_ids):
            return False
        if stream is not None and more:
            cached = stream._account(self, output)
            if cached is not None:
                self.cached = cached
        elif metrics is not None:
            metrics.observe_tokens(stats, len(token_ids))
        return True


class _PumpedStream:
    """A plain async iterator of engine outputs (another client, a test double) behind the
    ``take``/``on_ready`` interface of the engine client's streams: a task pumps it."""

    __slots__ = ("_done", "_error", "_it", "_items", "_notify", "_task")

    def __init__(self, it: AsyncIterator[Any]) -> None:
        self._it = it
        self._items: list[Any] = []
        self._done = False
        self._error: BaseException | None = None
        self._notify: Callable[[], None] | None = None
        self._task = asyncio.get_running_loop().create_task(self._pump())

    @property
    def engine_index(self) -> Any:
        """The wrapped stream's engine, if it tells."""
        return getattr(self._it, "engine_index", None)

    @property
    def finished(self) -> bool:
        """Nothing more will be queued."""
        return self._done

    async def _pump(self) -> None:
        try:
            next_batch = getattr(self._it, "next_batch", None)
            if next_batch is not None:
                while batch := await next_batch():
                    self._push(batch)
            else:
                async for output in self._it:
                    self._push([output])
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # surfaces in the consumer, not as a lost task error
            self._error = e
        finally:
            self._done = True
            if self._notify is not None:
                self._notify()

    def _push(self, batch: list[Any]) -> None:
        self._items.extend(batch)
        if self._notify is not None:
            self._notify()

    def take(self) -> list[Any]:
        """What is queued now; raises the iterator's failure once."""
        if self._items:
            items, self._items = self._items, []
            return items
        error = self._error
        if error is not None:
            self._error = None
            raise error
        return []

    def on_ready(self, callback: Callable[[], None] | None) -> None:
        """Call ``callback()`` when outputs were queued or the iterator ended."""
        self._notify = callback

    async def aclose(self) -> None:
        """Stop pumping and close the iterator."""
        self._notify = None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        aclose = getattr(self._it, "aclose", None)
        if aclose is not None:
            await aclose()


def _observe_finished(
    metrics: FrontendMetrics,
    request: GenerateRequest,
    samples: list[_Sample],
    sample: _Sample,
    reason: str,
    last: bool,
) -> None:
    """Record a sample's finish (and, for the ``last`` one, its parent request's)."""
    metrics.observe_finished(
        sample.stats,
        reason,
        len(request.prompt_token_ids),
        getattr(request.sampling_params, "max_tokens", None),
    )
    if last:
        metrics.observe_parent_finished(
            request.n,
            sample.stats.num_generation_tokens
            if len(samples) == 1
            else max(s.stats.num_generation_tokens for s in samples),
            samples[0].stats.engine_index,
        )


def _trace_finished(tracer: RequestTracer, request: GenerateRequest, sample: _Sample) -> None:
    """Export a finished sample's span with the values of its engine request (a sample of an
    ``n`` > 1 request has ``n`` 1, as vLLM's child requests)."""
    params = request.sampling_params
    tracer.request_finished(
        request.request_id,
        request.trace_headers,
        sample.stats,
        len(request.prompt_token_ids),
        getattr(params, "top_p", None),
        getattr(params, "max_tokens", None),
        getattr(params, "temperature", None),
        1 if request.n > 1 else getattr(params, "n", None),
    )


class GenerationStream:
    """The outputs of one :meth:`LLM.generate` call; use as ``async with`` + ``async for``, or
    push-style with :meth:`on_ready` + :meth:`take`.

    Leaving the ``async with`` block (normally, by an exception, or by cancellation on client
    disconnect) aborts every sample that has not finished, exactly once.
    """

    __slots__ = (
        "_callback",
        "_closed",
        "_engine_requests",
        "_final_only",
        "_iters",
        "_llm",
        "_registered",
        "_remaining",
        "_request",
        "_samples",
        "_waiter",
        "finished",
        "num_cache_creation_tokens",
        "prompt_token_id_logprobs",
    )

    def __init__(
        self,
        llm: LLM,
        request: GenerateRequest,
        samples: list[_Sample],
        engine_requests: list[Any],
    ) -> None:
        self._llm = llm
        self._request = request
        self._samples = samples
        self._engine_requests = engine_requests
        self._iters: list[Any] = []
        self._registered = False
        self._remaining = len(samples)
        self.finished = not samples
        """Every sample has had its last output."""
        self._closed = False
        self._final_only = request.output_kind == OutputKind.FINAL_ONLY
        self._callback: Callable[[], None] | None = None
        self._waiter: asyncio.Future[None] | None = None
        self.prompt_token_id_logprobs: Any = None
        """The engine's scores of ``prompt_logprob_token_ids`` (a float32 ``Tensor``
        ``[rows, ids]``, on a request's first output), or None."""
        self.num_cache_creation_tokens = 0
        """Prompt tokens the engine computed and wrote to its prefix cache (its first output's
        ``prefill_stats``; vLLM's ``RequestOutput.num_cache_creation_tokens``); 0 before."""

    @property
    def request_id(self) -> str:
        """The public request id."""
        return self._request.request_id

    @property
    def engine_request_ids(self) -> list[str]:
        """The engine ids of the samples, by sample index."""
        return [s.engine_id for s in self._samples]

    async def __aenter__(self) -> GenerationStream:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def start(self) -> None:
        """Send the engine requests (``async with`` does this; idempotent)."""
        if self._iters or self._closed:
            return
        client = self._llm.client
        admission = self._llm.admission
        if admission is not None:  # again, as vLLM does: others may have started meanwhile
            admission.check(len(self._samples))
        mm_cache = self._request.mm_cache
        if mm_cache is not None and self._engine_requests:
            features = getattr(self._engine_requests[0], "mm_features", None)
            if features:  # every sample's request shares them: decided once, as vLLM does
                mm_cache.apply(features)
        try:
            for sample, engine_request in zip(self._samples, self._engine_requests, strict=True):
                it: Any = client.add_request(engine_request)
                if getattr(engine_request, "mm_features", None) is not None:
                    # Sent: the frames hold the tensors until ZMQ is done with them (what
                    # vllm-rs's ``mm_features.take()`` does).
                    engine_request.mm_features = None
                if self._llm.log_requests:
                    logger.info("Added request %s.", engine_request.request_id)
                if admission is not None:
                    admission.started(len(self._request.prompt_token_ids))
                    sample.admitted = sample.prefilling = True
                if not (hasattr(it, "take") and hasattr(it, "on_ready")):
                    it = _PumpedStream(it)
                self._iters.append(it)
                it.on_ready(self._callback or self._ready)
                # The engine the client chose (data parallel) labels this sample's metrics.
                engine_index = getattr(it, "engine_index", None)
                if isinstance(engine_index, int):
                    sample.stats.engine_index = engine_index
        except BaseException:
            self._abort_unfinished_nowait()
            raise
        if not self.finished:
            self._registered = True
            self._llm._live.setdefault(self._request.request_id, []).append(self)

    def on_ready(self, callback: Callable[[], None] | None) -> None:
        """Call ``callback()`` from the event loop whenever :meth:`take` may have something (at
        most about once per engine step); None goes back to ``async for``."""
        self._callback = callback
        for it in self._iters:  # straight from the engine streams: one call level less
            it.on_ready(callback or self._ready)

    def on_tokens(self, consumer: TokenConsumer) -> bool:
        """For a one-sample DELTA stream, after :meth:`on_ready`: offer ``consumer.tokens`` the
        new token ids of each plain running engine output (no logprobs, events or stats: what
        :meth:`take` would turn into an update of token ids alone) as the engine client reads
        it, when nothing is queued before it. ``consumer.tokens`` returns True when it consumed
        them (the stream then accounts them as :meth:`take` would), False to leave them to
        :meth:`take`. A consumer with a true ``quiet`` attribute makes no update of the tokens
        it takes before the end (a non-streamed response): it is also offered the outputs with
        more to account (the first one: the prefill's end, its metrics and cached-token count),
        and the count rides on the sample's next update. Returns whether the engine stream
        supports this.
        """
        if len(self._iters) != 1 or self._final_only:
            return False
        on_output = getattr(self._iters[0], "on_output", None)
        if on_output is None:
            return False
        sample = self._samples[0]
        sample.consumer = consumer
        sample.metrics = self._llm.metrics
        if getattr(consumer, "quiet", False):
            sample.stream = self  # (a cycle until the stream closes, as the consumer's)
        on_output(sample)
        return True

    def _ready(self) -> None:
        callback = self._callback
        if callback is not None:
            callback()
            return
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def take(self) -> list[SampleOutput]:
        """The updates available now, without waiting: per sample with new engine outputs, one
        update (everything queued since the last call, merged: a consumer that fell behind turns
        several engine steps into one update). With FINAL_ONLY, only finished samples.

        Raises an engine stream's failure (e.g. EngineDeadError) once.
        """
        updates: list[SampleOutput] = []
        for sample, it in zip(self._samples, self._iters, strict=False):
            outputs = it.take()
            if sample.done:
                continue  # ended here (stop string, abort): what the engine still sent is moot
            if not outputs:
                if it.finished:
                    # The engine client ended a stream without a finish: treat as an abort.
                    updates.append(self._close_sample(sample, "abort"))
                continue
            out = self._to_sample_output(sample, outputs[0])
            if len(outputs) > 1:
                out.token_ids = list(out.token_ids)  # merged into: not the engine output's list
                for output in outputs[1:]:
                    self._merge_output(sample, out, output)
            if out.finish_reason is not None:
                self._mark_done(sample, out.finish_reason)
            if self._final_only:
                out = self._accumulate(sample, out)
                if out.finish_reason is None:
                    continue
            updates.append(out)
        return updates

    def __aiter__(self) -> AsyncIterator[SampleOutput]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[SampleOutput]:
        self.start()
        while True:
            updates = self.take()
            for update in updates:
                yield update
            if self._remaining == 0:
                return
            if not updates:
                self._waiter = asyncio.get_running_loop().create_future()
                try:
                    await self._waiter
                finally:
                    self._waiter = None

    def _account(self, sample: _Sample, output: Any) -> int | None:
        """What an engine output of ``sample`` changes besides the sample's update (prefill
        end, the prompt rows' scores, metrics, the multimodal cache mirror); returns its
        cached-token count (first output only)."""
        if sample.prefilling:
            self._end_prefill(sample)
        # Only a request's first output has prefill stats: skip the call for the others. The
        # prompt rows' scores come on that output too (the final prefill chunk's).
        cached = None
        if getattr(output, "prefill_stats", None) is not None:
            cached = _num_cached_tokens(output)
            self.num_cache_creation_tokens = _prefill_stat(output, "num_cache_creation_tokens") or 0
            scores = getattr(output, "prompt_token_id_logprobs", None)
            if scores is not None:
                self.prompt_token_id_logprobs = scores
        metrics = self._llm.metrics
        if metrics is not None:
            stats = sample.stats
            token_ids = output.new_token_ids
            if stats.num_generation_tokens == 0 and token_ids:
                metrics.observe_prefill(stats, len(self._request.prompt_token_ids))
            metrics.observe_output(
                stats, len(token_ids), getattr(output, "events", None), num_cached_tokens=cached
            )
        if output.finish_reason is not None and self._request.mm_cache is not None:
            missed = getattr(output, "mm_cache_miss_hashes", None)
            if missed:  # the engine lacked items the mirror thought it had
                self._request.mm_cache.invalidate(missed)
        return cached

    def _merge_output(self, sample: _Sample, acc: SampleOutput, output: Any) -> None:
        """``_merge_into(acc, self._to_sample_output(sample, output))`` without the update in
        between: a consumer that fell behind (every non-streaming request) merges most of a
        request's engine outputs."""
        cached = self._account(sample, output)
        acc.token_ids.extend(output.new_token_ids)
        lp = output.new_logprobs
        if lp is not None:
            acc.logprobs.append(lp)
        prompt_lp = getattr(output, "new_prompt_logprobs_tensors", None)
        if prompt_lp is not None:
            acc.prompt_logprobs = prompt_lp
        if cached is not None:
            acc.num_cached_tokens = cached
        finish = output.finish_reason
        acc.finish_reason = None if finish is None else _finish_reason(finish)
        acc.stop_reason = output.stop_reason
        kv = getattr(output, "kv_transfer_params", None)
        if kv is not None:
            acc.kv_transfer_params = kv
        ec = getattr(output, "ec_transfer_params", None)
        if ec is not None:
            acc.ec_transfer_params = ec

    def _to_sample_output(self, sample: _Sample, output: Any) -> SampleOutput:
        cached = self._account(sample, output)
        if cached is None and sample.cached is not None:
            cached, sample.cached = sample.cached, None  # from an output __call__ consumed
        token_ids = output.new_token_ids
        lp = output.new_logprobs
        finish = output.finish_reason
        # Positional, cheap checks first: this runs for every engine output. The engine output's
        # own list of ids (decoded for this output alone) is taken over, not copied.
        return SampleOutput(
            sample.index,
            token_ids if type(token_ids) is list else list(token_ids),
            [lp] if lp is not None else [],
            getattr(output, "new_prompt_logprobs_tensors", None),
            None if finish is None else _finish_reason(finish),
            output.stop_reason,
            cached,
            getattr(output, "kv_transfer_params", None),
            getattr(output, "ec_transfer_params", None),
        )

    def _accumulate(self, sample: _Sample, out: SampleOutput) -> SampleOutput:
        acc = sample.acc
        if acc is None:
            sample.acc = out
            return out
        _merge_into(acc, out)
        return acc

    def _close_sample(self, sample: _Sample, reason: str) -> SampleOutput:
        self._mark_done(sample, reason)
        if sample.acc is not None:
            sample.acc.finish_reason = reason
            return sample.acc
        cached, sample.cached = sample.cached, None  # from an output __call__ consumed
        return SampleOutput(
            index=sample.index,
            token_ids=[],
            logprobs=[],
            finish_reason=reason,
            num_cached_tokens=cached,
        )

    def _end_prefill(self, sample: _Sample) -> None:
        sample.prefilling = False
        admission = self._llm.admission
        if admission is not None:
            admission.prefilled(len(self._request.prompt_token_ids))

    def _mark_done(self, sample: _Sample, reason: str, record: bool = True) -> None:
        if sample.done:
            return
        sample.done = True
        if sample.admitted:
            sample.admitted = False
            if sample.prefilling:
                self._end_prefill(sample)
            admission = self._llm.admission
            if admission is not None:
                admission.finished()
        self._remaining -= 1
        self.finished = self._remaining == 0
        if self.finished and self._registered:
            self._unregister()
        metrics = self._llm.metrics
        if record and self._llm.tracer is not None:
            _trace_finished(self._llm.tracer, self._request, sample)
        if metrics is not None and record:
            _observe_finished(metrics, self._request, self._samples, sample, reason, self.finished)
        elif metrics is not None and metrics.lora_info is not None and sample.stats.lora_name:
            metrics.lora_info.request_finished(sample.stats)  # vLLM's abort forgets it too

    def _unregister(self) -> None:
        self._registered = False
        live = self._llm._live
        streams = live.get(self._request.request_id)
        if streams is not None:
            streams.remove(self)
            if not streams:
                del live[self._request.request_id]

    def unfinished_engine_ids(self) -> list[str]:
        """The engine ids of the samples that have not finished."""
        return [s.engine_id for s in self._samples if not s.done]

    @property
    def sample_count(self) -> int:
        """How many samples (engine requests) the request has (its ``n``)."""
        return len(self._samples)

    async def finish_sample(self, index: int, reason: str = "stop") -> None:
        """End sample ``index`` early (e.g. a stop string matched): abort it on the engine."""
        sample = self._samples[index]
        if sample.done:
            return
        self._mark_done(sample, reason)
        await self._llm._abort([sample.engine_id])

    def finish_sample_nowait(self, index: int, reason: str = "stop") -> None:
        """:meth:`finish_sample` without waiting for the abort to be sent (from a callback)."""
        sample = self._samples[index]
        if sample.done:
            return
        self._mark_done(sample, reason)
        self._llm._abort_nowait([sample.engine_id])

    def _abort_unfinished_nowait(self) -> list[str]:
        ids = [s.engine_id for s in self._samples if not s.done]
        # Aborted here (client gone, an error, shutdown): like vLLM's OutputProcessor.
        # abort_requests, that records no finished-request metrics (aborts the engine reports
        # are counted as they arrive).
        for s in self._samples:
            if not s.done:
                self._mark_done(s, "abort", record=False)
        return ids

    def close_nowait(self) -> bool:
        """:meth:`aclose` when it has nothing to wait for: every sample has finished and every
        engine stream has ended with its final output (no abort to send; closing such a stream
        aborts nothing). Returns whether it closed; False: await :meth:`aclose`."""
        if self._closed:
            return True
        for sample in self._samples:
            if not sample.done:
                return False
        for it in self._iters:
            if getattr(it, "finish_reason", None) is None:  # failed, or not an engine stream
                return False
        self._closed = True
        self._callback = None
        for sample in self._samples:
            sample.consumer = sample.stream = None
        for it in self._iters:
            it.on_ready(None)
            on_output = getattr(it, "on_output", None)
            if on_output is not None:
                on_output(None)
        return True

    async def aclose(self) -> None:
        """Abort whatever has not finished and close the engine streams (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._callback = None
        for sample in self._samples:  # the consumer holds the stream: no cycle left behind
            sample.consumer = sample.stream = None
        ids = self._abort_unfinished_nowait()
        for it in self._iters:
            it.on_ready(None)
            on_output = getattr(it, "on_output", None)
            if on_output is not None:
                on_output(None)
            aclose = getattr(it, "aclose", None)
            if aclose is not None:
                try:
                    await aclose()
                except Exception:  # closing a broken stream must not mask the real error
                    logger.debug("error closing engine stream", exc_info=True)
        if ids:
            # Shielded: a disconnect cancels the handler, and the abort must still reach the
            # engine or the request would keep running there.
            await asyncio.shield(self._llm._abort(ids))


class LLM:
    """The token-level generation facade over an ``EngineCoreClient``."""

    def __init__(
        self,
        client: EngineClientLike,
        request_factory: Callable[..., Any],
        metrics: FrontendMetrics | None = None,
        admission: AdmissionControl | None = None,
        *,
        log_requests: bool = False,
        tracer: RequestTracer | None = None,
    ) -> None:
        """``request_factory(**fields)`` builds an ``EngineCoreRequest`` (engine/protocol.py);
        ``admission`` holds vLLM's queue limits (unused when it sets none); ``log_requests``
        logs each engine request sent and aborted (``--enable-log-requests``, as AsyncLLM);
        ``tracer`` exports each finished engine request's span (``--otlp-traces-endpoint``;
        its figures are the request stats ``metrics`` keeps)."""
        self.client = client
        self.log_requests = log_requests
        self.tracer = tracer
        self.metrics = metrics
        self.admission = admission if admission is not None and admission.enabled else None
        observe_steps = getattr(client, "observe_steps", None)
        if metrics is not None and observe_steps is not None:
            observe_steps(functools.partial(observe_step, metrics))  # the per-engine-step series
        self._request_factory = request_factory
        self._aborting: set[asyncio.Future[Any]] = set()
        self._live: dict[str, list[GenerationStream]] = {}
        """Public request id -> its started, unfinished streams (for :meth:`abort`)."""

    async def _abort(self, engine_ids: list[str]) -> None:
        if self.log_requests:
            logger.info("Aborted request(s) %s.", ",".join(engine_ids))
        try:
            result = self.client.abort_requests(engine_ids)
            if inspect.isawaitable(result):
                await result
        except Exception:  # a dead engine cannot be aborted; its requests are gone anyway
            logger.debug("abort of %s failed", engine_ids, exc_info=True)

    @property
    def weight_version(self) -> str | None:
        """The weight label the engines' latest outputs named (None: none, or unknown)."""
        return getattr(self.client, "weight_version", None)

    @property
    def live_request_ids(self) -> list[str]:
        """The public ids of the requests started and not finished."""
        return list(self._live)

    async def abort(self, request_ids: Sequence[str]) -> int:
        """Abort the requests with these public ids (vLLM's ``EngineClient.abort`` of external
        ids: every engine request of each, all samples of ``n`` > 1), through the engine
        client, which ends their streams with an ``abort`` finish. Unknown or finished ids are
        ignored; returns how many engine requests were aborted."""
        engine_ids: list[str] = []
        for request_id in request_ids:
            for stream in self._live.get(request_id, ()):
                engine_ids.extend(stream.unfinished_engine_ids())
        if engine_ids:
            await self._abort(engine_ids)
        return len(engine_ids)

    async def abort_all(self) -> int:
        """Abort every started, unfinished request (vLLM's development ``/abort_requests``
        without ids); returns how many request states vLLM's output processor counts for them:
        each unfinished engine request, and the parent of an ``n`` > 1 request."""
        engine_ids: list[str] = []
        parents = 0
        for streams in list(self._live.values()):
            for stream in streams:
                ids = stream.unfinished_engine_ids()
                engine_ids.extend(ids)
                parents += bool(ids) and stream.sample_count > 1
        if engine_ids:
            await self._abort(engine_ids)
        return len(engine_ids) + parents

    def _abort_nowait(self, engine_ids: list[str]) -> None:
        try:
            result = self.client.abort_requests(engine_ids)
        except Exception:  # a dead engine cannot be aborted; its requests are gone anyway
            logger.debug("abort of %s failed", engine_ids, exc_info=True)
            return
        if inspect.isawaitable(result):
            task = asyncio.ensure_future(result)
            self._aborting.add(task)
            task.add_done_callback(self._aborting.discard)

    async def notify_kv_transfer_rejected(
        self, request_id: str, kv_transfer_params: dict[str, Any], data_parallel_rank: int | None
    ) -> None:
        """Send a pre-aborted request carrying ``kv_transfer_params`` (vLLM's
        ``notify_kv_transfer_request_rejected``): the engine's KV connector then frees what was
        held for a request that never reached it."""
        params = SamplingParams(
            max_tokens=1,
            extra_args={"kv_transfer_params": dict(kv_transfer_params)},
            watermarking=False,
        )
        request = self._request_factory(
            request_id=request_id,
            prompt_token_ids=[0],
            mm_features=None,
            sampling_params=params,
            pooling_params=None,
            arrival_time=time.time(),
            lora_request=None,
            cache_salt=None,
            data_parallel_rank=data_parallel_rank,
            abort_immediately=True,
        )
        stream = self.client.add_request(request)
        # The engine aborts it itself and sends nothing: stop waiting for it at once.
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()

    def check_admission(self, n: int = 1) -> None:
        """Raise ``AdmissionRejected`` when the queue limits refuse a request of ``n`` samples
        now (vLLM's ``check_admission``; :meth:`GenerationStream.start` checks again)."""
        if self.admission is not None:
            self.admission.check(n)

    def generate(self, request: GenerateRequest) -> GenerationStream:
        """Start a request; returns its stream (use ``async with`` to guarantee cleanup)."""
        now = time.time()
        arrival = request.arrival_time if request.arrival_time is not None else now
        # The monotonic clock's reading at arrival, for the latency series (one for all samples).
        arrival_monotonic = time.monotonic() - max(0.0, now - arrival)
        parent_id = engine_request_id(request.request_id)
        params = request.sampling_params
        n = request.n
        engine_index = request.data_parallel_rank or 0
        lora_request = request.lora_request
        factory = self._request_factory
        samples: list[_Sample] = []
        engine_requests: list[Any] = []
        for i in range(n):
            if n == 1:
                engine_id = parent_id
                child_params = params
            else:
                engine_id = child_request_id(parent_id, i)
                child_params = msgspec.structs.replace(params, n=1)
                seed = getattr(params, "seed", None)
                if seed is not None:
                    child_params = msgspec.structs.replace(child_params, seed=seed + i)
            stats = RequestStats(arrival, arrival_monotonic, engine_index)
            if lora_request is not None:
                stats.lora_name = lora_request.lora_name
            samples.append(_Sample(i, engine_id, stats))
            engine_requests.append(
                factory(
                    request_id=engine_id,
                    prompt_token_ids=request.prompt_token_ids,
                    mm_features=request.mm_features,
                    sampling_params=child_params,
                    pooling_params=None,
                    arrival_time=arrival,
                    lora_request=lora_request,
                    cache_salt=request.cache_salt,
                    data_parallel_rank=request.data_parallel_rank,
                    priority=request.priority,
                    trace_headers=request.trace_headers,
                    external_req_id=request.request_id,
                    reasoning_ended=request.reasoning_ended,
                    reasoning_parser_kwargs=request.reasoning_parser_kwargs,
                )
            )
        request.mm_features = None  # the engine requests hold them until sent
        return GenerationStream(self, request, samples, engine_requests)

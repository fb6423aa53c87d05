"""One prompt's samples as text updates: the engine's token outputs through the incremental
detokenizer, stop strings and logprobs (as vLLM's output processor), pull- or push-style."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from vllm_frontend.llm import LLM, GenerateRequest, OutputKind, TokenConsumer
from vllm_frontend.text.logprobs import TokenStrings
from vllm_frontend.text.output import FINISH_REASONS, SequenceOutput, SequenceProcessor
from vllm_frontend.text.prompts import PreparedPrompt
from vllm_frontend.text.sampling import ModelSamplingInfo
from vllm_frontend.text.tokenizer import Tokenizer

__all__ = ["Finals", "SequenceStream", "TextContext", "Update", "UpdateSource", "collect_finals"]


class TextContext(Protocol):
    """What the text-level streams need of the text layer (``text.llm.TextLlm`` is one)."""

    llm: LLM
    tokenizer: Tokenizer
    sampling: ModelSamplingInfo
    stream_interval: int

    def strings(self) -> TokenStrings:
        """The shared per-token string cache (for logprobs)."""
        ...


Update = tuple[int, SequenceOutput, int | None]
"""``(sample index, text update, num_cached_tokens)``."""


class UpdateSource(Protocol):
    """One prompt's choices as text updates, as the handlers consume them: a
    :class:`SequenceStream`, or a beam search's (``text.beam_search.BeamSearchStream``)."""

    @property
    def finished(self) -> bool:
        """Every choice has ended and its last update was taken."""
        ...

    @property
    def kv_transfer_params(self) -> dict[str, Any] | None:
        """The KV-transfer parameters of the engine output that finished the last sample to
        finish (vLLM's ``RequestOutput.kv_transfer_params``); None until then, or without."""
        ...

    @property
    def ec_transfer_params(self) -> dict[str, Any] | None:
        """The encoder-cache transfer parameters, as :attr:`kv_transfer_params` (vLLM's
        ``RequestOutput.ec_transfer_params``)."""
        ...

    @property
    def num_cache_creation_tokens(self) -> int | None:
        """Prompt tokens the engine wrote to its prefix cache (vLLM's
        ``RequestOutput.num_cache_creation_tokens``); 0 until the prefill is done, None from
        a source that never has counts (a beam search)."""
        ...

    def on_ready(self, callback: Callable[[], None] | None) -> None:
        """Start, and call ``callback()`` whenever :meth:`take` may have something."""

    def take(self) -> list[Update]:
        """The updates available now, without waiting."""
        ...

    def on_tokens(self, consumer: TokenConsumer) -> SequenceProcessor | None:
        """Offer ``consumer.tokens`` plain new token ids as they arrive (None: not supported)."""
        ...

    def __aiter__(self) -> AsyncIterator[Update]:
        """Iterate the updates as they come."""
        ...

    async def aclose(self) -> None:
        """Stop, aborting whatever still runs on the engine."""


class SequenceStream:
    """One prompt's ``n`` samples as text updates: ``(index, output, num_cached_tokens)``.

    Detokenization, stop strings and logprobs run incrementally on every engine output (as
    vLLM's output processor does) whatever the request's output kind; with FINAL_ONLY params
    each sample yields once, when it finishes. A stop string ends its sample and aborts the
    engine request. Consume with ``async for`` (then :meth:`aclose`, e.g. through
    ``contextlib.aclosing``), or push-style: :meth:`on_ready` and :meth:`take` from a callback
    (no task wakes up per engine step). Closing early (disconnect) aborts what still runs.
    """

    __slots__ = (
        "_ec_transfer_params",
        "_gen",
        "_kv_transfer_params",
        "_pending_cached",
        "_procs",
    )

    def __init__(
        self,
        text: TextContext,
        request_id: str,
        prompt: PreparedPrompt,
        params: Any,
        n: int,
        priority: int = 0,
        data_parallel_rank: int | None = None,
        cache_salt: str | None = None,
        lora_request: Any = None,
        reasoning_ended: bool | None = None,
        reasoning_parser_kwargs: dict[str, Any] | None = None,
        trace_headers: dict[str, str] | None = None,
    ) -> None:
        wants_logprobs = params.logprobs is not None or params.prompt_logprobs is not None
        strings = text.strings() if wants_logprobs else None
        self._procs = [
            SequenceProcessor(
                text.tokenizer, prompt.token_ids, params, strings, request_id, text.stream_interval
            )
            for _ in range(n)
        ]
        self._kv_transfer_params: dict[str, Any] | None = None
        self._ec_transfer_params: dict[str, Any] | None = None
        self._pending_cached: dict[int, int] = {}
        """A sample's cached-token count from an engine output that made no update (a
        FINAL_ONLY request's first output, held-back text), for its next update."""
        self._gen = text.llm.generate(
            GenerateRequest(
                request_id=request_id,
                prompt_token_ids=prompt.token_ids,
                sampling_params=params,
                n=n,
                output_kind=OutputKind.DELTA,
                arrival_time=time.time(),
                priority=priority,
                data_parallel_rank=data_parallel_rank,
                cache_salt=cache_salt,
                mm_features=prompt.mm_features,
                mm_cache=prompt.mm_cache,
                lora_request=lora_request,
                reasoning_ended=reasoning_ended,
                reasoning_parser_kwargs=reasoning_parser_kwargs,
                trace_headers=trace_headers,
            )
        )
        prompt.mm_features = None  # the engine requests hold them now

    @property
    def finished(self) -> bool:
        """Every sample has ended (what :meth:`take` returned last included the last update)."""
        return self._gen.finished

    @property
    def kv_transfer_params(self) -> dict[str, Any] | None:
        """The KV-transfer parameters of the engine output that finished the last sample to
        finish (vLLM's ``RequestOutput.kv_transfer_params``); None until then, or without."""
        return self._kv_transfer_params

    @property
    def ec_transfer_params(self) -> dict[str, Any] | None:
        """The encoder-cache transfer parameters, as :attr:`kv_transfer_params` (vLLM's
        ``RequestOutput.ec_transfer_params``)."""
        return self._ec_transfer_params

    @property
    def prompt_token_id_logprobs(self) -> Any:
        """The engine's scores of the ``prompt_logprob_token_ids`` rows (a float32 ``Tensor``
        ``[rows, ids]``) once the prefill is done; None without."""
        return self._gen.prompt_token_id_logprobs

    @property
    def num_cache_creation_tokens(self) -> int:
        """Prompt tokens the engine wrote to its prefix cache for this prompt (vLLM's
        ``RequestOutput.num_cache_creation_tokens``), once the prefill is done; 0 before."""
        return self._gen.num_cache_creation_tokens

    def start(self) -> None:
        """Send the engine requests (idempotent; iterating or :meth:`on_ready` also does)."""
        self._gen.start()

    def on_ready(self, callback: Callable[[], None] | None) -> None:
        """Start, and call ``callback()`` from the event loop whenever :meth:`take` may have
        something; call :meth:`take` once right away too."""
        self._gen.on_ready(callback)
        self._gen.start()

    def take(self) -> list[Update]:
        """The text updates available now, without waiting.

        An engine ``error`` finish is an update like any other (the handlers raise
        GenerationFailed where vLLM does); raises EngineDeadError & co. from the engine client.
        """
        updates: list[Update] = []
        procs = self._procs
        for out in self._gen.take():
            proc = procs[out.index]
            if out.finish_reason is None and not out.logprobs and out.prompt_logprobs is None:
                seq = proc.process(out.token_ids)  # a running sample's new tokens, nothing else
            else:
                # One logprobs block per engine output merged into this update.
                blocks = out.logprobs
                lp = (
                    None
                    if not blocks
                    else _triple(blocks[0])
                    if len(blocks) == 1
                    else _concat(blocks)
                )
                plp = out.prompt_logprobs
                code = None
                if out.finish_reason:
                    code = FINISH_REASONS.index(out.finish_reason)
                    self._kv_transfer_params = out.kv_transfer_params
                    self._ec_transfer_params = out.ec_transfer_params
                seq = proc.process(
                    out.token_ids,
                    code,
                    out.stop_reason,
                    new_logprobs=lp,
                    new_prompt_logprobs=None if plp is None else _triple(plp),
                )
            if seq is None:
                if out.num_cached_tokens is not None:
                    self._pending_cached[out.index] = out.num_cached_tokens
                continue
            if seq.abort_engine:
                self._gen.finish_sample_nowait(out.index, "stop")
            cached = out.num_cached_tokens
            if cached is None and self._pending_cached:
                cached = self._pending_cached.pop(out.index, None)
            updates.append((out.index, seq, cached))
        return updates

    def on_tokens(self, consumer: TokenConsumer) -> SequenceProcessor | None:
        """After :meth:`on_ready`, for one sample: offer ``consumer.tokens`` a running sample's
        plain new token ids as soon as the engine client reads them (see
        ``GenerationStream.on_tokens``). Returns the sample's processor, None where the stream
        cannot do this: the consumer returns True when it handled the ids, through the
        processor's ``take_text`` (False when that declines), and makes of them what
        :meth:`take` would."""
        if len(self._procs) != 1 or not self._gen.on_tokens(consumer):
            return None
        return self._procs[0]

    def __aiter__(self) -> AsyncIterator[Update]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Update]:
        gen = self._gen
        gen.start()
        waiter: asyncio.Future[None] | None = None

        def wake() -> None:
            if waiter is not None and not waiter.done():
                waiter.set_result(None)

        gen.on_ready(wake)
        while True:
            updates = self.take()
            for update in updates:
                yield update
            if gen.finished:
                return
            if not updates:
                waiter = asyncio.get_running_loop().create_future()
                await waiter
                waiter = None

    def close_nowait(self) -> bool:
        """:meth:`aclose` when nothing is left to abort or wait for (every sample ended with
        its final engine output); returns whether it closed (False: await :meth:`aclose`)."""
        return self._gen.close_nowait()

    async def aclose(self) -> None:
        """Abort whatever still runs on the engine (idempotent)."""
        await self._gen.aclose()


def _triple(lp: Any) -> tuple[Any, Any, Any] | None:
    # As lists: the wire triples' own tolist() reads the small per-output arrays without numpy.
    if lp is None:
        return None
    ranks = getattr(lp, "sampled_token_ranks", None)
    if ranks is None:
        ranks = lp.selected_token_ranks
    return (_rows(lp.logprob_token_ids), _rows(lp.logprobs), _rows(ranks))


def _concat(blocks: list[Any]) -> tuple[Any, Any, Any]:
    triples = [t for t in map(_triple, blocks) if t is not None]
    return (
        [row for t in triples for row in t[0]],
        [row for t in triples for row in t[1]],
        [row for t in triples for row in t[2]],
    )


def _rows(value: Any) -> Any:
    return value.tolist() if hasattr(value, "tolist") else value


class Finals:
    """What a non-streaming response needs of a source: each choice's last update by index,
    the prompt's cached-token count (the latest reported) and the KV-transfer parameters."""

    __slots__ = (
        "cached",
        "done",
        "ec_transfer_params",
        "kv_transfer_params",
        "outputs",
        "proc",
        "source",
        "tokens",
    )

    def __init__(self, source: UpdateSource, done: asyncio.Future[None]) -> None:
        self.source = source
        self.done = done
        self.proc: SequenceProcessor | None = None
        """The single sample's processor once :attr:`tokens` is registered (``on_tokens``)."""
        self.tokens: Callable[[list[int]], bool] = _decline
        """A running sample's plain new tokens as the engine client reads them: taken into its
        processor (``proc.take_final``) where that only accumulates them (nothing goes out
        before the end, so the handler is not woken for them), else False and they come
        through :meth:`__call__`. Declines until ``proc`` is known and once ``done`` is: the
        processor's own method in between (no call of ours per running output)."""
        self.outputs: dict[int, SequenceOutput] = {}
        """The finished choices by index (a beam search may return fewer than ``n``)."""
        self.cached: int | None = None
        """``num_cached_tokens`` as last reported (None: never)."""
        self.kv_transfer_params: dict[str, Any] | None = None
        """The source's KV-transfer parameters once it has finished."""
        self.ec_transfer_params: dict[str, Any] | None = None
        """The source's encoder-cache transfer parameters once it has finished."""

    def __call__(self) -> None:
        # The source's notification: its updates taken here, in the engine client's read
        # callback, so that the waiting handler resumes once, at the end, not per engine step.
        done = self.done
        if done.done():
            return
        source = self.source
        try:
            for idx, seq, num_cached in source.take():
                if num_cached is not None:
                    self.cached = num_cached
                if seq.finished:
                    self.outputs[idx] = seq
            if source.finished:
                self.tokens = _decline
                done.set_result(None)
        except Exception as e:
            self.tokens = _decline
            done.set_exception(e)

    quiet = True
    """The tokens it takes make no update before the end: the engine client's read loop may
    offer it a sample's first output too (``GenerationStream.on_tokens``)."""


def _decline(token_ids: list[int]) -> bool:
    # Finals.tokens while there is no processor to take them, or once the wait is over.
    return False


async def collect_finals(source: UpdateSource) -> Finals:
    """Run ``source`` to its end push-style and return its :class:`Finals` (what ``async for``
    over it then keeping the finished updates gives, without a task wake-up per engine step).
    The source is closed on the way out, aborting what still runs (a disconnect cancels the
    wait); its failure (e.g. EngineDeadError) is raised."""
    finals = Finals(source, asyncio.get_running_loop().create_future())
    try:
        source.on_ready(finals)
        finals.proc = proc = source.on_tokens(finals)
        if proc is not None:
            finals.tokens = proc.take_final
        finals()
        await finals.done
    finally:
        finals.tokens = _decline  # (e.g. cancelled: what still comes goes to the queue)
        close_nowait = getattr(source, "close_nowait", None)
        if close_nowait is None or not close_nowait():  # (the common end: nothing to await)
            await source.aclose()
    finals.kv_transfer_params = source.kv_transfer_params
    finals.ec_transfer_params = source.ec_transfer_params
    return finals

"""Beam search (``use_beam_search``) run in the frontend, as vLLM 0.32's Python frontend runs it
(``vllm/entrypoints/generate/beam_search/online.py``, ``BeamSearchOnlineMixin.beam_search``).

Each step sends every live beam to the engine as a one-token request asking for ``2 * width``
logprobs. Every candidate token of every beam extends that beam's cumulative logprob; the EOS
token (unless ``ignore_eos``) completes the beam instead, and the best ``width`` other candidates
become the next beams. After ``max_tokens`` steps the completed and live beams are ranked by
``cumulative logprob / length ** length_penalty`` (the length counts the prompt tokens, less a
trailing EOS: ``vllm/entrypoints/generate/beam_search/utils.py``) and the best ``width`` are the
choices, all at once. vLLM's quirks are kept on purpose: stop strings, stop token ids and most
sampling knobs are ignored; an EOS-completed beam reports ``stop_reason`` = the EOS id; there may
be fewer choices than ``n`` (``max_tokens`` 0 leaves the prompt alone); logprob maps carry no
decoded text (the engine requests do not detokenize).

Every engine request a step started is aborted when the search stops early (client disconnect,
a dead engine, an error): each step's streams live in one ``AsyncExitStack`` and are awaited
together, so the first failure ends the step at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from vllm_frontend.engine.protocol import RequestOutputKind, SamplingParams
from vllm_frontend.engine.validate import (
    InvalidRequestError,
    RequestLimits,
    validate_sampling_params,
)
from vllm_frontend.lazy import LazyModule
from vllm_frontend.llm import (
    LLM,
    GenerateRequest,
    GenerationStream,
    OutputKind,
    SampleOutput,
    TokenConsumer,
)
from vllm_frontend.text.logprobs import LogprobsAccumulator, PositionLogprobs
from vllm_frontend.text.output import SequenceOutput, SequenceProcessor
from vllm_frontend.text.prompts import PreparedPrompt
from vllm_frontend.text.sampling import ModelSamplingInfo, SamplingRequest, lower_sampling_params
from vllm_frontend.text.sequence_stream import TextContext, Update
from vllm_frontend.text.tokenizer import Tokenizer

if TYPE_CHECKING:
    import numpy as np
else:
    np = LazyModule("numpy", globals(), "np")  # imported by the first use (vllm_frontend.lazy)

__all__ = [
    "Beam",
    "BeamSearch",
    "BeamSearchParams",
    "BeamSearchStream",
    "beam_score",
    "beam_search_params",
    "beam_token_text",
    "next_beams",
    "rank_beams",
]


class BeamSearchParams(msgspec.Struct, frozen=True, gc=False):
    """vLLM's ``BeamSearchParams`` (``vllm/sampling_params.py``), the fields the search uses."""

    beam_width: int
    max_tokens: int
    ignore_eos: bool = False
    temperature: float = 0.0
    length_penalty: float = 1.0
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True


def beam_search_params(
    model: ModelSamplingInfo, req: SamplingRequest, length_penalty: float, max_tokens: int
) -> BeamSearchParams:
    """The request's ``to_beam_search_params``: ``n`` is the width (checked as vLLM's
    ``_verify_num_sequences`` does), the temperature falls back to the generation config's."""
    width = req.n if req.n is not None else 1
    if width < 1:
        raise InvalidRequestError(f"beam_width must be at least 1, got {width}.")
    max_n = (model.limits or RequestLimits()).max_n  # VLLM_MAX_N_SEQUENCES
    if width > max_n:
        raise InvalidRequestError(
            f"beam_width must be at most {max_n}, got {width}. To increase this limit, set the "
            "VLLM_MAX_N_SEQUENCES environment variable."
        )
    temperature = req.temperature
    if temperature is None:
        temperature = model.sampling_defaults.get("temperature", 1.0)
    return BeamSearchParams(
        beam_width=width,
        max_tokens=max_tokens,
        ignore_eos=bool(req.ignore_eos),
        temperature=temperature,
        length_penalty=length_penalty,
        include_stop_str_in_output=bool(req.include_stop_str_in_output),
        skip_special_tokens=bool(req.skip_special_tokens),
    )


class Beam(msgspec.Struct):
    """One hypothesis: prompt and generated tokens, one logprob map per step, their sum."""

    tokens: list[int]
    logprobs: list[PositionLogprobs] = msgspec.field(default_factory=list)
    cum_logprob: float = 0.0
    finish_reason: str | None = None
    stop_reason: int | str | None = None


def beam_score(beam: Beam, eos_token_id: int | None, length_penalty: float) -> float:
    """vLLM's ``get_beam_search_score``: the cumulative logprob over the length (prompt included,
    a trailing EOS not, at least 1) to the power ``length_penalty``."""
    length = len(beam.tokens)
    if beam.tokens[-1] == eos_token_id:
        length -= 1
    return beam.cum_logprob / (max(length, 1) ** length_penalty)


def next_beams(
    beams: Sequence[Beam],
    steps: Sequence[PositionLogprobs | None],
    width: int,
    eos_token_id: int | None,
    *,
    ignore_eos: bool,
    include_eos: bool,
    completed: list[Beam],
) -> list[Beam]:
    """One step: ``steps[i]`` is the logprob map the engine returned for ``beams[i]``.

    EOS candidates (unless ``ignore_eos``) are appended to ``completed`` (with the EOS token when
    ``include_eos``, ``stop_reason`` the EOS id); the best ``width`` of the other candidates are
    returned, best first. Ties fall as in vLLM: the same numpy partition and sort over the
    candidates in the same order (beam by beam, each map in its order)."""
    candidates: list[tuple[float, int, Beam, PositionLogprobs]] = []
    for beam, step in zip(beams, steps, strict=True):
        if step is None:
            continue
        for token_id, lp in step.items():
            score = beam.cum_logprob + lp.logprob
            if token_id == eos_token_id and not ignore_eos:
                completed.append(
                    Beam(
                        tokens=[*beam.tokens, token_id] if include_eos else beam.tokens,
                        logprobs=[*beam.logprobs, step],
                        cum_logprob=score,
                        finish_reason="stop",
                        stop_reason=token_id,
                    )
                )
            else:
                candidates.append((score, int(token_id), beam, step))
    scores = np.fromiter((c[0] for c in candidates), dtype=np.float64, count=len(candidates))
    if len(candidates) <= width:
        order = np.argsort(-scores)
    else:
        best = np.argpartition(-scores, width - 1)[:width]
        order = best[np.argsort(-scores[best])]
    out: list[Beam] = []
    for k in order:
        score, token_id, beam, step = candidates[int(k)]
        out.append(Beam([*beam.tokens, token_id], [*beam.logprobs, step], score))
    return out


def rank_beams(
    beams: Sequence[Beam], width: int, eos_token_id: int | None, length_penalty: float
) -> list[Beam]:
    """The best ``width`` beams by :func:`beam_score`, best first (equal scores keep their order,
    as Python's stable ``sorted(..., reverse=True)`` in vLLM)."""
    ranked = sorted(beams, key=lambda b: beam_score(b, eos_token_id, length_penalty), reverse=True)
    return ranked[:width]


def beam_token_text(tokenizer: Tokenizer) -> Callable[[int], str]:
    """A token's text in a beam-search response's logprobs: its maps carry no decoded text, so
    vLLM's ``_get_decoded_token`` falls back to decoding the id alone."""

    def text(token_id: int) -> str:
        return tokenizer.decode([token_id])

    return text


class BeamSearch:
    """One prompt's beam search over the llm layer; :meth:`run` returns the choices."""

    def __init__(
        self,
        text: TextContext,
        *,
        request_id: str,
        prompt: PreparedPrompt,
        params: BeamSearchParams,
        cache_salt: str | None = None,
        lora_request: Any = None,
        trace_headers: dict[str, str] | None = None,
    ) -> None:
        """``request_id`` is the public id the engine ids are derived from; ``lora_request``
        the adapter every step runs with (None: the base model); ``trace_headers`` go with
        every step's engine requests, as vLLM's ``beam_search`` sends them."""
        self._llm: LLM = text.llm
        self._tokenizer: Tokenizer = text.tokenizer
        self._sampling = text.sampling
        self._request_id = request_id
        self._prompt = prompt
        self._params = params
        self._cache_salt = cache_salt
        self._lora_request = lora_request
        self._trace_headers = trace_headers

    def _step_params(self) -> SamplingParams:
        # vLLM's SamplingParams(logprobs=2 * width, max_tokens=1, temperature, watermarking=False,
        # detokenize=False): none of the request's other knobs, nor the generation config's
        # defaults, but the EOS ids. Checked here as its constructor does (even for max_tokens
        # 0); the engine's limits (max_logprobs) only when the first step is sent (run()), as
        # vLLM's input processor checks them in generate().
        model: ModelSamplingInfo = msgspec.structs.replace(
            self._sampling, sampling_defaults={}, limits=None
        )
        params = lower_sampling_params(
            SamplingRequest(
                n=1,
                temperature=self._params.temperature,
                logprobs=2 * self._params.beam_width,
                watermarking=False,
            ),
            max_tokens=1,
            model=model,
        )
        return msgspec.structs.replace(
            params,
            detokenize=False,
            output_kind=RequestOutputKind.CUMULATIVE,
            skip_clone=False,
        )

    async def run(self) -> list[SequenceOutput]:
        """Search; the choices in order (one ``error`` output if an engine request failed)."""
        p = self._params
        eos = self._tokenizer.eos_token_id
        prompt_ids = self._prompt.token_ids
        step_params = self._step_params()
        beams = [Beam(list(prompt_ids))]
        completed: list[Beam] = []
        for step in range(p.max_tokens):
            if step == 0 and self._sampling.limits is not None:
                # The engine's limits (max_logprobs against 2 * width), which vLLM's input
                # processor checks in the first step's generate(); the engine client does not
                # check them again for requests the text layer lowered.
                validate_sampling_params(step_params, self._sampling.limits)
            outputs = await self._step(beams, step_params)
            if any(o.finish_reason == "error" for o in outputs):
                return [_output("", [], None, "error", None, None)]
            if any(o.finish_reason == "abort" for o in outputs):
                for beam in beams:
                    beam.finish_reason = "abort"
                break
            steps = [_position(o, 2 * p.beam_width) for o in outputs]
            beams = next_beams(
                beams,
                steps,
                p.beam_width,
                eos,
                ignore_eos=p.ignore_eos,
                include_eos=p.include_stop_str_in_output,
                completed=completed,
            )
            if not beams:
                break
        completed.extend(beams)
        return [
            self._choice(beam, eos)
            for beam in rank_beams(completed, p.beam_width, eos, p.length_penalty)
        ]

    def _choice(self, beam: Beam, eos: int | None) -> SequenceOutput:
        start = len(self._prompt.token_ids)
        token_ids = beam.tokens[start:]
        # vLLM leaves an EOS out of the text (only when it ends the beam's whole token list).
        text_ids = token_ids
        if beam.tokens[-1] == eos and not self._params.ignore_eos:
            text_ids = beam.tokens[start:-1]
        text = self._tokenizer.decode(
            text_ids, skip_special_tokens=self._params.skip_special_tokens
        )
        return _output(
            text,
            token_ids,
            beam.logprobs,
            beam.finish_reason or "length",
            beam.stop_reason,
            beam.cum_logprob,
        )

    async def _step(self, beams: list[Beam], params: SamplingParams) -> list[SampleOutput]:
        # One engine request per beam, all sent before any is awaited and all awaited together:
        # the first failure ends the step at once, and leaving the stack (that failure, a
        # cancelled handler) aborts whichever request has not finished.
        batch_id = f"{self._request_id}-{uuid.uuid4().hex}"
        async with contextlib.AsyncExitStack() as stack:
            streams: list[GenerationStream] = []
            for i, beam in enumerate(beams):
                stream = self._llm.generate(
                    GenerateRequest(
                        request_id=f"{batch_id}-beam-{i}",
                        prompt_token_ids=beam.tokens,
                        sampling_params=params,
                        output_kind=OutputKind.FINAL_ONLY,
                        cache_salt=self._cache_salt,
                        lora_request=self._lora_request,
                        trace_headers=self._trace_headers,
                    )
                )
                streams.append(await stack.enter_async_context(stream))
            outputs = await _finals(streams)
        return outputs


async def _finals(streams: list[GenerationStream]) -> list[SampleOutput]:
    """Each FINAL_ONLY stream's one output, waiting on all of them at once."""
    loop = asyncio.get_running_loop()
    wake: asyncio.Future[None] = loop.create_future()

    def ready() -> None:
        if not wake.done():
            wake.set_result(None)

    for stream in streams:
        stream.on_ready(ready)
    finals: list[SampleOutput | None] = [None] * len(streams)
    pending = len(streams)
    while True:
        for i, stream in enumerate(streams):
            if finals[i] is None:
                for out in stream.take():  # raises a stream's failure (e.g. a dead engine)
                    finals[i] = out
                    pending -= 1
        if not pending:
            return [out for out in finals if out is not None]
        await wake
        wake = loop.create_future()


def _position(output: SampleOutput, num_logprobs: int) -> PositionLogprobs | None:
    # The one generated position's map, as vLLM builds it without detokenizing: the sampled
    # token first, then the top-k (a token in both keeps its first place, the later value).
    if not output.logprobs:
        return None
    lp = output.logprobs[0]
    ranks = getattr(lp, "sampled_token_ranks", None)
    if ranks is None:
        ranks = lp.selected_token_ranks
    acc = LogprobsAccumulator(None, num_logprobs, None)
    acc.add_sample(lp.logprob_token_ids, lp.logprobs, ranks)  # it reads the triples as lists
    sample = acc.sample
    return sample[0] if sample else None


def _output(
    text: str,
    token_ids: list[int],
    logprobs: list[PositionLogprobs] | None,
    finish_reason: str,
    stop_reason: int | str | None,
    cumulative_logprob: float | None,
) -> SequenceOutput:
    return SequenceOutput(
        text=text,
        token_ids=token_ids,
        logprobs=logprobs,
        prompt_logprobs=None,
        cumulative_logprob=cumulative_logprob,
        finish_reason=finish_reason,
        stop_reason=stop_reason,
        num_output_tokens=len(token_ids),
        abort_engine=False,
    )


class BeamSearchStream:
    """A :class:`BeamSearch` as an ``UpdateSource`` for the handlers: its choices, all
    finished, come as one batch of updates when the search ends.

    Iterated (``async for``), the search runs in the consumer's task; push-style
    (:meth:`on_ready`), in a task this stream owns and :meth:`aclose` cancels and awaits."""

    __slots__ = ("_callback", "_ended", "_error", "_finished", "_search", "_task", "_updates")

    def __init__(self, search: BeamSearch) -> None:
        """Wrap ``search`` (not started)."""
        self._search = search
        self._task: asyncio.Task[None] | None = None
        self._updates: list[Update] = []
        self._error: BaseException | None = None
        self._callback: Callable[[], None] | None = None
        self._ended = False  # the search task has its result (it may still be unwinding)
        self._finished = False

    @property
    def finished(self) -> bool:
        """The choices (or the failure) have been taken."""
        return self._finished

    @property
    def kv_transfer_params(self) -> dict[str, Any] | None:
        """Always None: vLLM's beam search result carries no KV-transfer parameters."""
        return None

    @property
    def ec_transfer_params(self) -> dict[str, Any] | None:
        """Always None, as :attr:`kv_transfer_params`."""
        return None

    @property
    def num_cache_creation_tokens(self) -> int | None:
        """Always None: vLLM's beam search result has no prefix-cache counts (its chat usage
        then has no ``prompt_tokens_details``)."""
        return None

    def start(self) -> None:
        """Start the search task (idempotent)."""
        if self._task is None and not self._finished:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        try:
            outputs = await self._search.run()
            self._updates = [(i, seq, None) for i, seq in enumerate(outputs)]
        except asyncio.CancelledError:
            raise
        except Exception as e:  # surfaces in take(), as an engine stream's failure does
            self._error = e
        self._ended = True
        callback = self._callback
        if callback is not None:
            callback()

    def on_ready(self, callback: Callable[[], None] | None) -> None:
        """Start, and call ``callback()`` when the search has ended."""
        self._callback = callback
        self.start()

    def take(self) -> list[Update]:
        """The choices once the search has ended (then :attr:`finished`), else nothing; raises
        the search's failure once."""
        if not self._ended or self._finished:
            return []
        self._finished = True
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        updates, self._updates = self._updates, []
        return updates

    def on_tokens(self, consumer: TokenConsumer) -> SequenceProcessor | None:
        """Nothing streams token by token here."""
        return None

    def __aiter__(self) -> AsyncIterator[Update]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Update]:
        outputs = await self._search.run()
        self._finished = True
        for i, seq in enumerate(outputs):
            yield (i, seq, None)

    async def aclose(self) -> None:
        """Stop the search task, if any (its engine requests are aborted on the way out)."""
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

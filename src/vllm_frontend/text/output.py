"""Per-sequence output processing: engine token outputs in, text deltas and finish state out.

One `SequenceProcessor` per engine request (one per choice when n > 1). It follows vLLM's
`RequestState` + `OutputProcessor.process_outputs` (vllm/v1/engine/output_processor.py):

* a STOP finish from the engine (EOS or a `stop_token_ids` id) leaves its last token out of the
  text unless `include_stop_str_in_output` (the token stays in `token_ids` and usage);
* a stop string found in the text turns the output into a STOP finish with the string as
  `stop_reason`, trims tokens (and their logprobs) after the one completing it, and asks the
  caller to abort the engine request if the engine had not finished it;
* DELTA mode returns each update's new text/tokens/logprobs (prompt logprobs once), or every
  `stream_interval` tokens when that is above 1;
  FINAL_ONLY mode returns nothing until the sequence finishes, then everything.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import msgspec

from vllm_frontend.text.detokenizer import IncrementalDetokenizer
from vllm_frontend.text.logprobs import LogprobsAccumulator, PositionLogprobs, TokenStrings
from vllm_frontend.text.stop import TextAccumulator
from vllm_frontend.text.tokenizer import Tokenizer

__all__ = [
    "FINISH_REASONS",
    "OutputOptions",
    "SequenceOutput",
    "SequenceProcessor",
]

# The engine's FinishReason codes, as vLLM renders them (`str(FinishReason.X)`).
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")
_STOP = 0
_ABORT = 2
# RequestOutputKind values.
_DELTA = 1
_FINAL_ONLY = 2


class OutputOptions(Protocol):
    """The sampling fields that shape output text (the engine `SamplingParams` has them all)."""

    @property
    def stop(self) -> Sequence[str] | str | None: ...
    @property
    def include_stop_str_in_output(self) -> bool: ...
    @property
    def min_tokens(self) -> int: ...
    @property
    def skip_special_tokens(self) -> bool: ...
    @property
    def spaces_between_special_tokens(self) -> bool: ...
    @property
    def logprobs(self) -> int | None: ...
    @property
    def prompt_logprobs(self) -> int | None: ...
    @property
    def output_kind(self) -> int: ...


class SequenceOutput(msgspec.Struct, gc=False):
    """What one engine update produced for one sequence.

    A msgspec struct made without a Python ``__init__`` frame and left out of the cyclic GC
    (it holds no cycles): one is made for every streamed update, and at 5 ms engine steps
    linking it into the GC's list and running an ``__init__`` were ~8% of a c256 profile.
    """

    text: str
    """New text (DELTA) or the whole text (FINAL_ONLY)."""
    token_ids: list[int]
    """New token ids (DELTA) or all output token ids (FINAL_ONLY)."""
    logprobs: list[PositionLogprobs] | None
    """Per-position logprob maps matching `token_ids`, or None if not requested."""
    prompt_logprobs: list[PositionLogprobs | None] | None
    """Prompt logprobs (first entry None), sent once; None if not requested/already sent."""
    cumulative_logprob: float | None
    """Sum of sampled-token logprobs so far (None without logprobs)."""
    finish_reason: str | None
    """"stop", "length", "abort", "error", "repetition" or None while running."""
    stop_reason: int | str | None
    """The stop token id or stop string that ended the sequence, if any."""
    num_output_tokens: int
    """Output tokens generated so far (after stop-string trimming): usage.completion_tokens."""
    abort_engine: bool
    """True when a stop string ended the sequence before the engine did: abort it."""

    @property
    def finished(self) -> bool:
        """Whether this is the sequence's last output."""
        return self.finish_reason is not None


class SequenceProcessor:
    """Detokenizes one sequence, applies stop strings and collects logprobs, update by update."""

    __slots__ = (
        "_delta",
        "_detok",
        "_fast",
        "_final_only",
        "_final_plain",
        "_include_stop",
        "_interval",
        "_logprobs",
        "_num_output",
        "_output_ids",
        "_sent_tokens",
        "_text",
        "_undecoded",
        "finished",
    )

    def __init__(
        self,
        tokenizer: Tokenizer,
        prompt_token_ids: Sequence[int],
        options: OutputOptions,
        token_strings: TokenStrings | None = None,
        request_id: str = "",
        stream_interval: int = 1,
    ) -> None:
        stop = options.stop
        stops = [stop] if isinstance(stop, str) else list(stop or ())
        self._final_only = options.output_kind == _FINAL_ONLY
        self._delta = options.output_kind == _DELTA
        self._include_stop = options.include_stop_str_in_output
        # (positional arguments: a class called with keywords gets them as a dict, ~0.3 us more)
        self._detok = IncrementalDetokenizer(
            tokenizer,
            prompt_token_ids,
            options.skip_special_tokens,
            options.spaces_between_special_tokens,
            request_id,
        )
        self._text = TextAccumulator(
            stops,
            options.include_stop_str_in_output,
            options.min_tokens,
            not self._delta,  # keep_released
        )
        self._output_ids: list[int] = []
        """Output token ids so far, except those take_text took (only counted)."""
        self._num_output = 0
        """Output tokens so far (after stop-string trimming)."""
        self._undecoded = 0
        """The last output ids take_final took, not decoded yet (see :meth:`take_final`)."""
        # vLLM batches DELTA outputs every `stream_interval` tokens (the larger of the server's
        # --stream-interval and the request's), always sending the first and the last.
        requested = getattr(options, "stream_interval", None)
        self._interval = max(requested or 1, stream_interval) if self._delta else 1
        self._sent_tokens = 0
        if options.logprobs is not None or options.prompt_logprobs is not None:
            strings = token_strings if token_strings is not None else TokenStrings(tokenizer)
            self._logprobs: LogprobsAccumulator | None = LogprobsAccumulator(
                strings, options.logprobs, options.prompt_logprobs
            )
        else:
            self._logprobs = None
        # Streaming without stop strings, logprobs or batching: a running sequence's new text
        # goes out as it is decoded (nothing to hold back, search or trim).
        self._fast = self._delta and not stops and self._logprobs is None and self._interval == 1
        # Not streamed, without stop strings or logprobs: a running sequence's tokens only add
        # to the text, and nothing goes out before the end.
        self._final_plain = self._final_only and not stops and self._logprobs is None
        self.finished = False

    def take_text(self, new_token_ids: Sequence[int]) -> str | None:
        """:meth:`process` of a running output's new tokens (no logprobs) where it only decodes
        them (a streamed sequence without stop strings or batching, not finished): their text,
        with the state advanced as :meth:`process` advances it. None, having done nothing,
        where :meth:`process` would have more to do.

        The text accumulator is left alone: without stop strings (and in DELTA mode, which keeps
        no released text) nothing it would record here is ever read."""
        if not self._fast or self.finished:
            return None
        # Counted, not kept: only a stop string or a non-DELTA output needs the ids again.
        self._num_output += len(new_token_ids)
        decode = self._detok.decode_next
        if len(new_token_ids) == 1:
            return decode(new_token_ids[0])
        return "".join(map(decode, new_token_ids))

    def take_final(self, new_token_ids: Sequence[int]) -> bool:
        """:meth:`process` of a running output's new tokens (no logprobs) where it would return
        None having only decoded them (a FINAL_ONLY sequence without stop strings or logprobs,
        not finished): True, with the state advanced as :meth:`process` advances it. False,
        having done nothing, where :meth:`process` would have more to do.

        The ids are decoded later, all at once, before anything reads the text (the next
        :meth:`process` or :meth:`abort`): without stop strings nothing reads it before, and
        the incremental detokenizer gives the same text for the same ids in the same order
        whenever it decodes them (one call less per token for a non-streamed request)."""
        if not self._final_plain or self.finished:
            return False
        self._output_ids.extend(new_token_ids)
        num = len(new_token_ids)
        self._num_output += num
        self._undecoded += num
        return True

    def _decode_taken(self) -> None:
        # _detokenize(ids, False) without stop strings, of the ids take_final took: decode
        # them in order and record their text.
        num = self._undecoded
        self._undecoded = 0
        ids = self._output_ids[-num:]
        self._text.add_plain("".join(map(self._detok.decode_next, ids)), num)

    def plain_output(self, text: str, new_token_ids: Sequence[int]) -> SequenceOutput:
        """The update :meth:`process` returns for the tokens :meth:`take_text` just took."""
        return SequenceOutput(
            text, list(new_token_ids), None, None, None, None, None, self._num_output, False
        )

    def process(
        self,
        new_token_ids: Sequence[int],
        finish_reason: int | None = None,
        stop_reason: int | str | None = None,
        *,
        new_logprobs: tuple[Any, Any, Any] | None = None,
        new_prompt_logprobs: tuple[Any, Any, Any] | None = None,
    ) -> SequenceOutput | None:
        """Handle one engine output for this sequence; None when nothing is to be sent.

        `new_logprobs` / `new_prompt_logprobs` are `(token_ids, logprobs, ranks)` arrays as
        the engine sends them (LogprobsLists / LogprobsTensors fields 0..2).
        """
        if finish_reason is None:
            text = self.take_text(new_token_ids)
            if text is not None:
                return self.plain_output(text, new_token_ids)
        if self.finished:
            return None
        if self._undecoded:
            self._decode_taken()
        new_ids = list(new_token_ids)
        engine_finished = finish_reason is not None
        reason = FINISH_REASONS[finish_reason] if finish_reason is not None else None
        num_prev = len(self._output_ids)
        if new_ids:
            matched = self._detokenize(new_ids, finish_reason == _STOP)
            if matched is not None:
                stop_string, kept = matched
                reason, stop_reason = "stop", stop_string
                if kept < len(new_ids):
                    self._num_output -= len(new_ids) - kept
                    del new_ids[kept:]
                    del self._output_ids[num_prev + kept :]
                    if new_logprobs is not None:
                        new_logprobs = (
                            new_logprobs[0][:kept],
                            new_logprobs[1][:kept],
                            new_logprobs[2][:kept],
                        )
        lp = self._logprobs
        if lp is not None:
            if new_logprobs is not None:
                lp.add_sample(*new_logprobs)
            if new_prompt_logprobs is not None:
                lp.add_prompt(*new_prompt_logprobs)
        finished = reason is not None
        if finished:
            self.finished = True
        if self._final_only and not finished:
            return None
        if self._interval > 1:
            total = len(self._output_ids)
            if not finished and self._sent_tokens and total - self._sent_tokens < self._interval:
                return None
            new_ids = self._output_ids[self._sent_tokens :]
            self._sent_tokens = total
        return self._make_output(
            new_ids, reason, stop_reason if finished else None, finished and not engine_finished
        )

    def abort(self) -> SequenceOutput:
        """The final output for a request aborted by the frontend (client gone, shutdown)."""
        if self._undecoded:
            self._decode_taken()
        self.finished = True
        return self._make_output([], FINISH_REASONS[_ABORT], None, False)

    def _detokenize(self, new_ids: list[int], stop_terminated: bool) -> tuple[str, int] | None:
        decode = self._detok.decode_next
        self._output_ids.extend(new_ids)
        self._num_output += len(new_ids)
        if stop_terminated and not self._include_stop:
            # The EOS / stop token is kept as a token but contributes no text.
            texts = [decode(t) for t in new_ids[:-1]]
            texts.append("")
        else:
            texts = [decode(t) for t in new_ids]
        match = self._text.add(texts)
        if match is None:
            return None
        return match.stop_string, match.num_new_tokens_kept

    def _make_output(
        self,
        new_ids: list[int],
        reason: str | None,
        stop_reason: int | str | None,
        abort_engine: bool,
    ) -> SequenceOutput:
        finished = reason is not None
        lp = self._logprobs
        if self._delta:
            text = self._text.release(finished)
            token_ids = new_ids
            logprobs = None
            if lp is not None and lp.sample is not None:
                logprobs = lp.sample[len(lp.sample) - len(new_ids) :] if new_ids else []
            prompt_logprobs = lp.pop_prompt() if lp is not None else None
        else:
            self._text.release(True)
            text = self._text.text()
            token_ids = list(self._output_ids)
            logprobs = list(lp.sample) if lp is not None and lp.sample is not None else None
            prompt_logprobs = lp.prompt if lp is not None else None
        return SequenceOutput(
            text=text,
            token_ids=token_ids,
            logprobs=logprobs,
            prompt_logprobs=prompt_logprobs,
            cumulative_logprob=lp.cumulative_logprob if lp is not None else None,
            finish_reason=reason,
            stop_reason=stop_reason,
            num_output_tokens=self._num_output,
            abort_engine=abort_engine,
        )

"""Our per-sequence output processing gives exactly what vLLM's OutputProcessor gives.

Random token sequences (special, added, byte-fallback and multi-byte pieces included), random
engine step sizes (as with speculative decoding), random stop strings and flags: every update's
text, token ids, finish reason and stop reason must equal vLLM's, character for character.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from vllm_reference import VllmSequence

from vllm_frontend.text.output import SequenceProcessor
from vllm_frontend.text.tokenizer import Tokenizer

DELTA, FINAL_ONLY = 1, 2


@dataclass
class Options:
    stop: list[str]
    include_stop_str_in_output: bool = False
    min_tokens: int = 0
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    output_kind: int = DELTA
    stream_interval: int | None = None


def vllm_params(o: Options) -> Any:
    from vllm.sampling_params import RequestOutputKind, SamplingParams

    return SamplingParams(
        stop=list(o.stop),
        include_stop_str_in_output=o.include_stop_str_in_output,
        min_tokens=o.min_tokens,
        max_tokens=10_000,
        skip_special_tokens=o.skip_special_tokens,
        spaces_between_special_tokens=o.spaces_between_special_tokens,
        logprobs=o.logprobs,
        prompt_logprobs=o.prompt_logprobs,
        output_kind=RequestOutputKind(o.output_kind),
        stream_interval=o.stream_interval,
    )


def interesting_ids(tok: Tokenizer) -> list[int]:
    """Ids a test should hit often: added/special tokens and byte pieces."""
    ids = list(tok.added_tokens)
    for b in (0x0A, 0x20, 0xC3, 0xA9, 0xE6, 0x97, 0xA5, 0xF0, 0x9F, 0x98, 0x80, 0x48):
        piece = tok.token_to_id(f"<0x{b:02X}>")
        if piece is not None:
            ids.append(piece)
    return ids


@st.composite
def scenarios(draw: st.DrawFn, tok: Tokenizer) -> dict[str, Any]:
    vocab = tok.vocab_size
    special = interesting_ids(tok)
    # Mostly real ids, often added/byte pieces, rarely ids past the tokenizer's vocabulary (a
    # model's embedding table can be larger than its tokenizer).
    token = st.one_of(
        st.integers(0, vocab - 1), st.sampled_from(special), st.integers(vocab, vocab + 3)
    )
    prompt = draw(st.lists(token, min_size=1, max_size=12))
    generated = draw(st.lists(token, min_size=1, max_size=40))
    # Stop strings: pieces of what will actually be decoded, plus arbitrary short strings.
    full = tok.decode(generated, skip_special_tokens=False)
    pieces = st.builds(
        lambda a, n: full[a : a + n] or "x",
        st.integers(0, max(len(full) - 1, 0)),
        st.integers(1, 6),
    )
    stop = draw(st.lists(st.one_of(pieces, st.text(min_size=1, max_size=3)), max_size=3))
    options = Options(
        stop=stop,
        include_stop_str_in_output=draw(st.booleans()),
        min_tokens=draw(st.sampled_from([0, 0, 1, 3, 10])),
        skip_special_tokens=draw(st.booleans()),
        spaces_between_special_tokens=draw(st.booleans()),
        output_kind=draw(st.sampled_from([DELTA, FINAL_ONLY])),
        stream_interval=draw(st.sampled_from([None, None, None, 2, 3])),
    )
    steps: list[list[int]] = []
    i = 0
    while i < len(generated):
        n = draw(st.sampled_from([1, 1, 1, 2, 3, 5]))
        steps.append(generated[i : i + n])
        i += n
    finish = draw(st.sampled_from([None, 0, 0, 1, 4]))
    stop_reason = None
    if finish == 0 and draw(st.booleans()):
        stop_reason = steps[-1][-1]  # finished through stop_token_ids
    return {
        "prompt": prompt,
        "steps": steps,
        "options": options,
        "finish": finish,
        "stop_reason": stop_reason,
    }


def run_both(
    ours: Tokenizer, hf: Any, sc: dict[str, Any], direct: bool = False
) -> list[tuple[Any, Any]]:
    """vLLM's and our updates, step by step; ``direct``: a running step goes to
    ``take_final`` first (what a non-streamed request's engine client read does), to
    ``process`` only where that declines."""
    options: Options = sc["options"]
    ref = VllmSequence(hf, sc["prompt"], vllm_params(options))
    mine = SequenceProcessor(ours, sc["prompt"], options)
    pairs = []
    for k, step in enumerate(sc["steps"]):
        last = k == len(sc["steps"]) - 1
        finish = sc["finish"] if last else None
        stop_reason = sc["stop_reason"] if last else None
        r = ref.step(step, finish, stop_reason)
        if direct and finish is None and mine.take_final(step):
            pairs.append((r, None))
            continue
        m = mine.process(step, finish, stop_reason)
        pairs.append((r, m))
        if m is not None and m.finished:
            break
    return pairs


def assert_same(pairs: list[tuple[Any, Any]]) -> None:
    for r, m in pairs:
        assert (r is None) == (m is None), (r, m)
        if r is None:
            continue
        assert m.text == r.text
        assert m.token_ids == r.token_ids
        assert m.finish_reason == r.finish_reason
        assert m.stop_reason == r.stop_reason
        assert m.abort_engine == r.aborted_engine


@pytest.mark.oracle
@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_streamed_text_tokens_and_finish_match_vllm(ours: Tokenizer, hf: Any, data: Any) -> None:
    sc = data.draw(scenarios(ours))
    assert_same(run_both(ours, hf, sc))


@pytest.mark.oracle
@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_running_tokens_taken_by_take_final_give_vllms_updates(
    ours: Tokenizer, hf: Any, data: Any
) -> None:
    # take_final's fast path (FINAL_ONLY without stop strings or logprobs) and process, which
    # decides everything else, agree with vLLM whichever of them handled a running step.
    sc = data.draw(scenarios(ours))
    if data.draw(st.booleans()):
        sc["options"].stop = []
        sc["options"].output_kind = FINAL_ONLY
    assert_same(run_both(ours, hf, sc, direct=True))


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_an_abort_after_take_final_has_the_text_of_the_taken_tokens(
    ours: Tokenizer, data: Any
) -> None:
    # take_final leaves its tokens' decoding for later: an abort (client gone) before the
    # engine's final output must still carry their text, as when process handled each step.
    sc = data.draw(scenarios(ours))
    options: Options = sc["options"]
    options.stop, options.output_kind, options.logprobs = [], FINAL_ONLY, None
    options.prompt_logprobs = None
    taken = SequenceProcessor(ours, sc["prompt"], options)
    processed = SequenceProcessor(ours, sc["prompt"], options)
    steps = sc["steps"][: data.draw(st.integers(0, len(sc["steps"])))]
    for step in steps:
        assert taken.take_final(step)
        assert processed.process(step) is None
    a, b = taken.abort(), processed.abort()
    assert (a.text, a.token_ids, a.num_output_tokens) == (b.text, b.token_ids, b.num_output_tokens)


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_concatenated_deltas_equal_the_final_text_and_never_leak_a_stop_string(
    ours: Tokenizer, data: Any
) -> None:
    sc = data.draw(scenarios(ours))
    options: Options = sc["options"]
    options.output_kind = DELTA
    stream = SequenceProcessor(ours, sc["prompt"], options)
    final_opts = Options(**{**options.__dict__, "output_kind": FINAL_ONLY})
    final = SequenceProcessor(ours, sc["prompt"], final_opts)
    emitted = ""
    snapshots = []
    final_text = None
    stop_reason = None
    for k, step in enumerate(sc["steps"]):
        finish = sc["finish"] if k == len(sc["steps"]) - 1 else None
        d = stream.process(step, finish)
        f = final.process(step, finish)
        if f is not None:
            final_text = f.text
        if d is None:  # batched by stream_interval
            continue
        emitted += d.text
        snapshots.append(emitted)
        if d.finished:
            stop_reason = d.stop_reason
            break
    if final_text is None:
        final_text = final.abort().text
        emitted += stream.abort().text
    assert emitted == final_text
    # Nothing sent is ever taken back: in particular no piece of the stop string that ended
    # the sequence was streamed before the match.
    for sent in snapshots:
        assert final_text.startswith(sent)
    if isinstance(stop_reason, str) and options.include_stop_str_in_output:
        assert final_text.endswith(stop_reason)


@pytest.mark.oracle
@pytest.mark.parametrize("skip", [True, False])
def test_multibyte_character_cut_off_at_the_end_is_dropped(
    ours: Tokenizer, hf: Any, skip: bool
) -> None:
    emoji = ours.encode("😀", add_special_tokens=False)
    # Only the first piece(s) of the character: the rest never comes.
    partial = [t for t in emoji if not ours.decode([t]).endswith("😀")][:1] or emoji[:1]
    sc = {
        "prompt": ours.encode("hi"),
        "steps": [ours.encode(" ok", add_special_tokens=False), partial],
        "options": Options(stop=[], skip_special_tokens=skip, output_kind=FINAL_ONLY),
        "finish": 1,
        "stop_reason": None,
    }
    pairs = run_both(ours, hf, sc)
    assert_same(pairs)
    assert "\ufffd" not in pairs[-1][1].text

"""What a user sees at the end of a generation, in plain examples, each checked against vLLM."""

from __future__ import annotations

from typing import Any

import pytest
from test_streaming_matches_vllm import DELTA, FINAL_ONLY, Options, assert_same, run_both

from vllm_frontend.text.output import SequenceProcessor
from vllm_frontend.text.tokenizer import Tokenizer

pytestmark = pytest.mark.oracle  # imports vLLM or transformers as the reference


def one_token_steps(ids: list[int]) -> list[list[int]]:
    return [[t] for t in ids]


def stream_deltas(ours: Tokenizer, prompt: list[int], ids: list[int], opts: Options) -> list[str]:
    proc = SequenceProcessor(ours, prompt, opts)
    deltas = []
    for t in ids:
        out = proc.process([t])
        assert out is not None
        deltas.append(out.text)
        if out.finished:
            break
    return deltas


def test_stop_string_is_never_streamed_even_in_part(ours: Tokenizer, hf: Any) -> None:
    ids = ours.encode("hello world STOP here", add_special_tokens=False)
    opts = Options(stop=["STOP"])
    deltas = stream_deltas(ours, ours.encode("x"), ids, opts)
    text = "".join(deltas)
    assert "S" not in text  # not even the first letter of the stop string was sent
    sc = {
        "prompt": ours.encode("x"),
        "steps": one_token_steps(ids),
        "options": opts,
        "finish": None,
        "stop_reason": None,
    }
    pairs = run_both(ours, hf, sc)
    assert_same(pairs)
    assert pairs[-1][1].finish_reason == "stop"
    assert pairs[-1][1].stop_reason == "STOP"
    assert pairs[-1][1].abort_engine  # the engine was still generating


def test_stop_string_kept_with_include_stop_str_in_output(ours: Tokenizer, hf: Any) -> None:
    ids = ours.encode("one two END three", add_special_tokens=False)
    for kind in (DELTA, FINAL_ONLY):
        sc = {
            "prompt": ours.encode("x"),
            "steps": one_token_steps(ids),
            "options": Options(stop=["END"], include_stop_str_in_output=True, output_kind=kind),
            "finish": None,
            "stop_reason": None,
        }
        pairs = run_both(ours, hf, sc)
        assert_same(pairs)
        final = "".join(m.text for _, m in pairs if m is not None)
        assert final.endswith("END")


def test_stop_string_inside_min_tokens_does_not_stop(ours: Tokenizer, hf: Any) -> None:
    ids = ours.encode("END one two three four", add_special_tokens=False)
    sc = {
        "prompt": ours.encode("x"),
        "steps": one_token_steps(ids),
        "options": Options(stop=["END"], min_tokens=len(ids) - 1, output_kind=FINAL_ONLY),
        "finish": 1,
        "stop_reason": None,
    }
    pairs = run_both(ours, hf, sc)
    assert_same(pairs)
    assert pairs[-1][1].finish_reason == "length"


def test_eos_ends_the_text_without_showing_itself(ours: Tokenizer, hf: Any) -> None:
    assert ours.eos_token_id is not None
    ids = [*ours.encode("all done", add_special_tokens=False), ours.eos_token_id]
    for include, skip in [(False, True), (False, False), (True, False), (True, True)]:
        sc = {
            "prompt": ours.encode("x"),
            "steps": one_token_steps(ids),
            "options": Options(
                stop=[],
                include_stop_str_in_output=include,
                skip_special_tokens=skip,
                output_kind=FINAL_ONLY,
            ),
            "finish": 0,
            "stop_reason": None,
        }
        pairs = run_both(ours, hf, sc)
        assert_same(pairs)
        out = pairs[-1][1]
        assert out.token_ids[-1] == ours.eos_token_id  # counted in usage either way
        eos_text = ours.decode([ours.eos_token_id])
        assert (eos_text in out.text) == (include and not skip and bool(eos_text))

"""Long prompts are encoded on a worker thread: the same ids and errors as encoding them in
the event loop, while the loop keeps running."""

from __future__ import annotations

import asyncio
import pathlib
import random
from typing import Any

import pytest
from tests.support.tiny_model import tiny_model_dir

from vllm_frontend.text.errors import InvalidInput
from vllm_frontend.text.prompts import (
    OFF_LOOP_ENCODE_CHARS,
    OFF_LOOP_ENCODE_CHARS_FASTOKENS,
    PromptPreparer,
    encode_prompt,
)
from vllm_frontend.text.tokenizer import Tokenizer

MAX_MODEL_LEN = 4096


@pytest.fixture(scope="module")
def model() -> pathlib.Path:
    return tiny_model_dir()


def _ctx(model: pathlib.Path, max_model_len: int) -> PromptPreparer:
    return PromptPreparer(Tokenizer.from_dir(model), max_model_len)


@pytest.fixture(scope="module")
def ctx(model: pathlib.Path) -> PromptPreparer:
    return _ctx(model, MAX_MODEL_LEN)


def _text(chars: int, seed: int) -> str:
    rng = random.Random(seed)
    words = ["the", "quick", "brown", "fox", "ünïcode", "数据", "🙂", "\n", "  ", "42", "<|x|>"]
    out = ""
    while len(out) < chars:
        out += rng.choice(words) + rng.choice([" ", "", "."])
    return out[:chars]


def _outcome(fn: Any) -> Any:
    """The prompts' (ids, text), or the error's class and message."""
    try:
        return [(p.token_ids, p.text) for p in fn()]
    except InvalidInput as e:
        return (type(e).__name__, str(e))


# Each case: prompts and options. The texts come to OFF_LOOP_ENCODE_CHARS or more, so
# prepare_prompts takes the worker thread; the reference is prepare_prompt, one by one, in
# the event loop, as before.
LONG = OFF_LOOP_ENCODE_CHARS
CASES: dict[str, tuple[list[Any], dict[str, Any]]] = {
    "one long text": ([_text(LONG, 1)], {}),
    "texts and token ids": ([_text(LONG // 2, 2), [1, 2, 3], _text(LONG // 2 + 10, 3)], {}),
    "no special tokens": ([_text(LONG + 5, 4)], {"add_special_tokens": False}),
    "truncated left": ([_text(LONG * 2, 5)], {"truncate": 100, "truncation_side": "left"}),
    "truncated right": (
        [_text(LONG * 2, 6), _text(10, 7)],
        {"truncate": 50, "truncation_side": "right"},
    ),
    # The HF truncation path (no side given) stays in the loop; same results regardless.
    "truncated by the tokenizer": ([_text(LONG, 8)], {"truncate": 64}),
    # Errors come in prompt order: the too-many-tokens text first, then the too-long one.
    "too many tokens, then too long": ([_text(LONG, 9) * 3, _text(MAX_MODEL_LEN * 1000, 10)], {}),
    "too long, then too many tokens": ([_text(MAX_MODEL_LEN * 1000, 11), _text(LONG, 12) * 3], {}),
    "token ids over the context before a long text": (
        [[5] * (MAX_MODEL_LEN + 1), _text(LONG, 13)],
        {},
    ),
}


EXPECTED_ERRORS = {
    "too many tokens, then too long": "input tokens",
    "too long, then too many tokens": "characters",
    "token ids over the context before a long text": "input tokens",
}


@pytest.mark.parametrize("name", list(CASES))
def test_off_loop_encoding_gives_the_in_loop_results_and_errors(
    ctx: PromptPreparer, name: str
) -> None:
    prompts, options = CASES[name]
    options = {"add_special_tokens": True} | options
    in_loop = _outcome(lambda: [ctx.prepare_prompt(p, **options) for p in prompts])
    off_loop = _outcome(lambda: asyncio.run(ctx.prepare_prompts(prompts, **options)))
    assert off_loop == in_loop
    if name in EXPECTED_ERRORS:
        assert isinstance(in_loop, tuple) and EXPECTED_ERRORS[name] in in_loop[1]
    else:
        assert isinstance(in_loop, list)
    if isinstance(in_loop, list):  # and those ids are the tokenizer's own
        for prompt, (ids, _) in zip(prompts, in_loop, strict=True):
            if isinstance(prompt, str) and "truncate" not in options:
                expected = ctx.tokenizer.backend.encode(
                    prompt, add_special_tokens=options["add_special_tokens"]
                ).ids
                assert ids == expected


def test_the_event_loop_runs_while_a_long_prompt_is_encoded(model: pathlib.Path) -> None:
    # ~10x the threshold: tens of milliseconds of encoding. Encoded in the loop, the ticker
    # could not run until it was done.
    ctx = _ctx(model, 65536)
    text = _text(OFF_LOOP_ENCODE_CHARS * 10, 14)
    ticks = 0

    async def ticker(done: asyncio.Event) -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await asyncio.sleep(0)

    async def main() -> list[int]:
        done = asyncio.Event()
        task = asyncio.create_task(ticker(done))
        await asyncio.sleep(0)
        start = ticks
        [prompt] = await ctx.prepare_prompts([text], add_special_tokens=True)
        during = ticks - start
        done.set()
        await task
        assert during > 1
        return prompt.token_ids

    assert asyncio.run(main()) == ctx.tokenizer.backend.encode(text).ids


class _RecordingEncoder:
    """A tokenizer stand-in that records whether it encoded in the loop or on the worker."""

    def __init__(self, fastokens: bool) -> None:
        self.uses_fastokens = fastokens
        self.calls: list[str] = []

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        self.calls.append("inline")
        return [len(text)]

    def encode_batch(self, texts: list[str], add_special_tokens: bool = True) -> list[list[int]]:
        self.calls.append("worker")
        return [[len(t)] for t in texts]


@pytest.mark.parametrize(
    ("fastokens", "threshold"),
    [(False, OFF_LOOP_ENCODE_CHARS), (True, OFF_LOOP_ENCODE_CHARS_FASTOKENS)],
)
def test_the_off_loop_threshold_follows_the_encoder(fastokens: bool, threshold: int) -> None:
    # fastokens encodes ~10x faster: shorter texts than with `tokenizers` stay in the loop.
    assert OFF_LOOP_ENCODE_CHARS < OFF_LOOP_ENCODE_CHARS_FASTOKENS
    tokenizer = _RecordingEncoder(fastokens)
    for chars in (threshold - 1, threshold):
        assert asyncio.run(encode_prompt(tokenizer, "x" * chars, True)) == [chars]
    assert tokenizer.calls == ["inline", "worker"]

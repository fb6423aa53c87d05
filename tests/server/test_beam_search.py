"""Beam search against a scripted language model: the choices equal an independent search over
the same logprobs, with vLLM 0.32's rules (vllm/entrypoints/generate/beam_search/online.py and
utils.py): ``2n`` candidates per beam and step, EOS completes a beam (``stop_reason`` = the EOS
id), the final ranking divides by the length (prompt included) to the ``length_penalty``. And no
engine request outlives the search: an error, a dead engine or a client leaving aborts them all.
"""

from __future__ import annotations

import asyncio
import json
import math
import pathlib
import random
from collections.abc import AsyncIterator, Sequence
from typing import Any

import numpy as np
import pytest

from tests.support.generation_app import generation_app, generation_context
from tests.support.responses import BufferSink
from tests.support.responses import body as body_of
from vllm_frontend.engine.client import EngineDeadError
from vllm_frontend.engine.protocol import (
    EngineCoreOutput,
    EngineCoreRequest,
    FinishReason,
    LogprobsLists,
)
from vllm_frontend.engine.validate import RequestLimits
from vllm_frontend.server.app import App, ServerSettings
from vllm_frontend.server.chat import ChatHandler
from vllm_frontend.server.completions import CompletionsHandler
from vllm_frontend.server.protocol import parse_chat_request, parse_completion_request
from vllm_frontend.server.transport import PushedStreamingResponse, Request
from vllm_frontend.text.beam_search import Beam, beam_score, rank_beams
from vllm_frontend.text.tokenizer import Tokenizer

PROMPT = [128000, 9906, 1917]
VOCAB = [1000 + i for i in range(9)]


def _f32(x: float) -> float:
    return float(np.float32(x))  # what a logprob looks like after the engine's float32 arrays


class ScriptedLM:
    """An engine client whose one-token requests answer with scripted next-token logprobs.

    ``table`` maps generated tokens (after the prompt: the first request's ids) to
    ``{token: logprob}``; other contexts get a seeded random distribution over VOCAB and EOS.
    The sampled token is the most likely one. At ``fail_at`` generated tokens, beam ``fail_beam``
    fails (``fail``: an ERROR or ABORT finish, or EngineDeadError) and, with ``hang``, the
    others never answer (with ``fail`` None: every beam hangs there)."""

    def __init__(self, eos: int, table: dict[tuple[int, ...], dict[int, float]] | None = None,
                 *, fail_at: int | None = None, fail: str | None = None, fail_beam: int = 0,
                 hang: bool = False) -> None:  # fmt: skip
        self.eos = eos
        self.table = table or {}
        self.fail_at, self.fail, self.fail_beam, self.hang = fail_at, fail, fail_beam, hang
        self.prompt: list[int] | None = None
        self.added: list[EngineCoreRequest] = []
        self.finished: set[str] = set()
        self.aborted: list[str] = []
        self.hanging = asyncio.Event()

    def dist(self, generated: tuple[int, ...]) -> dict[int, float]:
        """Next-token logprobs after ``generated`` (float32 values, as the engine sends)."""
        if generated in self.table:
            return {t: _f32(lp) for t, lp in self.table[generated].items()}
        rng = random.Random(repr(generated))
        tokens = [*VOCAB, self.eos]
        logits = [rng.gauss(0.0, 2.0) for _ in tokens]
        norm = math.log(sum(math.exp(x) for x in logits))
        return {t: _f32(x - norm) for t, x in zip(tokens, logits, strict=True)}

    def add_request(self, request: EngineCoreRequest) -> AsyncIterator[EngineCoreOutput]:
        if self.prompt is None:
            self.prompt = list(request.prompt_token_ids)
        self.added.append(request)
        return self._run(request)

    async def _run(self, req: EngineCoreRequest) -> AsyncIterator[EngineCoreOutput]:
        assert self.prompt is not None
        generated = tuple(req.prompt_token_ids[len(self.prompt) :])
        beam = int(req.request_id.split("-beam-")[1].split("-")[0])
        await asyncio.sleep(0)
        failing = len(generated) == self.fail_at
        if failing and self.hang and (self.fail is None or beam != self.fail_beam):
            self.hanging.set()
            await asyncio.Event().wait()
        failing = failing and beam == self.fail_beam
        if failing and self.fail == "dead":
            raise EngineDeadError("engine core died")
        ranked = sorted(self.dist(generated).items(), key=lambda kv: -kv[1])
        top = ranked[: req.sampling_params.logprobs or 0]
        ids = [ranked[0][0], *(t for t, _ in top)]
        lps = [ranked[0][1], *(lp for _, lp in top)]
        self.finished.add(req.request_id)
        yield EngineCoreOutput(
            req.request_id, [ranked[0][0]],
            new_logprobs=LogprobsLists(np.array([ids], dtype=np.int64),
                                       np.array([lps], dtype=np.float32), np.array([1])),
            finish_reason=FinishReason.ERROR if failing and self.fail == "error"
            else FinishReason.ABORT if failing and self.fail == "abort" else FinishReason.LENGTH,
        )  # fmt: skip

    def abort_requests(self, request_ids: Sequence[str]) -> int:
        self.aborted.extend(request_ids)
        return len(request_ids)


def reference_search(lm: ScriptedLM, n: int, max_tokens: int, *, length_penalty: float = 1.0,
                     ignore_eos: bool = False, include_eos: bool = False,
                     ) -> list[tuple[list[int], float, str, int | None]]:  # fmt: skip
    """A plain beam search over ``lm`` with vLLM's rules: (generated ids, cumulative logprob,
    finish reason, stop reason) of the best ``n``, best first."""
    prompt = lm.prompt or []
    eos = lm.eos
    live: list[tuple[list[int], float]] = [([], 0.0)]
    done: list[tuple[list[int], float, str, int | None]] = []
    for _ in range(max_tokens):
        grown: list[tuple[list[int], float]] = []
        for gen, total in live:
            ranked = sorted(lm.dist(tuple(gen)).items(), key=lambda kv: -kv[1])[: 2 * n]
            for token, lp in ranked:
                if token == eos and not ignore_eos:
                    done.append(([*gen, eos] if include_eos else gen, total + lp, "stop", eos))
                else:
                    grown.append(([*gen, token], total + lp))
        live = sorted(grown, key=lambda g: -g[1])[:n]
    pool = done + [(gen, total, "length", None) for gen, total in live]

    def score(entry: tuple[list[int], float, str, int | None]) -> float:
        tokens = prompt + entry[0]
        length = len(tokens) - (1 if tokens[-1] == eos else 0)
        return entry[1] / max(length, 1) ** length_penalty

    return sorted(pool, key=score, reverse=True)[:n]


_TOKENIZERS: dict[pathlib.Path, Tokenizer] = {}


def _app(model: pathlib.Path, lm: ScriptedLM) -> App:
    if model not in _TOKENIZERS:
        _TOKENIZERS[model] = Tokenizer.from_dir(model)
    return generation_app(model, lm, max_model_len=128, tokenizer=_TOKENIZERS[model])


def _request(path: str, body: dict[str, Any]) -> Request:
    payload = json.dumps({"model": "m", "use_beam_search": True, **body}).encode()
    return Request("POST", path, b"", {b"content-type": b"application/json"}, payload)


async def _call(app: App, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    response = await app(_request(path, body))
    raw = await body_of(response)
    if isinstance(response, PushedStreamingResponse):
        events = [e.removeprefix("data: ") for e in raw.decode().split("\n\n") if e]
        return response.status, [e if e == "[DONE]" else json.loads(e) for e in events]
    return response.status, json.loads(raw)


def _complete(app: App, **body: Any) -> tuple[int, Any]:
    return asyncio.run(_call(app, "/v1/completions", {"prompt": PROMPT, **body}))


@pytest.fixture
def tokenizer(tiny_model: pathlib.Path) -> Tokenizer:
    _app(tiny_model, ScriptedLM(0))
    return _TOKENIZERS[tiny_model]


@pytest.mark.parametrize("n,max_tokens", [(1, 1), (1, 5), (2, 4), (3, 6), (4, 3)])
@pytest.mark.parametrize("length_penalty", [0.0, 1.0, 2.5])
@pytest.mark.parametrize("include_eos,ignore_eos", [(False, False), (True, False), (False, True)])
def test_choices_are_the_best_beams_of_an_independent_search(
    tiny_model: pathlib.Path, tokenizer: Tokenizer, n: int, max_tokens: int,
    length_penalty: float, include_eos: bool, ignore_eos: bool,
) -> None:  # fmt: skip
    eos = tokenizer.eos_token_id
    assert eos is not None
    lm = ScriptedLM(eos)
    status, out = _complete(
        _app(tiny_model, lm), n=n, max_tokens=max_tokens, length_penalty=length_penalty,
        include_stop_str_in_output=include_eos, ignore_eos=ignore_eos, return_token_ids=True,
    )  # fmt: skip
    assert status == 200, out
    expected = reference_search(lm, n, max_tokens, length_penalty=length_penalty,
                                ignore_eos=ignore_eos, include_eos=include_eos)  # fmt: skip
    got = [
        (c["token_ids"], c["finish_reason"], c["stop_reason"], c["text"]) for c in out["choices"]
    ]
    want = [
        (gen, finish, stop, tokenizer.decode(gen[:-1] if gen and gen[-1] == eos and not ignore_eos
                                             else gen, skip_special_tokens=True))
        for gen, _, finish, stop in expected
    ]  # fmt: skip
    assert got == want
    assert [c["index"] for c in out["choices"]] == list(range(len(want)))
    assert out["usage"]["completion_tokens"] == sum(len(g) for g, *_ in expected)
    assert out["usage"]["prompt_tokens"] == len(PROMPT)
    # Every step sends each live beam as a one-token request for 2n logprobs; none is left over.
    assert all(r.sampling_params.max_tokens == 1 and r.sampling_params.logprobs == 2 * n
               and r.sampling_params.n == 1 for r in lm.added)  # fmt: skip
    assert {r.request_id for r in lm.added} == lm.finished
    # The random model never ends every beam at once: max_tokens steps, one prompt length each.
    assert len({len(r.prompt_token_ids) for r in lm.added}) == max_tokens


# A hand-made model: after the prompt, EOS (-1.0) or A (-0.5); after A, C (-1.3) or worse.
A, C = 1000, 1001


def _hand_table(eos: int) -> dict[tuple[int, ...], dict[int, float]]:
    return {
        (): {eos: -1.0, A: -0.5, 1005: -3.0, 1006: -9.0},
        (A,): {C: -1.3, 1002: -2.0, 1003: -4.0, 1007: -9.0},
    }


@pytest.mark.parametrize(
    "length_penalty,winner",
    [(1.0, "eos"), (0.0, "eos"), (0.5, "eos"), (2.0, "long"), (3.0, "long")],
)
def test_the_length_penalty_counts_the_prompt_tokens(
    tiny_model: pathlib.Path, tokenizer: Tokenizer, length_penalty: float, winner: str
) -> None:
    # EOS beam: -1.0 over 3 tokens (the prompt); A C: -1.8 over 5. With penalty 1 the EOS beam
    # wins (-0.333 > -0.36); counting generated tokens alone, A C would (-0.9 > -1.0).
    eos = tokenizer.eos_token_id
    assert eos is not None
    lm = ScriptedLM(eos, _hand_table(eos))
    status, out = _complete(_app(tiny_model, lm), n=1, max_tokens=2, length_penalty=length_penalty,
                            return_token_ids=True)  # fmt: skip
    assert status == 200
    (choice,) = out["choices"]
    if winner == "eos":
        assert (choice["token_ids"], choice["finish_reason"], choice["stop_reason"]) == (
            [], "stop", eos)  # fmt: skip
        assert choice["text"] == ""
    else:
        assert (choice["token_ids"], choice["finish_reason"], choice["stop_reason"]) == (
            [A, C], "length", None)  # fmt: skip
    score = beam_score(Beam(list(PROMPT), [], -1.0), eos, 1.0)
    assert score == pytest.approx(-1.0 / 3)


def test_an_eos_kept_by_include_stop_str_in_output_is_in_the_ids_not_the_text(
    tiny_model: pathlib.Path, tokenizer: Tokenizer
) -> None:
    eos = tokenizer.eos_token_id
    assert eos is not None
    lm = ScriptedLM(eos, _hand_table(eos))
    status, out = _complete(_app(tiny_model, lm), n=1, max_tokens=2, logprobs=1, temperature=0,
                            include_stop_str_in_output=True, return_token_ids=True)  # fmt: skip
    assert status == 200
    (choice,) = out["choices"]
    assert (choice["token_ids"], choice["text"], choice["stop_reason"]) == ([eos], "", eos)
    assert out["usage"]["completion_tokens"] == 1
    # The EOS step's map: the engine's sampled token (A, also its top 1) first, then the others
    # by rank; logprobs=1 shows the first two entries.
    assert choice["logprobs"]["token_logprobs"] == [-1.0]
    assert list(choice["logprobs"]["top_logprobs"][0].values()) == [-0.5, -1.0]


def test_rank_beams_keeps_the_order_of_equal_scores() -> None:
    beams = [Beam([1, 2], [], -1.0), Beam([1, 3], [], -0.5), Beam([1, 4], [], -1.0)]
    assert rank_beams(beams, 3, None, 1.0) == [beams[1], beams[0], beams[2]]


def test_stop_strings_stop_ids_and_sampling_knobs_do_not_change_the_search(
    tiny_model: pathlib.Path, tokenizer: Tokenizer
) -> None:
    eos = tokenizer.eos_token_id
    assert eos is not None
    plain_lm = ScriptedLM(eos)
    _, plain = _complete(_app(tiny_model, plain_lm), n=2, max_tokens=4)
    knobs_lm = ScriptedLM(eos)
    _, knobs = _complete(_app(tiny_model, knobs_lm), n=2, max_tokens=4,
                         stop=[plain["choices"][0]["text"][:1] or "x"], stop_token_ids=VOCAB,
                         top_p=0.1, top_k=1, presence_penalty=2.0, seed=7,
                         min_tokens=3)  # fmt: skip
    assert knobs["choices"] == plain["choices"]
    for r in knobs_lm.added:
        sp = r.sampling_params
        assert (sp.stop, sp.top_p, sp.top_k, sp.seed, sp.min_tokens) == ([], 1.0, 0, None, 0)
        assert sp.temperature == 1.0 and not sp.detokenize


def test_max_tokens_0_returns_the_prompt_alone_whatever_n(
    tiny_model: pathlib.Path, tokenizer: Tokenizer
) -> None:
    eos = tokenizer.eos_token_id
    assert eos is not None
    lm = ScriptedLM(eos)
    status, out = _complete(_app(tiny_model, lm), n=3, max_tokens=0)
    assert status == 200
    assert [(c["text"], c["finish_reason"]) for c in out["choices"]] == [("", "length")]
    assert lm.added == []


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_2n_logprobs_above_the_engines_max_are_refused_before_any_step(
    tiny_model: pathlib.Path, tokenizer: Tokenizer, path: str
) -> None:
    # The served CLI's engine client does not check lowered requests again (sampling_prechecked),
    # so the search checks its step's 2n logprobs against the engine's max_logprobs itself. The
    # e2e beam-search tests compare the whole answer with vLLM's; here: no step reaches the engine.
    lm = ScriptedLM(tokenizer.eos_token_id or 0)
    limits = RequestLimits(max_logprobs=20)
    ctx = generation_context(tiny_model, lm, max_model_len=128, tokenizer=tokenizer, limits=limits)
    app = App(ServerSettings(served_model_names=["m"], max_model_len=128))
    app.route("POST", "/v1/completions", CompletionsHandler(ctx, parse_completion_request))
    app.route("POST", "/v1/chat/completions", ChatHandler(ctx, parse_chat_request))
    body: dict[str, Any] = {"n": 11, "max_tokens": 2}
    if path.endswith("chat/completions"):
        body["messages"] = [{"role": "user", "content": "hi"}]
    else:
        body["prompt"] = PROMPT
    status, out = asyncio.run(_call(app, path, body))
    assert status == 400, out
    # vLLM 0.32's SamplingParams._validate_logprobs, as VLLMValidationError.__str__ shows it.
    assert out["error"]["message"] == (
        "Requested sample logprobs of 22, which is greater than max allowed: 20 "
        "(parameter=logprobs, value=22)"
    )
    assert lm.added == []
    status, out = asyncio.run(_call(app, path, {**body, "n": 10}))
    assert status == 200 and len(lm.added) > 0


def test_streamed_completions_with_beam_search_are_refused(tiny_model: pathlib.Path) -> None:
    status, out = _complete(_app(tiny_model, ScriptedLM(0)), stream=True, model="nope")
    assert status == 400
    assert out["error"]["message"] == "Streaming is not currently supported with beam search"


def test_a_streamed_chat_beam_search_sends_role_chunks_then_each_choice_whole(
    tiny_model: pathlib.Path, tokenizer: Tokenizer
) -> None:
    eos = tokenizer.eos_token_id
    assert eos is not None
    lm = ScriptedLM(eos)
    app = _app(tiny_model, lm)
    body = {"messages": [{"role": "user", "content": "hi"}], "n": 2, "max_tokens": 3}
    status, full = asyncio.run(_call(app, "/v1/chat/completions", body))
    assert status == 200
    status, events = asyncio.run(_call(app, "/v1/chat/completions", {
        **body, "stream": True, "stream_options": {"include_usage": True}}))  # fmt: skip
    assert status == 200 and events[-1] == "[DONE]"
    chunks = events[:-1]
    assert [c["choices"][0]["delta"] for c in chunks[:2]] == [
        {"role": "assistant", "content": ""}
    ] * 2
    finishing = [c["choices"][0] for c in chunks[2:4]]
    assert [(c["index"], c["delta"]["content"], c["finish_reason"]) for c in finishing] == [
        (c["index"], c["message"]["content"], c["finish_reason"]) for c in full["choices"]
    ]
    assert chunks[4]["usage"] == {k: full["usage"][k] for k in chunks[4]["usage"]}


# --- failures: nothing is left running on the engine -------------------------------------------


def _left_running(lm: ScriptedLM) -> set[str]:
    return {r.request_id for r in lm.added} - lm.finished - set(lm.aborted)


PATHS = [
    ("/v1/completions", {"prompt": PROMPT, "n": 3, "max_tokens": 5}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "n": 3,
                              "max_tokens": 5}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "n": 3,
                              "max_tokens": 5, "stream": True}),
]  # fmt: skip
INTERNAL = {"message": "Internal server error", "type": "InternalServerError", "param": None,
            "code": 500}  # fmt: skip


def _error_of(status: int, out: Any, body: dict[str, Any]) -> Any:
    if body.get("stream"):  # the stream had started: an error event, then [DONE]
        assert status == 200 and out[-1] == "[DONE]"
        return out[-2]["error"]
    assert status == 500
    return out["error"]


@pytest.mark.parametrize("path,body", PATHS)
def test_an_engine_error_finish_in_a_step_is_vllms_500(
    tiny_model: pathlib.Path, tokenizer: Tokenizer, path: str, body: dict[str, Any]
) -> None:
    # vLLM's search yields one "error" output, which the handlers turn into GenerationError.
    lm = ScriptedLM(tokenizer.eos_token_id or 0, fail_at=2, fail="error", fail_beam=1)
    status, out = asyncio.run(_call(_app(tiny_model, lm), path, body))
    assert _error_of(status, out, body) == INTERNAL
    assert _left_running(lm) == set()


def test_an_engine_abort_ends_the_search_with_the_beams_so_far_finished_abort(
    tiny_model: pathlib.Path, tokenizer: Tokenizer
) -> None:
    # vLLM: any "abort" output of a step marks every live beam "abort" and ends the search; the
    # completed and live beams are then ranked as usual.
    eos = tokenizer.eos_token_id
    assert eos is not None
    lm = ScriptedLM(eos, fail_at=1, fail="abort", fail_beam=2)
    status, out = _complete(_app(tiny_model, lm), n=3, max_tokens=5, return_token_ids=True)
    assert status == 200
    expected = reference_search(lm, 3, 1)
    assert [(c["token_ids"], c["finish_reason"]) for c in out["choices"]] == [
        (gen, "abort" if finish == "length" else finish) for gen, _, finish, _ in expected
    ]
    assert _left_running(lm) == set()


@pytest.mark.parametrize("path,body", PATHS)
def test_a_dead_engine_mid_search_fails_the_request_and_aborts_the_whole_step(
    tiny_model: pathlib.Path, tokenizer: Tokenizer, path: str, body: dict[str, Any]
) -> None:
    lm = ScriptedLM(tokenizer.eos_token_id or 0, fail_at=2, fail="dead", fail_beam=1, hang=True)
    status, out = asyncio.run(asyncio.wait_for(_call(_app(tiny_model, lm), path, body), 30))
    assert _error_of(status, out, body)["code"] == 500
    step = [r.request_id for r in lm.added if len(r.prompt_token_ids) == len(lm.prompt or []) + 2]
    assert len(step) == 3
    assert _left_running(lm) == set()
    assert set(step) - lm.finished <= set(lm.aborted)


@pytest.mark.parametrize("path,body", PATHS)
def test_a_client_leaving_mid_search_aborts_every_request_of_the_step(
    tiny_model: pathlib.Path, tokenizer: Tokenizer, path: str, body: dict[str, Any]
) -> None:
    lm = ScriptedLM(tokenizer.eos_token_id or 0, fail_at=3, hang=True)
    app = _app(tiny_model, lm)

    async def main() -> None:
        if body.get("stream"):
            # The server cancels the task producing a stream's body when the client goes away.
            response = await app(_request(path, body))
            assert isinstance(response, PushedStreamingResponse)
            task: asyncio.Task[Any] = asyncio.create_task(response.produce(BufferSink()))
        else:
            task = asyncio.create_task(app(_request(path, body)))  # the server cancels it
        await lm.hanging.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    hung = [r.request_id for r in lm.added if r.request_id not in lm.finished]
    assert len(hung) == 3
    assert sorted(lm.aborted) == sorted(hung)

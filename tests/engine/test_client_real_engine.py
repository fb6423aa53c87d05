"""EngineCoreClient against real headless vLLM CPU engines, checked against vLLM's offline API.

Two engines come from one ``vllm serve --headless --data-parallel-size 2`` launcher and are shared
by every test in this module (engine start-up is slow on CPU); the test that kills an engine runs
last. Expected token ids and logprobs come from ``vllm.LLM.generate`` (tests/support/reference.py).
"""

from __future__ import annotations

import asyncio
import json
import math
import pathlib
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from tests.support.engines import HeadlessEngines, free_port, headless_engines
from tests.support.reference import ReferenceResult, declare_reference

from vllm_frontend.engine.client import (
    EngineCoreClient,
    EngineDeadError,
    InvalidRequestError,
    RequestStream,
    UtilityCallError,
)
from vllm_frontend.engine.protocol import (
    EngineCoreOutput,
    EngineCoreRequest,
    FinishReason,
    SamplingParams,
)

pytestmark = pytest.mark.engine

PROMPTS = [
    [128000, 9906, 1917],  # <|begin_of_text|>Hello world
    [128000, 791, 4062, 14198, 39935, 35308, 927, 279, 16053, 5679, 13],
    [128000, 40, 1093, 311, 1518, 264, 2697, 3363],
    [128000, 16, 11, 220, 17, 11, 220, 18, 11, 220],
]
# vLLM SamplingParams arguments; ignore_eos keeps the end-of-sequence policy (the text layer's
# job) out of the comparison, while the eos ids still take part in min_tokens masking.
CASES: list[tuple[list[int], dict[str, Any]]] = [
    (PROMPTS[0], {"temperature": 0.0, "max_tokens": 12, "ignore_eos": True}),
    (PROMPTS[1], {"temperature": 0.0, "max_tokens": 16, "min_tokens": 5, "ignore_eos": True}),
    (
        PROMPTS[2],
        {
            "temperature": 0.0,
            "max_tokens": 10,
            "repetition_penalty": 1.3,
            "presence_penalty": 0.5,
            "frequency_penalty": 0.2,
            "ignore_eos": True,
        },
    ),
    (
        PROMPTS[3],
        {
            "temperature": 0.8,
            "seed": 1234,
            "top_k": 20,
            "top_p": 0.9,
            "max_tokens": 10,
            "ignore_eos": True,
        },
    ),
]
LOGPROB_CASE = (
    PROMPTS[1],
    {"temperature": 0.0, "max_tokens": 6, "logprobs": 3, "prompt_logprobs": 2, "ignore_eos": True},
)


@dataclass
class Deployment:
    runner: asyncio.Runner
    client: EngineCoreClient
    engines: HeadlessEngines
    eos_ids: list[int]

    def run(self, coro: Any, timeout: float = 120.0) -> Any:
        return self.runner.run(asyncio.wait_for(coro, timeout))


REFERENCES = declare_reference(
    [p for p, _ in [*CASES, LOGPROB_CASE]], [s for _, s in [*CASES, LOGPROB_CASE]]
)


@pytest.fixture(scope="module")
def references() -> list[ReferenceResult]:
    return REFERENCES.results()


@pytest.fixture(scope="module")
def deployment(tiny_model: pathlib.Path) -> Iterator[Deployment]:
    eos = json.loads((tiny_model / "generation_config.json").read_text())["eos_token_id"]
    with asyncio.Runner() as runner, headless_engines(free_port(), count=2) as engines:

        async def launcher_exited() -> str:
            while all(launcher.is_running() for _, launcher in engines.launchers):
                await asyncio.sleep(0.5)
            return "an engine launcher exited; logs: " + ", ".join(map(str, engines.log_paths()))

        try:
            client = runner.run(
                EngineCoreClient.connect(
                    engines.handshake_address,
                    engine_count=2,
                    ready_timeout_s=400,
                    process_watcher=launcher_exited,
                    vocab_size=128256,
                    max_logprobs=20,
                )
            )
        except Exception as exc:
            raise RuntimeError(f"engines did not come up: {exc}\n{engines.logs()}") from exc
        try:
            yield Deployment(runner, client, engines, list(eos))
        finally:
            runner.run(client.close())


def make_request(
    deployment: Deployment, request_id: str, prompt: list[int], **sampling: Any
) -> EngineCoreRequest:
    rank = sampling.pop("data_parallel_rank", None)
    params = SamplingParams(**sampling, all_stop_token_ids=list(deployment.eos_ids))
    return EngineCoreRequest(
        request_id, list(prompt), None, params, None, time.time(), None, None, rank
    )


async def collect(stream: RequestStream) -> list[EngineCoreOutput]:
    return [out async for out in stream]


def tokens(outputs: list[EngineCoreOutput]) -> list[int]:
    return [t for out in outputs for t in out.new_token_ids]


# --------------------------------------------------------------------------------------------


def test_registration_reports_the_engines(deployment: Deployment) -> None:
    client = deployment.client
    assert client.engine_indices == [0, 1]
    assert client.max_model_len == 2048
    regs = client.registrations
    assert {regs[i].data_parallel_rank for i in (0, 1) if regs[i]} == {0, 1}
    assert all(r is not None and r.vllm_version for r in regs.values())
    assert client.num_gpu_blocks > 0
    assert "generate" in (client.limits.supported_tasks or ())


def test_generation_matches_vllms_offline_reference(
    deployment: Deployment, references: list[ReferenceResult]
) -> None:
    async def main() -> list[list[EngineCoreOutput]]:
        streams = [
            deployment.client.add_request(make_request(deployment, f"gen-{i}", prompt, **params))
            for i, (prompt, params) in enumerate(CASES)
        ]
        return list(await asyncio.gather(*(collect(s) for s in streams)))

    results = deployment.run(main())
    for (_, params), outputs, expected in zip(CASES, results, references, strict=False):
        assert tokens(outputs) == expected.token_ids, params
        assert outputs[-1].finish_reason is FinishReason.LENGTH
        assert expected.outputs[0].finish_reason == "length"


def test_logprobs_and_prompt_logprobs_agree_with_the_reference(
    deployment: Deployment, references: list[ReferenceResult]
) -> None:
    expected = references[-1]
    prompt, params = LOGPROB_CASE
    stream = deployment.client.add_request(make_request(deployment, "logprobs", prompt, **params))
    outputs = deployment.run(collect(stream))
    assert tokens(outputs) == expected.token_ids

    # Sample logprobs: row p = [sampled token, top candidates...]; the engine may send wider
    # rows than requested (the widest request in the step), so keep logprobs + 1 columns.
    width = params["logprobs"] + 1
    rows: list[tuple[list[int], list[float], int]] = []
    for out in outputs:
        lp = out.new_logprobs
        assert lp is not None
        ids, values, ranks = (
            lp.logprob_token_ids.numpy(),
            lp.logprobs.numpy(),
            lp.sampled_token_ranks.numpy(),
        )
        for p in range(len(out.new_token_ids)):
            rows.append(
                (
                    [int(t) for t in ids[p, :width]],
                    [float(v) for v in values[p, :width]],
                    int(ranks[p]),
                )
            )
    assert expected.outputs[0].logprobs is not None
    assert len(rows) == len(expected.outputs[0].logprobs)
    for (ids, values, rank), ref in zip(rows, expected.outputs[0].logprobs, strict=True):
        assert set(ids) == set(ref)
        for token, value in zip(ids, values, strict=True):
            assert math.isclose(value, ref[token].logprob, abs_tol=1e-4), (token, value, ref[token])
        assert rank == ref[ids[0]].rank

    # Prompt logprobs arrive once, on the output that completes the prefill.
    with_prompt = [o for o in outputs if o.new_prompt_logprobs_tensors is not None]
    assert len(with_prompt) == 1
    plp = with_prompt[0].new_prompt_logprobs_tensors
    assert plp is not None
    ids, values = plp.logprob_token_ids.numpy(), plp.logprobs.numpy()
    ranks = plp.selected_token_ranks.numpy()
    ref_rows = expected.prompt_logprobs
    assert ref_rows is not None and ref_rows[0] is None
    assert ids.shape[0] == len(prompt) - 1 == len(ref_rows) - 1
    pwidth = params["prompt_logprobs"] + 1
    for r, ref in enumerate(ref_rows[1:]):
        assert ref is not None
        assert int(ids[r, 0]) == prompt[r + 1]
        row_ids = [int(t) for t in ids[r, :pwidth]]
        assert set(row_ids) == set(ref)
        for token, value in zip(row_ids, values[r, :pwidth], strict=True):
            assert math.isclose(float(value), ref[token].logprob, abs_tol=1e-4)
        assert int(ranks[r]) == ref[prompt[r + 1]].rank


def test_abort_mid_stream_ends_with_abort_and_the_engine_runs_nothing(
    deployment: Deployment,
) -> None:
    client = deployment.client

    async def main() -> None:
        stream = client.add_request(
            make_request(
                deployment,
                "abort-me",
                PROMPTS[0],
                temperature=0.0,
                max_tokens=1500,
                ignore_eos=True,
                data_parallel_rank=1,
            )
        )
        first = await anext(stream)
        assert first.new_token_ids
        before = client.scheduler_stats().get(1)
        assert client.abort("abort-me")
        rest = await collect(stream)
        assert rest[-1].finish_reason is FinishReason.ABORT
        # The engine steps once more to retire the aborted request; its stats then show it idle.
        stats = await client.wait_for_scheduler_stats(
            lambda s: (
                s.get(1) is not before and s[1].num_running_reqs == 0 and s[1].num_waiting_reqs == 0
            ),
            timeout=60,
        )
        assert stats[1].num_running_reqs == 0
        assert client.load()[1].in_flight == 0

    deployment.run(main())


def test_utility_calls_round_trip_and_unknown_methods_fail_clearly(
    deployment: Deployment,
) -> None:
    client = deployment.client

    async def main() -> None:
        assert await client.call_utility_all("is_sleeping") == [False, False]
        assert await client.call_utility("reset_prefix_cache", engine=1) is True
        with pytest.raises(UtilityCallError, match="no_such_method") as info:
            await client.call_utility("no_such_method", engine=0)
        assert info.value.engine_index == 0
        # The engine is unharmed.
        assert await client.call_utility("is_sleeping", engine=0) is False

    deployment.run(main())


def test_requests_spread_over_both_engines_and_a_pinned_rank_is_honoured(
    deployment: Deployment, references: list[ReferenceResult]
) -> None:
    client = deployment.client
    prompt, params = CASES[0]

    async def main() -> tuple[list[RequestStream], list[RequestStream]]:
        spread = [
            client.add_request(make_request(deployment, f"spread-{i}", prompt, **params))
            for i in range(4)
        ]
        pinned = [
            client.add_request(
                make_request(deployment, f"pinned-{i}", prompt, **params, data_parallel_rank=1)
            )
            for i in range(3)
        ]
        results = await asyncio.gather(*(collect(s) for s in spread + pinned))
        for outputs in results:
            assert tokens(outputs) == references[0].token_ids
        return spread, pinned

    spread, pinned = deployment.run(main())
    # served_by is the engine_index the engine itself stamped on the final output.
    assert {s.served_by for s in spread} == {0, 1}
    assert [s.served_by for s in pinned] == [1, 1, 1]


def test_invalid_requests_are_refused_before_sending_and_the_engine_keeps_serving(
    deployment: Deployment, references: list[ReferenceResult]
) -> None:
    client = deployment.client
    prompt, params = CASES[0]

    async def main() -> None:
        live = client.add_request(
            make_request(
                deployment, "dup", prompt, temperature=0.0, max_tokens=1500, ignore_eos=True
            )
        )
        with pytest.raises(InvalidRequestError, match="already in flight"):
            client.add_request(make_request(deployment, "dup", prompt, **params))
        for bad in (
            {"temperature": 0.0, "n": 2, "max_tokens": 4},
            {"top_p": 0.0, "max_tokens": 4},
            {"stop": [""], "max_tokens": 4},
            {"max_tokens": 4, "stop_token_ids": [128256]},
            {"max_tokens": 4, "logprobs": 21},
        ):
            with pytest.raises(InvalidRequestError):
                client.add_request(make_request(deployment, "bad", prompt, **bad))
        with pytest.raises(InvalidRequestError, match="data_parallel_rank"):
            client.add_request(
                make_request(deployment, "rank", prompt, **params, data_parallel_rank=2)
            )
        await live.aclose()
        for rank in (0, 1):
            outputs = await collect(
                client.add_request(
                    make_request(
                        deployment, f"after-{rank}", prompt, **params, data_parallel_rank=rank
                    )
                )
            )
            assert tokens(outputs) == references[0].token_ids
        assert not client.is_dead

    deployment.run(main())


def test_killing_an_engine_fails_every_stream_and_refuses_new_requests(
    deployment: Deployment,
) -> None:
    # Runs last: it takes the shared engines down.
    client = deployment.client

    async def main() -> None:
        streams = [
            client.add_request(
                make_request(
                    deployment,
                    f"doomed-{i}",
                    PROMPTS[i % 4],
                    temperature=0.0,
                    max_tokens=1900,
                    ignore_eos=True,
                    data_parallel_rank=i % 2,
                )
            )
            for i in range(4)
        ]
        # The tiny model can write 1900 tokens in about a second, so a loaded machine could let
        # engine 1 finish before a plain kill. Freeze it as soon as it has started, let the
        # outputs it already sent arrive, and only then kill it: whatever is unfinished by then
        # can only end by the death.
        await anext(streams[1])
        deployment.engines.kill_engine(1, signal.SIGSTOP)
        await asyncio.sleep(0.5)
        doomed = [s for s in streams if s.engine_index == 1 and not s.finished]
        assert doomed, "engine 1 finished both requests before it could be stopped"
        deployment.engines.kill_engine(1, signal.SIGKILL)
        for stream in streams:
            if stream in doomed:
                with pytest.raises(EngineDeadError):
                    await collect(stream)
            else:
                # The shared launcher reacts to the kill by shutting engine 0 down, which
                # aborts its requests; that ABORT may arrive before the death is noticed, and
                # on a fast run a request may even finish its 1900 tokens first.
                try:
                    outputs = await collect(stream)
                except EngineDeadError:
                    continue
                assert outputs[-1].finish_reason in (FinishReason.ABORT, FinishReason.LENGTH)
        assert client.is_dead
        assert client.dead_error is not None
        with pytest.raises(EngineDeadError):
            client.add_request(make_request(deployment, "too-late", PROMPTS[0], max_tokens=2))
        with pytest.raises(EngineDeadError):
            await client.call_utility("is_sleeping")

    # The timeout only guards against a hang; death is noticed as soon as the socket closes.
    deployment.run(main(), timeout=60)

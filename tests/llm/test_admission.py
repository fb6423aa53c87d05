"""Admission limits (``--max-num-queued-reqs`` / ``--max-num-queued-tokens``).

The decision is compared with vLLM's own ``AsyncLLM.check_admission`` over a grid of limits and
counts; the counting (what is in flight, what is still in prefill) is checked through the llm
layer against a scripted engine; the cross-process counts through two mappings of one file.
"""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from tests.llm.test_generate import Params, ScriptedEngine, _llm

from vllm_frontend.llm import GenerateRequest
from vllm_frontend.llm.admission import (
    AdmissionControl,
    AdmissionRejected,
    SharedRequestCounts,
)
from vllm_frontend.llm.generate import LLM


def _vllm_decision(
    max_reqs: int | None, max_tokens: int | None, requests: int, tokens: int, n: int
) -> tuple[str | None, str | None]:
    """(reason, message) of vLLM's check_admission for these counts (None, None: admitted)."""
    from vllm.exceptions import GracefulHTTPError
    from vllm.v1.engine.async_llm import AsyncLLM

    rejected: list[str] = []
    fake = SimpleNamespace(
        scheduler_config=SimpleNamespace(
            max_num_queued_reqs=max_reqs, max_num_queued_tokens=max_tokens
        ),
        admission_stats=None,
        get_num_unfinished_requests=lambda: requests,
        get_num_queued_tokens=lambda: tokens,
        _record_admission_rejection=rejected.append,
    )
    try:
        AsyncLLM.check_admission(fake, n)  # type: ignore[arg-type]
    except GracefulHTTPError as e:
        assert int(e.http_status) == 503
        return rejected[0], e.message
    return None, None


@pytest.mark.oracle
def test_decisions_match_vllm() -> None:
    pytest.importorskip("vllm")
    limits = (None, 0, 1, 3)
    for max_reqs, max_tokens, requests, tokens, n in itertools.product(
        limits, (None, 0, 5, 40), range(5), (0, 4, 5, 40), (1, 2, 4)
    ):
        reasons: list[str] = []
        control = AdmissionControl(max_reqs, max_tokens, on_reject=reasons.append)
        control.requests, control.prefill_tokens = requests, tokens
        try:
            control.check(n)
            ours: tuple[str | None, str | None] = (None, None)
        except AdmissionRejected as e:
            assert reasons == [e.reason]
            ours = (e.reason, e.message)
        case = (max_reqs, max_tokens, requests, tokens, n)
        assert ours == _vllm_decision(*case), case


def _admitting_llm(engine: ScriptedEngine, **limits: Any) -> tuple[LLM, AdmissionControl]:
    control = AdmissionControl(**limits)
    llm = _llm(engine)
    llm.admission = control
    return llm, control


def _request(n: int = 1, prompt_len: int = 7, request_id: str = "r") -> GenerateRequest:
    return GenerateRequest(
        request_id=request_id,
        prompt_token_ids=list(range(prompt_len)),
        sampling_params=Params(n=n),
        n=n,
    )


def test_counts_follow_requests_through_prefill_and_finish() -> None:
    asyncio.run(_test_counts_follow_requests_through_prefill_and_finish())


async def _test_counts_follow_requests_through_prefill_and_finish() -> None:
    engine = ScriptedEngine(steps=3)
    llm, control = _admitting_llm(engine, max_requests=10, max_prefill_tokens=100)
    async with llm.generate(_request(n=2, prompt_len=7)) as stream:
        assert (control.requests, control.prefill_tokens) == (2, 14)
        outputs = [out async for out in stream]
    assert len(outputs) == 6
    assert (control.requests, control.prefill_tokens) == (0, 0)
    async with llm.generate(_request(prompt_len=7)) as stream:
        seen = []
        async for out in stream:
            # The first output ends the prefill; the place is held until the last one.
            seen.append((control.requests, control.prefill_tokens, out.finish_reason))
    assert seen == [(1, 0, None), (1, 0, None), (0, 0, "length")]


def test_a_stream_closed_early_releases_its_places() -> None:
    asyncio.run(_test_a_stream_closed_early_releases_its_places())


async def _test_a_stream_closed_early_releases_its_places() -> None:
    engine = ScriptedEngine(steps=2, finish=None, block=True)
    llm, control = _admitting_llm(engine, max_requests=1)
    async with llm.generate(_request()) as stream:
        assert control.requests == 1
        with pytest.raises(AdmissionRejected):
            llm.check_admission(1)
        await stream.__aiter__().__anext__()
    assert (control.requests, control.prefill_tokens) == (0, 0)
    assert len(engine.aborted) == 1
    llm.check_admission(1)


def test_start_checks_again_and_sends_nothing_when_refused() -> None:
    asyncio.run(_test_start_checks_again_and_sends_nothing_when_refused())


async def _test_start_checks_again_and_sends_nothing_when_refused() -> None:
    engine = ScriptedEngine(steps=1, finish=None, block=True)
    llm, control = _admitting_llm(engine, max_requests=2)
    first = llm.generate(_request(n=1, request_id="a"))
    llm.check_admission(2)  # passes now: nothing in flight
    first.start()
    second = llm.generate(_request(n=2, request_id="b"))
    with pytest.raises(AdmissionRejected) as info:
        second.start()
    assert info.value.reason == "max_num_queued_reqs"
    await second.aclose()
    assert [r.external_req_id for r in engine.added] == ["a"]
    assert control.requests == 1
    await first.aclose()
    assert control.requests == 0


def test_prefill_backlog_refuses_until_a_first_output() -> None:
    asyncio.run(_test_prefill_backlog_refuses_until_a_first_output())


async def _test_prefill_backlog_refuses_until_a_first_output() -> None:
    engine = ScriptedEngine(steps=2, finish=None, block=True)
    llm, control = _admitting_llm(engine, max_prefill_tokens=5)
    stream = llm.generate(_request(prompt_len=5))
    stream.start()
    with pytest.raises(AdmissionRejected) as info:
        llm.check_admission()
    assert info.value.reason == "max_num_queued_tokens"
    await stream.__aiter__().__anext__()
    llm.check_admission()
    await stream.aclose()
    assert control.prefill_tokens == 0


def test_no_limits_no_accounting() -> None:
    asyncio.run(_test_no_limits_no_accounting())


async def _test_no_limits_no_accounting() -> None:
    engine = ScriptedEngine(steps=2)
    llm = LLM(engine, lambda **kw: SimpleNamespace(**kw), admission=AdmissionControl())
    assert llm.admission is None
    llm.check_admission(10**6)


def test_shared_counts_add_up_over_processes(tmp_path: Path) -> None:
    path = tmp_path / "admission"
    a = SharedRequestCounts(path, 0, 3)
    b = SharedRequestCounts(path, 2, 3)
    try:
        a.publish(4)
        b.publish(5)
        assert a.total() == b.total() == 9
        control = AdmissionControl(max_requests=10, shared=b)
        control.started(1)  # b's own count becomes 1: 4 + 1
        assert a.total() == 5
        control.check(5)
        with pytest.raises(AdmissionRejected):
            control.check(6)
    finally:
        a.close()
        b.close()
    with pytest.raises(ValueError):
        SharedRequestCounts(path, 3, 3)

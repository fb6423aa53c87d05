"""What a frontend sees from the mock engine's steps, decoded with vLLM's own decoder."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest
import torch
from vllm.v1.engine import EngineCoreEventType, FinishReason

from tests.mock.fake_frontend import FakeFrontend, connected, make_request, paused
from vllm_frontend.mock.core import MockEngineOptions
from vllm_frontend.mock.engine import MockEngineGroup, step_wait

pytestmark = pytest.mark.oracle  # imports vLLM or transformers as the reference


def test_a_request_streams_max_tokens_then_finishes_with_length(
    mock_pair: tuple[FakeFrontend, MockEngineGroup],
) -> None:
    frontend, _ = mock_pair
    frontend.add(make_request("r", [5, 6, 7, 8], max_tokens=7))
    outs = frontend.run_until_finished(["r"])[0]["r"]
    tokens = [t for o in outs for t in o.new_token_ids]
    assert len(tokens) == 7
    assert [len(o.new_token_ids) for o in outs] == [1] * 7
    assert all(0 <= t < 128000 for t in tokens)
    assert [o.finish_reason for o in outs] == [None] * 6 + [FinishReason.LENGTH]
    # prefill_stats and the QUEUED/SCHEDULED events come once, on the first output.
    assert outs[0].prefill_stats is not None
    assert outs[0].prefill_stats.num_prompt_tokens == 4
    assert [e.type for e in outs[0].events] == [
        EngineCoreEventType.QUEUED,
        EngineCoreEventType.SCHEDULED,
    ]
    assert all(o.prefill_stats is None and o.events is None for o in outs[1:])


def test_tokens_per_step_arrive_together_and_stop_exactly_at_max_tokens() -> None:
    with connected(MockEngineOptions(step_ms=1, tokens_per_step=4, vocab_size=50)) as (fe, _):
        fe.add(make_request("r", [1], max_tokens=10))
        outs = fe.run_until_finished(["r"])[0]["r"]
    assert [len(o.new_token_ids) for o in outs] == [4, 4, 2]
    assert all(0 <= t < 50 for o in outs for t in o.new_token_ids)


def test_generation_stops_at_max_model_len() -> None:
    with connected(MockEngineOptions(step_ms=0, max_model_len=16)) as (fe, _):
        fe.add(make_request("r", list(range(10)), max_tokens=100))
        outs = fe.run_until_finished(["r"])[0]["r"]
    assert sum(len(o.new_token_ids) for o in outs) == 6
    assert outs[-1].finish_reason == FinishReason.LENGTH


def test_one_message_per_step_carries_every_running_request() -> None:
    with connected(MockEngineOptions(step_ms=2)) as (fe, _):
        ids = [f"r{i}" for i in range(30)]
        with paused(fe):  # queue them all so that they run in the same steps
            for rid in ids:
                fe.add(make_request(rid, [1, 2], max_tokens=3))
        per_request, messages = fe.run_until_finished(ids)
    assert all(len(per_request[rid]) == 3 for rid in ids)
    assert [len(m.outputs) for m in messages] == [30, 30, 30]
    assert all(m.engine_index == 0 and m.weight_version == "default" for m in messages)


def test_scheduler_stats_count_running_and_waiting_requests() -> None:
    with connected(MockEngineOptions(step_ms=5, max_num_seqs=2)) as (fe, _):
        with paused(fe):  # queue all five, so that the first step sees them all
            for i in range(5):
                fe.add(make_request(f"r{i}", [1, 2, 3], max_tokens=4))
        _, messages = fe.run_until_finished([f"r{i}" for i in range(5)])
    stats = [m.scheduler_stats for m in messages if m.scheduler_stats is not None]
    assert len(stats) == len(messages)  # stats with every step
    pairs = [(s.num_running_reqs, s.num_waiting_reqs) for s in stats]
    assert pairs[0] == (2, 3)
    assert all(running <= 2 for running, _ in pairs)
    assert pairs[-1] == (0, 0)
    assert 0 < stats[0].kv_cache_usage < 1
    assert stats[0].prefix_cache_stats.requests == 2


def test_disabled_stats_send_no_scheduler_stats_or_events() -> None:
    with connected(MockEngineOptions(step_ms=1, log_stats=False)) as (fe, _):
        fe.add(make_request("r", [1, 2], max_tokens=3))
        per_request, messages = fe.run_until_finished(["r"])
    assert all(m.scheduler_stats is None for m in messages)
    assert all(o.events is None for o in per_request["r"])


def test_an_aborted_request_gets_no_more_output_and_others_continue() -> None:
    with connected(MockEngineOptions(step_ms=2)) as (fe, _):
        fe.add(make_request("victim", [1, 2], max_tokens=10_000))
        assert "victim" in {o.request_id for o in fe.recv().outputs}
        with paused(fe) as before:
            fe.abort(["victim"])
            fe.add(make_request("survivor", [1, 2], max_tokens=5))
        per_request, messages = fe.run_until_finished(["survivor"])
    # vLLM's engine sends nothing at all for a client abort (no finish reason either).
    assert "victim" not in per_request
    assert all(o.finish_reason is None for m in before for o in m.outputs)
    assert sum(len(o.new_token_ids) for o in per_request["survivor"]) == 5
    assert messages[-1].scheduler_stats.num_running_reqs == 0


def test_after_a_client_abort_the_stats_drop_to_zero_running() -> None:
    # vLLM's engine runs one more step for finished/aborted requests, so frontends' metrics
    # see the request count fall even when nothing else is running.
    with connected(MockEngineOptions(step_ms=2)) as (fe, _):
        fe.add(make_request("r", [1], max_tokens=10**6))
        fe.recv()
        fe.abort(["r"])
        while True:
            msg = fe.recv()
            assert all(o.finish_reason is None for o in msg.outputs)
            if msg.scheduler_stats is not None and msg.scheduler_stats.num_running_reqs == 0:
                break


def test_stop_token_ids_finish_with_stop_and_report_the_token() -> None:
    with connected(MockEngineOptions(step_ms=0, vocab_size=3)) as (fe, _):
        fe.add(make_request("r", [0], max_tokens=1000, stop_token_ids=[2]))
        outs = fe.run_until_finished(["r"])[0]["r"]
    tokens = [t for o in outs for t in o.new_token_ids]
    assert outs[-1].finish_reason == FinishReason.STOP
    assert outs[-1].stop_reason == 2
    assert tokens[-1] == 2 and 2 not in tokens[:-1]


def test_eos_finishes_with_stop_but_not_before_min_tokens() -> None:
    with connected(MockEngineOptions(step_ms=0, vocab_size=4, tokens_per_step=3)) as (fe, _):
        fe.add(make_request("r", [3], eos=1, stop_token_ids=[2], max_tokens=1000, min_tokens=20))
        outs = fe.run_until_finished(["r"])[0]["r"]
    tokens = [t for o in outs for t in o.new_token_ids]
    # Stop ids are masked while fewer than min_tokens were generated, like vLLM's sampler.
    assert not {1, 2} & set(tokens[:20])
    assert outs[-1].finish_reason == FinishReason.STOP
    assert tokens[-1] in (1, 2)
    assert outs[-1].stop_reason == (None if tokens[-1] == 1 else 2)
    assert len(tokens) >= 21


def test_ignore_eos_runs_to_max_tokens() -> None:
    with connected(MockEngineOptions(step_ms=0, vocab_size=2)) as (fe, _):
        # vLLM's frontend implements ignore_eos by leaving _eos_token_id unset.
        fe.add(make_request("r", [0], eos=1, ignore_eos=True, max_tokens=50))
        outs = fe.run_until_finished(["r"])[0]["r"]
    assert sum(len(o.new_token_ids) for o in outs) == 50
    assert outs[-1].finish_reason == FinishReason.LENGTH


def test_logprobs_are_plausible_and_as_wide_as_the_widest_request_in_the_step() -> None:
    with connected(MockEngineOptions(step_ms=2, tokens_per_step=2)) as (fe, _):
        with paused(fe):
            fe.add(make_request("narrow", [1, 2, 3], max_tokens=6, logprobs=1))
            fe.add(make_request("wide", [1, 2, 3], max_tokens=6, logprobs=5))
            fe.add(make_request("none", [1, 2, 3], max_tokens=6))
        per_request = fe.run_until_finished(["narrow", "wide", "none"])[0]
    assert all(o.new_logprobs is None for o in per_request["none"])
    for rid in ("narrow", "wide"):
        for out in per_request[rid]:
            ids, lps, ranks, cu = out.new_logprobs
            assert ids.dtype == np.int32 and lps.dtype == np.float32 and ranks.dtype == np.int64
            assert ids.shape == lps.shape == (len(out.new_token_ids), 6)
            assert ranks.shape == (len(out.new_token_ids),)
            assert cu is None
            assert ids[:, 0].tolist() == out.new_token_ids
            assert np.all(lps <= 0)
            assert np.all(np.diff(lps[:, 1:], axis=1) <= 0)  # candidates sorted descending
            assert np.all(np.exp(lps[:, 1:]).sum(axis=1) < 1)
            assert np.all(ranks >= 1)
            for row, rank in enumerate(ranks):
                if rank <= 5:
                    assert ids[row, rank] == ids[row, 0]
                    assert lps[row, rank] == lps[row, 0]
                else:
                    assert lps[row, 0] <= lps[row, 5]


def test_prompt_logprobs_arrive_once_as_torch_tensors_even_out_of_band() -> None:
    prompt = list(range(1, 101))  # [99, 3] int32 rows = 1188 bytes: vLLM sends them out-of-band
    with connected() as (fe, _):
        fe.add(make_request("r", prompt, max_tokens=3, prompt_logprobs=2))
        outs = fe.run_until_finished(["r"])[0]["r"]
    tensors = outs[0].new_prompt_logprobs_tensors
    assert all(o.new_prompt_logprobs_tensors is None for o in outs[1:])
    ids, lps, ranks = tensors[:3]
    assert isinstance(ids, torch.Tensor)
    assert (ids.dtype, lps.dtype, ranks.dtype) == (torch.int32, torch.float32, torch.int64)
    assert ids.shape == lps.shape == (99, 3)
    assert ids[:, 0].tolist() == prompt[1:]
    assert torch.all(ranks >= 1)
    assert torch.all(lps[:, 1] >= lps[:, 2])


def test_invalid_requests_finish_with_error_and_the_engine_keeps_serving() -> None:
    with connected() as (fe, _):
        fe.add(make_request("no-max", [1, 2], max_tokens=None))
        fe.add(make_request("bad-token", [1, -5], max_tokens=3))
        # An ADD with a readable id but a malformed body (a real engine's input thread dies).
        fe.add_raw([msgspec.msgpack.encode(["garbled", "not a prompt"])])
        fe.add_raw([b"\xc1 not msgpack"])
        fe.add(make_request("ok", [1, 2], max_tokens=2))
        per_request, messages = fe.run_until_finished(["no-max", "bad-token", "garbled", "ok"])
    for rid in ("no-max", "bad-token", "garbled"):
        assert [o.finish_reason for o in per_request[rid]] == [FinishReason.ERROR]
        assert per_request[rid][0].new_token_ids == []
        assert any(m.finished_requests and rid in m.finished_requests for m in messages)
    assert per_request["ok"][-1].finish_reason == FinishReason.LENGTH


def test_a_duplicate_live_request_id_fails_instead_of_killing_the_engine() -> None:
    with connected(MockEngineOptions(step_ms=5)) as (fe, _):
        fe.add(make_request("dup", [1], max_tokens=1000))
        fe.add(make_request("dup", [1], max_tokens=1000))
        fe.add(make_request("ok", [1], max_tokens=3))
        per_request, _ = fe.run_until_finished(["dup", "ok"])
    assert per_request["dup"][-1].finish_reason == FinishReason.ERROR
    assert per_request["ok"][-1].finish_reason == FinishReason.LENGTH


def test_outputs_go_to_the_client_named_by_client_index() -> None:
    with connected(num_clients=2) as (fe, _):
        fe.add(make_request("a", [1], client_index=0, max_tokens=3))
        fe.add(make_request("b", [1], client_index=1, max_tokens=3))
        on_0 = fe.run_until_finished(["a"], client=0)[0]
        on_1 = fe.run_until_finished(["b"], client=1)[0]
    assert set(on_0) == {"a"}
    assert set(on_1) == {"b"}


def test_each_engine_of_a_process_serves_its_own_requests() -> None:
    options = MockEngineOptions(step_ms=1, data_parallel_size=3)
    with connected(options, engines=(1, 2)) as (fe, _):
        fe.add(make_request("x", [1], max_tokens=2), engine=1)
        fe.add(make_request("y", [1], max_tokens=2), engine=2)
        _, messages = fe.run_until_finished(["x", "y"])
    engine_of = {o.request_id: m.engine_index for m in messages for o in m.outputs}
    assert engine_of == {"x": 1, "y": 2}


def test_shutdown_finishes_in_flight_requests_with_abort() -> None:
    with connected(MockEngineOptions(step_ms=5)) as (fe, group):
        fe.add(make_request("r", [1], max_tokens=100_000))
        fe.recv()
        group.stop()
        per_request, _ = fe.run_until_finished(["r"])
    assert per_request["r"][-1].finish_reason == FinishReason.ABORT


def test_zero_ms_steps_produce_tokens_as_fast_as_possible() -> None:
    with connected(MockEngineOptions(step_ms=0, tokens_per_step=1)) as (fe, _):
        fe.add(make_request("r", [1], max_tokens=2000))
        outs = fe.run_until_finished(["r"])[0]["r"]
    assert len(outs) == 2000
    assert outs[-1].finish_reason == FinishReason.LENGTH


@pytest.mark.parametrize(
    ("remaining_s", "precise", "expected"),
    [
        # Whole-millisecond polls, rounded up: a step 1.5 ms away waits 2 ms, 0.2 ms away 1 ms.
        (1.5e-3, False, (2, 0.0)),
        (0.2e-3, False, (1, 0.0)),
        (0.0, False, (0, 0.0)),
        (-0.4e-3, False, (0, 0.0)),  # overdue: no wait
        # Precise: the whole milliseconds that fit are polled, a last fraction is slept out.
        (1.5e-3, True, (1, 0.0)),
        (2.0e-3, True, (2, 0.0)),
        (0.5e-3, True, (0, 0.5e-3)),
        (0.0, True, (0, 0.0)),
        (-0.4e-3, True, (0, 0.0)),
    ],
)
def test_a_busy_engine_waits_for_its_next_step(
    remaining_s: float, precise: bool, expected: tuple[int, float]
) -> None:
    # (The wait itself, not a measured step clock: a loaded machine would make timings flaky.)
    assert step_wait(remaining_s, precise) == expected


def test_precise_steps_run_a_fractional_period_to_the_end() -> None:
    # A 1.5 ms period with precise steps still produces every token and finishes.
    options = MockEngineOptions(step_ms=1.5, precise_steps=True)
    with connected(options) as (fe, _):
        fe.add(make_request("r", [1, 2], max_tokens=40))
        outs = fe.run_until_finished(["r"])[0]["r"]
    assert sum(len(o.new_token_ids) for o in outs) == 40
    assert outs[-1].finish_reason == FinishReason.LENGTH

"""The mock engine joins a frontend's handshake with the bytes a headless vLLM 0.32 engine sends."""

from __future__ import annotations

import dataclasses
import json

import msgspec
import pytest
from vllm.v1.engine import EngineCoreReadyResponse

from tests.mock.fake_frontend import connected, make_request
from tests.support.fixtures import PROTOCOL_VECTORS
from vllm_frontend.engine.codec import encode_registration
from vllm_frontend.mock.core import MockEngineOptions, registration_message

pytestmark = pytest.mark.oracle  # imports vLLM or transformers as the reference

VECTORS = PROTOCOL_VECTORS


def _vector(name: str, frame: int) -> bytes:
    return (VECTORS / f"{name}.frame{frame}.bin").read_bytes()


def test_hello_and_ready_are_byte_identical_to_a_headless_engine() -> None:
    with connected() as (frontend, _):
        shake = frontend.handshake_result
        assert shake.hello[0] == _vector("handshake_hello_headless", 1)
        assert shake.ready[0] == _vector("handshake_ready_headless", 1)


def test_engine_identity_is_the_two_byte_little_endian_index() -> None:
    assert _vector("handshake_hello_headless", 0) == (0).to_bytes(2, "little")
    with connected(engines=(0, 258), options=MockEngineOptions(data_parallel_size=259)) as (
        frontend,
        _,
    ):
        # FakeFrontend asserts every identity is an expected one; both registered on the input.
        assert set(frontend.handshake_result.ready) == {0, 258}
        assert {eng for _, eng in frontend.handshake_result.registration} == {0, 258}


def test_ready_carries_a_parallel_config_hash_with_data_parallelism() -> None:
    vector = msgspec.msgpack.decode(_vector("handshake_ready_dp", 1))
    with connected(engines=(0, 1), options=MockEngineOptions(data_parallel_size=2)) as (
        frontend,
        _,
    ):
        ready = {i: msgspec.msgpack.decode(b) for i, b in frontend.handshake_result.ready.items()}
    assert list(ready[1]) == list(vector)  # same keys, same order
    assert {k: v for k, v in ready[1].items() if k != "parallel_config_hash"} == {
        k: v for k, v in vector.items() if k != "parallel_config_hash"
    }
    # vLLM's frontend checks that every engine of one deployment reports the same hash.
    assert ready[0]["parallel_config_hash"] == ready[1]["parallel_config_hash"]


def test_registration_has_vllms_25_keys_in_order_and_decodes_with_vllm() -> None:
    options = MockEngineOptions(max_model_len=2048, vocab_size=1000)
    with connected(options=options, engines=(0, 1), num_clients=2) as (frontend, _):
        shake = frontend.handshake_result
        # Every engine registers on every client's input socket.
        assert set(shake.registration) == {(0, 0), (0, 1), (1, 0), (1, 1)}
        raw = msgspec.msgpack.decode(shake.registration[(0, 1)])
        assert list(raw) == [f.name for f in dataclasses.fields(EngineCoreReadyResponse)]
        reg = shake.registration_of(engine=1, client=0)
    assert isinstance(reg, EngineCoreReadyResponse)
    assert reg.max_model_len == 2048
    assert reg.data_parallel_rank == 1
    assert reg.vllm_version == "0.32.0"
    assert reg.block_size == 16
    assert reg.num_gpu_blocks * reg.block_size >= 1_000_000  # plenty of KV room for load tests


def test_registration_bytes_match_the_vllm_vector_for_the_same_configuration() -> None:
    decoded = json.loads((VECTORS / "manifest.json").read_text())
    vector = next(v for v in decoded["vectors"] if v["name"] == "engine_registration")["decoded"]
    options = MockEngineOptions(
        max_model_len=vector["max_model_len"],
        num_gpu_blocks=vector["num_gpu_blocks"],
        block_size=vector["block_size"],
        max_num_seqs=vector["max_num_seqs"],
        max_num_batched_tokens=vector["max_num_batched_tokens"],
        dtype=vector["dtype"],
    )
    ours = encode_registration(registration_message(options, 0, instance_id=vector["instance_id"]))
    assert ours == _vector("engine_registration", 1)


def test_engine_serves_after_a_coordinator_gate_and_publishes_its_load() -> None:
    with connected(coordinator=True) as (frontend, _):
        frontend.add(make_request("r", [1, 2, 3], max_tokens=3))
        per_request, messages = frontend.run_until_finished(["r"])
        counts = []
        while not counts or counts[-1] != (0, 0):
            stats = frontend.recv_coordinator().scheduler_stats
            counts.append((stats.num_running_reqs, stats.num_waiting_reqs))
    # (running, waiting) as published to the coordinator whenever they change.
    assert (1, 0) in counts
    assert per_request["r"][-1].finish_reason is not None
    # With a coordinator (vLLM's internal DP load balancing) finished ids ride on steps.
    assert any(m.finished_requests and "r" in m.finished_requests for m in messages)

"""The sans-IO startup handshake, driven with the bytes vLLM's own engines send."""

from __future__ import annotations

import json

import msgspec
import pytest
from tests.support.fixtures import PROTOCOL_VECTORS

from vllm_frontend.engine.handshake import (
    EngineHandshake,
    EngineState,
    HandshakeError,
    HandshakeTimeoutError,
    engine_index_of,
)
from vllm_frontend.engine.protocol import EngineZmqAddresses

VECTORS = PROTOCOL_VECTORS


def _frames(name: str) -> list[bytes]:
    manifest = json.loads((VECTORS / "manifest.json").read_text())
    entry = next(v for v in manifest["vectors"] if v["name"] == name)
    return [(VECTORS / f["file"]).read_bytes() for f in entry["frames"]]


HELLO = _frames("handshake_hello_headless")[1]
READY = _frames("handshake_ready_headless")[1]
READY_DP = _frames("handshake_ready_dp")[1]
REGISTRATION = _frames("engine_registration")[1]
ADDRESSES = EngineZmqAddresses(inputs=["tcp://10.0.0.1:45001"], outputs=["tcp://10.0.0.1:45002"])


def ident(index: int) -> bytes:
    return index.to_bytes(2, "little")


def test_hello_is_answered_with_the_exact_init_bytes_vllm_sends() -> None:
    identity, expected_init = _frames("handshake_init")
    hs = EngineHandshake([0], addresses=ADDRESSES)
    assert hs.receive_handshake(identity, HELLO) == expected_init
    assert hs.state(0) is EngineState.CONNECTED


def test_moe_init_carries_coordinator_addresses_and_parallel_config() -> None:
    identity, expected_init = _frames("handshake_init_dp_moe")
    decoded = msgspec.msgpack.decode(expected_init)
    addresses = EngineZmqAddresses(**decoded["addresses"])
    hs = EngineHandshake([0, 1], addresses=addresses, parallel_config=decoded["parallel_config"])
    assert hs.receive_handshake(identity, HELLO) == expected_init


@pytest.mark.parametrize("registration_first", [True, False])
def test_engine_is_done_after_hello_registration_and_ready_in_either_order(
    registration_first: bool,
) -> None:
    hs = EngineHandshake([0], addresses=ADDRESSES)
    hs.receive_handshake(ident(0), HELLO)
    if registration_first:
        assert hs.receive_registration(ident(0), REGISTRATION) == 0
        assert not hs.complete
        assert hs.receive_handshake(ident(0), READY) is None
    else:
        assert hs.receive_handshake(ident(0), READY) is None
        assert not hs.complete
        hs.receive_registration(ident(0), REGISTRATION)
    assert hs.complete
    reg = hs.registration(0)
    assert reg is not None
    assert (reg.max_model_len, reg.num_gpu_blocks, reg.vllm_version) == (4096, 2048, "0.32.0")


def test_empty_registration_payload_is_accepted_without_information() -> None:
    hs = EngineHandshake([3], addresses=ADDRESSES)
    hs.receive_handshake(ident(3), HELLO)
    hs.receive_registration(ident(3), b"")
    hs.receive_handshake(ident(3), READY)
    assert hs.complete
    assert hs.registration(3) is None


def test_data_parallel_engines_complete_independently() -> None:
    hs = EngineHandshake([2, 3], addresses=ADDRESSES)
    hs.receive_handshake(ident(3), HELLO)
    hs.receive_handshake(ident(2), HELLO)
    hs.receive_registration(ident(3), REGISTRATION)
    hs.receive_handshake(ident(3), READY_DP)
    assert not hs.complete
    assert hs.missing() == ["engine 2 (no READY, no registration)"]
    hs.receive_registration(ident(2), REGISTRATION)
    hs.receive_handshake(ident(2), READY_DP)
    assert hs.complete


def test_message_from_an_engine_nobody_expects_is_a_clear_error() -> None:
    hs = EngineHandshake([0, 1], addresses=ADDRESSES)
    with pytest.raises(HandshakeError, match=r"unexpected engine 5; expected engines 0\.\.1"):
        hs.receive_handshake(ident(5), HELLO)
    with pytest.raises(HandshakeError, match="invalid identity"):
        hs.receive_handshake(b"\x00", HELLO)
    with pytest.raises(HandshakeError, match="unexpected engine 7"):
        hs.receive_registration(ident(7), REGISTRATION)


def test_ready_before_hello_is_a_protocol_error() -> None:
    hs = EngineHandshake([0], addresses=ADDRESSES)
    with pytest.raises(HandshakeError, match="READY before HELLO"):
        hs.receive_handshake(ident(0), READY)


def test_duplicate_hello_is_a_protocol_error() -> None:
    hs = EngineHandshake([0], addresses=ADDRESSES)
    hs.receive_handshake(ident(0), HELLO)
    with pytest.raises(HandshakeError, match="HELLO twice"):
        hs.receive_handshake(ident(0), HELLO)


def test_duplicate_ready_and_registration_are_protocol_errors() -> None:
    hs = EngineHandshake([0], addresses=ADDRESSES)
    hs.receive_handshake(ident(0), HELLO)
    hs.receive_handshake(ident(0), READY)
    hs.receive_registration(ident(0), REGISTRATION)
    with pytest.raises(HandshakeError, match="READY twice"):
        hs.receive_handshake(ident(0), READY)
    with pytest.raises(HandshakeError, match="registered twice"):
        hs.receive_registration(ident(0), REGISTRATION)


def test_registration_before_hello_is_a_protocol_error() -> None:
    hs = EngineHandshake([0], addresses=ADDRESSES)
    with pytest.raises(HandshakeError, match="before its HELLO"):
        hs.receive_registration(ident(0), REGISTRATION)


def test_garbled_handshake_and_registration_payloads_are_protocol_errors() -> None:
    hs = EngineHandshake([0], addresses=ADDRESSES)
    with pytest.raises(HandshakeError, match="undecodable"):
        hs.receive_handshake(ident(0), b"\xc1\xff")
    with pytest.raises(HandshakeError, match="unknown status"):
        hs.receive_handshake(ident(0), msgspec.msgpack.encode({"status": "HI"}))
    with pytest.raises(HandshakeError, match="unknown status"):
        hs.receive_handshake(ident(0), msgspec.msgpack.encode([1, 2]))
    hs.receive_handshake(ident(0), HELLO)
    with pytest.raises(HandshakeError, match="undecodable registration"):
        hs.receive_registration(ident(0), msgspec.msgpack.encode({"max_model_len": "long"}))


def test_engines_disagreeing_on_parallel_config_are_rejected() -> None:
    hs = EngineHandshake([0, 1], addresses=ADDRESSES)
    for i in (0, 1):
        hs.receive_handshake(ident(i), HELLO)
    hs.receive_handshake(ident(0), READY_DP)
    other = msgspec.msgpack.decode(READY_DP)
    other["parallel_config_hash"] = "different"
    with pytest.raises(HandshakeError, match="parallel config hash"):
        hs.receive_handshake(ident(1), msgspec.msgpack.encode(other))


def test_timeout_error_names_every_engine_still_missing() -> None:
    hs = EngineHandshake([0, 1, 2], addresses=ADDRESSES)
    hs.receive_handshake(ident(0), HELLO)
    hs.receive_registration(ident(0), REGISTRATION)
    hs.receive_handshake(ident(0), READY)
    hs.receive_handshake(ident(1), HELLO)
    err = hs.timeout_error(30)
    assert isinstance(err, TimeoutError)
    assert str(err) == (
        "timed out after 30 s waiting for engines to start: "
        "engine 1 (no READY, no registration); engine 2 (no HELLO, no registration)"
    )


def test_inherited_listeners_need_only_registrations() -> None:
    hs = EngineHandshake(range(2, 4))
    assert hs.missing() == ["engine 2 (no registration)", "engine 3 (no registration)"]
    hs.receive_registration(ident(3), REGISTRATION)
    hs.receive_registration(ident(2), REGISTRATION)
    assert hs.complete
    with pytest.raises(HandshakeError, match="not the owner"):
        hs.receive_handshake(ident(2), HELLO)
    with pytest.raises(HandshakeTimeoutError):
        raise EngineHandshake([0]).timeout_error(1)


def test_identity_is_two_bytes_little_endian() -> None:
    assert engine_index_of(b"\x02\x01") == 258
    with pytest.raises(ValueError):
        engine_index_of(b"\x00\x00\x00")
    with pytest.raises(ValueError):
        EngineHandshake([70000])
    with pytest.raises(ValueError):
        EngineHandshake([])

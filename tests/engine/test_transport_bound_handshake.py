"""Binding the handshake early (`bind_handshake`), running it later (`EngineCoreClient.connect`).

A frontend binds first and loads its model while engines that are already waiting connect; the
fake engine of test_client_fake_engine.py plays the engine (a real process speaking the wire
protocol).
"""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
import zmq
from tests.engine.test_client_fake_engine import (
    _free_port,
    collect,
    expected_tokens,
    processes,
    request,
    run,
    start_fake,
)

from vllm_frontend.engine.client import EngineCoreClient
from vllm_frontend.engine.handshake import HandshakeTimeoutError
from vllm_frontend.engine.transport import bind_handshake


def _accepts_tcp(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            return True
    except ConnectionRefusedError:
        return False


def test_engines_can_connect_as_soon_as_the_handshake_is_bound_before_any_event_loop() -> None:
    port = _free_port()
    assert not _accepts_tcp(port)
    bound = bind_handshake(f"tcp://127.0.0.1:{port}", [0])
    try:
        assert _accepts_tcp(port)
    finally:
        bound.close()
    assert not _accepts_tcp(port)


def test_an_engine_that_joined_while_the_caller_was_busy_is_brought_up_and_serves() -> None:
    address = f"tcp://127.0.0.1:{_free_port()}"
    with processes() as procs:
        procs.append(start_fake("handshake", address, "0"))
        bound = bind_handshake(address, [0])
        time.sleep(1.0)  # the caller loads its model; no event loop runs meanwhile

        async def main() -> None:
            client = await EngineCoreClient.connect(bound, ready_timeout_s=60)
            async with client:
                assert client.max_model_len == 64
                outs = await collect(client.add_request(request("a", [5, 1], 3)))
                assert [t for o in outs for t in o.new_token_ids] == expected_tokens([5, 1], 3)

        run(main())


def test_a_bound_handshake_still_times_out_naming_the_missing_engine() -> None:
    port = _free_port()
    bound = bind_handshake(f"tcp://127.0.0.1:{port}", [0])
    with pytest.raises(HandshakeTimeoutError, match=r"engine 0 \(no HELLO"):
        run(EngineCoreClient.connect(bound, ready_timeout_s=0.5))
    assert not _accepts_tcp(port)  # everything was closed with the failure
    with pytest.raises(RuntimeError, match="already run or closed"):
        run(bound.run())


def test_engine_options_given_again_with_a_bound_handshake_are_refused() -> None:
    port = _free_port()
    bound = bind_handshake(f"tcp://127.0.0.1:{port}", [0])
    with pytest.raises(ValueError, match="already fixes the engines"):
        run(EngineCoreClient.connect(bound, engine_count=2))
    assert not _accepts_tcp(port)


def test_a_taken_handshake_port_fails_at_binding_time() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(zmq.ZMQError):
            bind_handshake(f"tcp://127.0.0.1:{port}", [0])


def test_closing_an_unrun_handshake_is_idempotent_and_frees_the_port_for_a_new_one() -> None:
    address = f"tcp://127.0.0.1:{_free_port()}"
    first = bind_handshake(address, [0])
    first.close()
    first.close()
    second = bind_handshake(address, [0])
    second.close()


def test_a_cancelled_handshake_closes_its_sockets() -> None:
    port = _free_port()
    bound = bind_handshake(f"tcp://127.0.0.1:{port}", [0])

    async def main() -> None:
        task = asyncio.ensure_future(bound.run(timeout_s=60))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main())
    assert not _accepts_tcp(port)

"""EngineCoreClient against a scripted fake engine process (fast; no vLLM needed).

The fake engine speaks the wire protocol with the project's codec from a separate process, so the
client's sockets, handshake, routing, aborts, utility calls and death detection (SIGKILL, the
ENGINE_CORE_DEAD sentinel) are exercised for real. Token values are a pure function of the
prompt, so tests check them independently. Behaviour against a real vLLM engine is covered by
test_client_real_engine.py.

Run as a script, this file *is* the fake engine:
``python test_client_fake_engine.py handshake tcp://127.0.0.1:PORT INDEX`` or
``python test_client_fake_engine.py direct INPUT OUTPUT INDEX``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from vllm_frontend.engine import transport
from vllm_frontend.engine.client import (
    EngineCoreClient,
    EngineDeadError,
    InvalidRequestError,
    UtilityCallError,
    UtilityTimeoutError,
)
from vllm_frontend.engine.handshake import HandshakeError, HandshakeTimeoutError
from vllm_frontend.engine.protocol import (
    EngineCoreRequest,
    FinishReason,
    SamplingParams,
)
from vllm_frontend.engine.transport import BoundHandshake, SocketOptions, bind_handshake
from vllm_frontend.engine.zmtp_sockets import ZmtpPull, ZmtpRouter

STEP_S = 0.005
VOCAB = 1000


@pytest.fixture(autouse=True, params=["zmtp", "libzmq"])
def _input_output_sockets(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test with our own ZMTP input/output sockets and with libzmq's."""
    monkeypatch.setenv("VLLM_FRONTEND_ZMTP", "1" if request.param == "zmtp" else "0")
    return str(request.param)


def expected_tokens(prompt: list[int], count: int) -> list[int]:
    """The fake engine's deterministic 'model': token k is (sum(prompt) + 7 k) mod VOCAB."""
    return [(sum(prompt) + 7 * k) % VOCAB for k in range(count)]


# --------------------------------------------------------------------------------------------
# The fake engine (runs in a child process)
# --------------------------------------------------------------------------------------------


def _fake_engine_main(argv: list[str]) -> None:  # pragma: no cover - runs in a subprocess
    import msgspec
    import zmq

    from vllm_frontend.engine import codec
    from vllm_frontend.engine.protocol import (
        EngineCoreOutput,
        EngineCoreOutputs,
        EngineCoreReadyResponse,
        RequestType,
        SchedulerStats,
        UtilityOutput,
        UtilityResult,
    )

    mode = argv[0]
    index = int(argv[-1])
    identity = index.to_bytes(2, "little")
    ctx = zmq.Context()
    handshake = None
    if mode in ("handshake", "ready-unregistered"):
        handshake = ctx.socket(zmq.DEALER)
        handshake.setsockopt(zmq.IDENTITY, identity)
        handshake.connect(argv[1])
        handshake.send(
            msgspec.msgpack.encode({"status": "HELLO", "local": False, "headless": True})
        )
        parent = os.getppid()
        while not handshake.poll(1000):
            if os.getppid() != parent:
                os._exit(0)  # the test process is gone: do not linger as an orphan
        init = codec.decode_handshake_init(handshake.recv())
        input_addr, output_addr = init.addresses.inputs[0], init.addresses.outputs[0]
        if mode == "ready-unregistered":
            # READY, then the handshake closed, with no input connection ever made: what the
            # frontend sees of an engine killed before libzmq connected its input socket.
            handshake.send(
                msgspec.msgpack.encode({"status": "READY", "local": False, "headless": True})
            )
            handshake.close()
            while os.getppid() == parent:
                time.sleep(0.2)
            os._exit(0)
    else:
        input_addr, output_addr = argv[1], argv[2]
    inp = ctx.socket(zmq.DEALER)
    inp.setsockopt(zmq.IDENTITY, identity)
    inp.connect(input_addr)
    inp.send(
        codec.encode_registration(
            EngineCoreReadyResponse(
                max_model_len=64, num_gpu_blocks=10, vllm_version="fake", data_parallel_rank=index
            )
        )
    )
    out = ctx.socket(zmq.PUSH)
    out.connect(output_addr)
    if handshake is not None:
        handshake.send(
            msgspec.msgpack.encode({"status": "READY", "local": False, "headless": True})
        )
        handshake.close()
    print("registered", flush=True)  # lets a test act once the engine is up

    live: dict[str, list[Any]] = {}  # id -> [request, tokens produced]
    aborted: list[str] = []
    adds = 0
    last_wave = -1
    stats_due = False

    def send(msg: EngineCoreOutputs) -> None:
        msg.engine_index = index
        msg.timestamp = time.monotonic()
        out.send_multipart(codec.encode_outputs(msg))

    def reply(call_id: int, value: Any = None, failure: str | None = None) -> None:
        result = None if failure is not None else UtilityResult(None, value)
        send(EngineCoreOutputs(utility_output=UtilityOutput(call_id, failure, result)))

    parent = os.getppid()
    while True:
        if os.getppid() != parent:
            os._exit(0)  # the test process is gone: do not linger as an orphan
        if inp.poll(timeout=STEP_S * 1000 if live or stats_due else 1000):
            frames = inp.recv_multipart()
            kind, payload = codec.decode_request(frames)
            if kind is RequestType.ADD:
                adds += 1
                last_wave = payload.current_wave
                assert payload.request_id not in live, "duplicate live id reached the engine"
                live[payload.request_id] = [payload, 0]
            elif kind is RequestType.ABORT:
                for rid in payload:
                    if live.pop(rid, None) is not None:
                        aborted.append(rid)
                        stats_due = True
            elif kind is RequestType.UTILITY:
                method, args = payload.method_name, payload.args
                if method == "is_sleeping":
                    reply(payload.call_id, False)
                elif method == "get_supported_tasks":
                    reply(payload.call_id, ["generate"])
                elif method == "echo":
                    reply(payload.call_id, args)
                elif method == "aborted_ids":
                    reply(payload.call_id, aborted)
                elif method == "add_count":
                    reply(payload.call_id, adds)
                elif method == "last_wave":
                    reply(payload.call_id, last_wave)
                elif method == "ignore":
                    pass
                elif method == "forget":
                    # Engine-side bookkeeping only: the id shows up in finished_requests.
                    for rid in args:
                        live.pop(rid, None)
                    send(EngineCoreOutputs(finished_requests=list(args)))
                    reply(payload.call_id, None)
                elif method == "garble":
                    out.send(b"\xc1 not msgpack")
                elif method == "die":
                    out.send(b"ENGINE_CORE_DEAD")
                    time.sleep(0.5)
                    os._exit(1)
                else:
                    reply(
                        payload.call_id,
                        failure=f"Call to {method} method failed: no such method",
                    )
            continue
        if not live and not stats_due:
            continue
        outputs = []
        for rid, entry in list(live.items()):
            request, produced = entry
            prompt = request.prompt_token_ids
            token = expected_tokens(prompt, produced + 1)[-1]
            entry[1] = produced = produced + 1
            done = produced >= request.sampling_params.max_tokens
            outputs.append(
                EngineCoreOutput(rid, [token], finish_reason=FinishReason.LENGTH if done else None)
            )
            if done:
                del live[rid]
        stats = SchedulerStats(num_running_reqs=len(live), num_waiting_reqs=0)
        # Stamped as vLLM's EngineCoreOutputs.__post_init__ does (the engine's monotonic clock).
        send(EngineCoreOutputs(outputs=outputs, scheduler_stats=stats, timestamp=time.monotonic()))
        stats_due = False


if __name__ == "__main__":  # pragma: no cover
    _fake_engine_main(sys.argv[1:])


# --------------------------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------------------------

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_fake(*args: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "src")]))
    return subprocess.Popen(
        [sys.executable, "-m", "tests.engine.test_client_fake_engine", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )


@contextlib.contextmanager
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    try:
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
            p.wait()


@contextlib.asynccontextmanager
async def fake_engines(
    count: int = 1, **kwargs: Any
) -> AsyncIterator[tuple[EngineCoreClient, list[subprocess.Popen[bytes]]]]:
    address = f"tcp://127.0.0.1:{_free_port()}"
    # Bound before the engines start, as `serve` does: an engine connecting to a port nobody
    # listens on yet can get that very port as its own source port and connect to itself (TCP
    # simultaneous open), then wait forever on a handshake that never reaches us.
    target: str | BoundHandshake = address
    if not kwargs:
        target = bind_handshake(address, range(count))
    with processes() as procs:
        procs.extend(start_fake("handshake", address, str(i)) for i in range(count))
        if isinstance(target, BoundHandshake):
            client = await EngineCoreClient.connect(target, ready_timeout_s=60)
        else:
            client = await EngineCoreClient.connect(
                address, engine_count=count, ready_timeout_s=60, **kwargs
            )
        try:
            yield client, procs
        finally:
            await client.close()


def request(
    request_id: str, prompt: list[int], max_tokens: int = 4, **kwargs: Any
) -> EngineCoreRequest:
    params = kwargs.pop("sampling_params", None) or SamplingParams(
        max_tokens=max_tokens, temperature=0.0
    )
    rank = kwargs.pop("data_parallel_rank", None)
    return EngineCoreRequest(
        request_id, prompt, None, params, None, time.time(), None, None, rank, **kwargs
    )


async def collect(stream: Any) -> list[Any]:
    return [out async for out in stream]


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 60))


# --------------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------------


def test_stream_delivers_every_token_and_ends_with_the_finish_reason(
    _input_output_sockets: str,
) -> None:
    ours = _input_output_sockets == "zmtp"

    async def main() -> None:
        async with fake_engines() as (client, _):
            # The switch picks the implementation of both hot sockets.
            assert isinstance(client._sockets.input, ZmtpRouter) is ours
            assert isinstance(client._sockets.output, ZmtpPull) is ours
            assert client.max_model_len == 64
            assert client.limits.supported_tasks == frozenset({"generate"})
            streams = [client.add_request(request(f"r{i}", [i, 2, 3], 3 + i)) for i in range(3)]
            results = await asyncio.gather(*(collect(s) for s in streams))
            for i, outs in enumerate(results):
                assert [t for o in outs for t in o.new_token_ids] == expected_tokens(
                    [i, 2, 3], 3 + i
                )
                assert [o.finish_reason for o in outs][-1] is FinishReason.LENGTH
                assert all(o.finish_reason is None for o in outs[:-1])
            assert client.num_in_flight == 0

    run(main())


def test_a_consumer_that_falls_behind_gets_every_queued_output_at_once() -> None:
    async def main() -> None:
        async with fake_engines() as (client, _):
            stream = client.add_request(request("slow", [5, 6], 6))
            while not stream.finished:  # the engine runs ahead; nothing is consumed yet
                await asyncio.sleep(0.01)
            batch = await stream.next_batch()
            assert len(batch) > 1
            assert [t for o in batch for t in o.new_token_ids] == expected_tokens([5, 6], 6)
            assert batch[-1].finish_reason is FinishReason.LENGTH
            assert all(o.finish_reason is None for o in batch[:-1])
            assert await stream.next_batch() == []
            assert client.num_in_flight == 0

    run(main())


def test_push_consumers_are_called_back_and_take_every_output_in_order() -> None:
    async def main() -> None:
        async with fake_engines() as (client, _):
            streams = [client.add_request(request(f"p{i}", [i, 7], 5 + i)) for i in range(3)]
            got: list[list[Any]] = [[] for _ in streams]
            calls = [0] * len(streams)
            done = asyncio.get_running_loop().create_future()

            def ready(i: int) -> None:
                calls[i] += 1
                got[i].extend(streams[i].take())
                if all(s.finished for s in streams) and not done.done():
                    done.set_result(None)

            for i, s in enumerate(streams):
                s.on_ready(lambda i=i: ready(i))
            await done
            for i, outs in enumerate(got):
                assert [t for o in outs for t in o.new_token_ids] == expected_tokens([i, 7], 5 + i)
                assert outs[-1].finish_reason is FinishReason.LENGTH
                assert all(o.finish_reason is None for o in outs[:-1])
                # Called per batch of engine messages, never more than once per output.
                assert 1 <= calls[i] <= len(outs)
                assert streams[i].take() == []
            assert client.num_in_flight == 0

    run(main())


def test_an_output_handler_gets_running_outputs_in_order_and_take_gets_the_rest() -> None:
    """``on_output``: running outputs go to the handler as they are read unless it declines
    (then they queue, and everything after them queues too until taken); the final output is
    always queued. Nothing is lost, duplicated or reordered."""

    async def main() -> None:
        async with fake_engines() as (client, _):
            stream = client.add_request(request("h", [3, 4], 12))
            handled: list[Any] = []
            taken: list[Any] = []
            order: list[Any] = []
            declined = False
            done = asyncio.get_running_loop().create_future()

            def handler(out: Any) -> bool:
                nonlocal declined
                if len(handled) == 2 and not declined:  # decline one: it and later ones queue
                    declined = True
                    return False
                handled.append(out)
                order.append(out)
                return True

            def ready() -> None:
                batch = stream.take()
                order.extend(batch)
                taken.extend(batch)
                if stream.finished and not done.done():
                    done.set_result(None)

            stream.on_ready(ready)
            stream.on_output(handler)
            await done
            assert [t for o in order for t in o.new_token_ids] == expected_tokens([3, 4], 12)
            assert len(handled) >= 2 and all(o.finish_reason is None for o in handled)
            assert declined and taken[0].new_token_ids == expected_tokens([3, 4], 12)[2:3]
            assert order[-1].finish_reason is FinishReason.LENGTH
            assert client.num_in_flight == 0

    run(main())


def test_an_output_handler_that_raises_fails_its_request() -> None:
    async def main() -> None:
        async with fake_engines() as (client, _):
            stream = client.add_request(request("r", [1], 10_000))
            errors: list[BaseException] = []
            woke = asyncio.Event()

            def handler(out: Any) -> bool:
                raise ValueError("consumer bug")

            def ready() -> None:
                try:
                    stream.take()
                except ValueError as e:
                    errors.append(e)
                    woke.set()

            stream.on_ready(ready)
            stream.on_output(handler)
            await asyncio.wait_for(woke.wait(), 10)
            assert stream.finished and len(errors) == 1
            await stream.aclose()  # the consumer's clean-up aborts it on the engine
            other = await collect(client.add_request(request("o", [2], 3)))
            assert [t for o in other for t in o.new_token_ids] == expected_tokens([2], 3)

    run(main())


def test_a_push_consumer_sees_engine_death_once() -> None:
    async def main() -> None:
        async with fake_engines() as (client, _):
            stream = client.add_request(request("d", [1], 10_000))
            errors: list[BaseException] = []
            woke = asyncio.Event()

            def ready() -> None:
                try:
                    stream.take()
                except EngineDeadError as e:
                    errors.append(e)
                    woke.set()

            stream.on_ready(ready)
            with contextlib.suppress(EngineDeadError):
                await client.call_utility("die")
            await woke.wait()
            assert stream.finished
            assert stream.take() == []  # the failure is raised once
            assert len(errors) == 1 and "ENGINE_CORE_DEAD" in str(errors[0])

    run(main())


def test_engine_started_before_the_frontend_is_still_adopted() -> None:
    async def main() -> None:
        address = f"tcp://127.0.0.1:{_free_port()}"
        with processes() as procs:
            procs.append(start_fake("handshake", address, "0"))
            await asyncio.sleep(0.5)  # the engine's HELLO waits in its queue (ZMQ reconnects)
            client = await EngineCoreClient.connect(address, ready_timeout_s=60)
            async with client:
                outs = await collect(client.add_request(request("a", [5], 2)))
                assert [t for o in outs for t in o.new_token_ids] == expected_tokens([5], 2)

    run(main())


def test_abort_ends_the_stream_with_abort_and_the_engine_stops_the_request() -> None:
    async def main() -> None:
        async with fake_engines() as (client, _):
            stream = client.add_request(request("long", [1], 10_000))
            first = await anext(stream)
            assert first.new_token_ids
            assert client.abort("long")
            rest = await collect(stream)
            assert rest[-1].finish_reason is FinishReason.ABORT
            assert stream.finish_reason is FinishReason.ABORT
            await client.wait_for_scheduler_stats(
                lambda s: 0 in s and s[0].num_running_reqs == 0, timeout=10
            )
            assert await client.call_utility("aborted_ids") == ["long"]
            assert not client.abort("long")  # no longer live

    run(main())


def test_scheduler_stats_times_are_the_engines_own_timestamps() -> None:
    async def main() -> None:
        async with fake_engines() as (client, _):
            start = time.monotonic()  # one clock for the processes of a host
            await collect(client.add_request(request("a", [5], 3)))
            await client.wait_for_scheduler_stats(lambda s: 0 in s, timeout=10)
            first = client.scheduler_stats_times()[0]
            assert start <= first <= time.monotonic()
            await collect(client.add_request(request("b", [5], 3)))
            await client.wait_for_scheduler_stats(
                lambda s: client.scheduler_stats_times()[0] > first, timeout=10
            )
            assert sorted(client.scheduler_stats_times()) == sorted(client.scheduler_stats())

    run(main())


def test_consumer_that_stops_early_aborts_the_request() -> None:
    async def main() -> None:
        async with fake_engines() as (client, _):
            # 1. leaving `async with` early
            async with client.add_request(request("ctx", [1], 10_000)) as stream:
                await anext(stream)
            # 2. the consuming task is cancelled while it waits
            stream2 = client.add_request(request("cancel", [1], 10_000))

            consuming = asyncio.Event()

            async def consume() -> None:
                async for _ in stream2:
                    consuming.set()

            task = asyncio.create_task(consume())
            await consuming.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # 3. the stream is dropped unfinished
            stream3 = client.add_request(request("dropped", [1], 10_000))
            await anext(stream3)
            del stream3
            await asyncio.sleep(0)  # aborts from finalizers are sent from the loop
            assert client.num_in_flight == 0
            aborted = await client.call_utility("aborted_ids")
            assert sorted(aborted) == ["cancel", "ctx", "dropped"]

    run(main())


def test_utility_calls_round_trip_and_failures_are_clear() -> None:
    async def main() -> None:
        async with fake_engines() as (client, _):
            assert await client.call_utility("is_sleeping") is False
            assert await client.call_utility("echo", 1, "two", [3]) == [1, "two", [3]]
            with pytest.raises(UtilityCallError, match=r"no_such_method.*no such method"):
                await client.call_utility("no_such_method")
            with pytest.raises(UtilityTimeoutError, match="'ignore' on engine 0"):
                await client.call_utility("ignore", timeout=0.2)
            assert await client.call_utility_all("is_sleeping") == [False]

    run(main())


def test_invalid_requests_are_rejected_before_sending_and_the_engine_keeps_serving() -> None:
    async def main() -> None:
        async with fake_engines() as (client, _):
            live = client.add_request(request("dup", [1], 10_000))
            with pytest.raises(InvalidRequestError, match="already in flight"):
                client.add_request(request("dup", [2], 2))
            with pytest.raises(InvalidRequestError, match="top_p"):
                client.add_request(
                    request("bad", [1], sampling_params=SamplingParams(top_p=0.0, max_tokens=2))
                )
            with pytest.raises(InvalidRequestError, match="maximum context length 64"):
                client.add_request(request("long-prompt", list(range(65)), 2))
            with pytest.raises(InvalidRequestError, match="data_parallel_rank"):
                client.add_request(request("rank", [1], 2, data_parallel_rank=1))
            assert await client.call_utility("add_count") == 1
            await live.aclose()
            outs = await collect(client.add_request(request("ok", [9], 2)))
            assert outs[-1].finish_reason is FinishReason.LENGTH

    run(main())


def test_engine_core_dead_fails_everything_and_refuses_new_work() -> None:
    async def main() -> None:
        async with fake_engines() as (client, _):
            streams = [client.add_request(request(f"s{i}", [i], 10_000)) for i in range(3)]
            for s in streams:
                await anext(s)
            pending = asyncio.create_task(client.call_utility("ignore", timeout=None))
            await asyncio.sleep(0)
            with contextlib.suppress(EngineDeadError):
                await client.call_utility("die")
            for s in streams:
                with pytest.raises(EngineDeadError, match="ENGINE_CORE_DEAD"):
                    await collect(s)
            with pytest.raises(EngineDeadError):
                await pending
            assert client.is_dead
            assert "ENGINE_CORE_DEAD" in str(client.dead_error)
            with pytest.raises(EngineDeadError):
                client.add_request(request("new", [1], 2))

    run(main())


def test_killed_engine_fails_in_flight_streams_instead_of_hanging() -> None:
    async def main() -> None:
        async with fake_engines(2) as (client, procs):
            streams = [
                client.add_request(request(f"k{i}", [i], 10_000, data_parallel_rank=i % 2))
                for i in range(4)
            ]
            for s in streams:
                await anext(s)
            os.kill(procs[1].pid, signal.SIGKILL)
            for s in streams:
                with pytest.raises(EngineDeadError, match="engine 1 disconnected"):
                    await collect(s)
            assert client.is_dead
            with pytest.raises(EngineDeadError):
                client.add_request(request("after", [1], 2))
            with pytest.raises(EngineDeadError):
                await client.call_utility("is_sleeping")

    run(main())


@pytest.mark.oracle
def test_requests_spread_over_engines_and_a_pinned_rank_is_honoured() -> None:
    async def main() -> None:
        async with fake_engines(2) as (client, _):
            assert client.engine_indices == [0, 1]
            spread = [client.add_request(request(f"d{i}", [i], 5)) for i in range(6)]
            assert sorted(s.engine_index for s in spread) == [0, 0, 0, 1, 1, 1]
            pinned = [
                client.add_request(request(f"p{i}", [i], 2, data_parallel_rank=1)) for i in range(3)
            ]
            outs = await asyncio.gather(*(collect(s) for s in spread + pinned))
            assert all(s.engine_index == 1 for s in pinned)
            assert all(o[-1].finish_reason is FinishReason.LENGTH for o in outs)
            assert [load.in_flight for load in client.load()] == [0, 0]
            assert await client.call_utility("add_count", engine=0) == 3
            assert await client.call_utility("add_count", engine=1) == 6

    run(main())


def test_handshake_timeout_names_the_engines_that_never_came() -> None:
    async def main() -> None:
        address = f"tcp://127.0.0.1:{_free_port()}"
        with processes() as procs:
            procs.append(start_fake("handshake", address, "0"))
            with pytest.raises(HandshakeTimeoutError, match=r"engine 1 \(no HELLO"):
                await EngineCoreClient.connect(address, engine_count=2, ready_timeout_s=3)

    run(main())


def test_engine_crashing_during_startup_fails_the_handshake_at_once() -> None:
    async def main() -> None:
        address = f"tcp://127.0.0.1:{_free_port()}"
        with processes() as procs:
            procs.append(start_fake("handshake", address, "0"))
            connecting = asyncio.create_task(
                EngineCoreClient.connect(address, engine_count=2, ready_timeout_s=60)
            )
            # Engine 0 registers (engine 1 never comes), then dies.
            assert procs[0].stdout is not None
            assert await asyncio.to_thread(procs[0].stdout.readline) == b"registered\n"
            os.kill(procs[0].pid, signal.SIGKILL)
            # Whether its registration got through before the kill or not, startup fails now.
            with pytest.raises(HandshakeError, match=r"disconnected during startup|registering"):
                await connecting

    run(main())


def test_engine_ready_but_never_registered_fails_after_the_grace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An engine queues its registration before READY; if it dies before libzmq made its input
    # connection, the closed handshake after READY is the only sign: startup gives it a grace
    # period to register, not the whole ready timeout.
    monkeypatch.setattr(transport, "REGISTRATION_GRACE_S", 0.5)

    async def main() -> None:
        address = f"tcp://127.0.0.1:{_free_port()}"
        with processes() as procs:
            procs.append(start_fake("ready-unregistered", address, "0"))
            with pytest.raises(HandshakeError, match=r"engine\(s\) 0 sent READY .* within 0.5 s"):
                await EngineCoreClient.connect(address, engine_count=1, ready_timeout_s=30)

    run(main())


def test_process_watcher_aborts_startup_with_its_reason() -> None:
    async def main() -> None:
        address = f"tcp://127.0.0.1:{_free_port()}"

        async def watcher() -> str:
            await asyncio.sleep(0.3)
            return "engine process 4242 exited with code 1"

        with pytest.raises(HandshakeError, match="startup aborted: engine process 4242"):
            await EngineCoreClient.connect(address, ready_timeout_s=60, process_watcher=watcher)

    run(main())


def test_process_watcher_marks_a_running_client_dead() -> None:
    async def main() -> None:
        exited = asyncio.Event()

        async def watcher() -> str:
            await exited.wait()
            return "engine process 77 exited with signal 9"

        async with fake_engines(process_watcher=watcher) as (client, _):
            stream = client.add_request(request("w", [1], 10_000))
            await anext(stream)
            exited.set()
            with pytest.raises(EngineDeadError, match="engine process 77"):
                await collect(stream)
            assert client.is_dead

    run(main())


def test_inherited_listeners_adopt_engines_that_connect_directly() -> None:
    async def main(tmp: str) -> None:
        listeners = []
        for name in ("in", "out"):
            lst = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            lst.bind(os.path.join(tmp, name))
            lst.listen()
            listeners.append(lst)
        tcp = socket.socket()
        tcp.bind(("127.0.0.1", 0))
        tcp.listen()
        listeners[1].close()
        listeners[1] = tcp  # a TCP output listener next to an IPC input listener
        with processes() as procs:
            # Engines may connect before the frontend adopts (the kernel backlog keeps them).
            procs.append(
                start_fake(
                    "direct",
                    f"ipc://{tmp}/in",
                    f"tcp://127.0.0.1:{tcp.getsockname()[1]}",
                    "3",
                )
            )
            await asyncio.sleep(0.3)
            client = await EngineCoreClient.adopt(
                input_listener_fd=listeners[0].detach(),
                output_listener_fd=listeners[1].detach(),
                engine_start_index=3,
                engine_count=1,
                ready_timeout_s=30,
            )
            async with client:
                assert client.engine_indices == [3]
                stream = client.add_request(request("b", [4], 3, data_parallel_rank=0))
                outs = await collect(stream)
                assert stream.engine_index == 3
                assert [t for o in outs for t in o.new_token_ids] == expected_tokens([4], 3)

    import tempfile

    with tempfile.TemporaryDirectory(prefix="fe-") as tmp:
        run(main(tmp))


def test_client_works_under_uvloop_with_tcp_sockets_for_remote_engines() -> None:
    uvloop = pytest.importorskip("uvloop")

    async def main() -> None:
        # local=False: input/output bind TCP ports on the handshake host instead of ipc://.
        async with fake_engines(local=False) as (client, _):
            outs = await collect(client.add_request(request("u", [3], 4)))
            assert [t for o in outs for t in o.new_token_ids] == expected_tokens([3], 4)

    uvloop.run(asyncio.wait_for(main(), 60))


def test_lost_connection_is_noticed_by_heartbeat_options() -> None:
    # Heartbeats are configured on the sockets (a lost host surfaces as a disconnect).
    async def main() -> None:
        async with fake_engines(
            socket_options=SocketOptions(heartbeat_interval_ms=100, heartbeat_timeout_ms=500)
        ) as (client, procs):
            os.kill(procs[0].pid, signal.SIGSTOP)  # alive but unresponsive at the process level
            try:
                # libzmq answers heartbeats from its own I/O thread, which is stopped too.
                stream = client.add_request(request("h", [1], 10_000))
                with pytest.raises(EngineDeadError, match="disconnected"):
                    await collect(stream)
            finally:
                os.kill(procs[0].pid, signal.SIGCONT)

    run(main())


def test_coordinator_counts_steer_routing_and_the_first_request_wakes_the_engines() -> None:
    import zmq

    from vllm_frontend.engine import codec
    from vllm_frontend.engine.protocol import CoordinatorPublish, EngineZmqAddresses

    ctx = zmq.Context()
    xpub = ctx.socket(zmq.XPUB)
    xpub.setsockopt(zmq.XPUB_VERBOSE, 1)
    port = xpub.bind_to_random_port("tcp://127.0.0.1")

    def publish(counts: Any, wave: int, running: bool) -> None:
        xpub.send(codec.encode_coordinator_publish(CoordinatorPublish(counts, wave, running)))

    def first_request() -> Any:
        assert xpub.poll(10_000), "no first-request message"
        return codec.decode_coordinator_first_request(xpub.recv())

    async def main() -> None:
        coordinator = EngineZmqAddresses(
            inputs=[], outputs=[], frontend_stats_publish_address=f"tcp://127.0.0.1:{port}"
        )
        async with fake_engines(2, coordinator=coordinator) as (client, _):
            assert xpub.poll(10_000) and xpub.recv() == b"\x01"  # the frontend subscribed
            publish([(9, 3, 0.9), (0, 0, 0.0)], 2, False)
            while client.load()[0].waiting != 9:
                await asyncio.sleep(0.01)
            assert [(e.waiting, e.running) for e in client.load()] == [(9, 3), (0, 0)]
            a = client.add_request(request("a", [1], 2))
            assert a.engine_index == 1  # engine 0 is busy by the coordinator's count
            first = first_request()
            assert (first.exclude_engine_index, first.wave) == (1, 2)
            await collect(a)
            assert await client.call_utility("last_wave", engine=1) == 2
            # A wave finished: engines idle again, the next request announces itself anew.
            publish(None, 3, False)
            while client.current_wave != 3:
                await asyncio.sleep(0.01)
            b = client.add_request(request("b", [2], 2, data_parallel_rank=0))
            while True:
                msg = first_request()
                if msg.wave == 3:
                    break
            assert msg.exclude_engine_index == 0
            await collect(b)
            assert await client.call_utility("last_wave", engine=0) == 3

    try:
        run(main())
    finally:
        xpub.close(linger=0)
        ctx.term()


def test_request_finished_only_in_finished_requests_ends_its_stream() -> None:
    async def main() -> None:
        async with fake_engines() as (client, _):
            stream = client.add_request(request("quiet", [1], 10_000))
            await anext(stream)
            await client.call_utility("forget", "quiet")
            rest = await collect(stream)
            assert rest[-1].finish_reason is FinishReason.ABORT
            assert client.num_in_flight == 0
            assert not client.is_dead

    run(main())


def test_garbled_output_fails_requests_rather_than_hanging_them() -> None:
    async def main() -> None:
        async with fake_engines() as (client, _):
            stream = client.add_request(request("g", [1], 10_000))
            await anext(stream)
            with pytest.raises(EngineDeadError):
                await client.call_utility("garble", timeout=30)
            with pytest.raises(EngineDeadError, match="undecodable"):
                await collect(stream)

    run(main())

"""A minimal Mode-A handshake owner playing vLLM's frontend role, built on vLLM's own structs.

The mock engine is checked against this peer: every message it receives is encoded by
vLLM's `MsgpackEncoder` from vLLM's `EngineCoreRequest`/`SamplingParams`, and every message it
sends is decoded with vLLM's `MsgpackDecoder` into vLLM's structs (test-only imports).
"""

from __future__ import annotations

import collections
import itertools
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import msgspec
import zmq
from vllm.sampling_params import SamplingParams
from vllm.v1.engine import (
    EngineCoreOutput,
    EngineCoreOutputs,
    EngineCoreReadyResponse,
    EngineCoreRequest,
)
from vllm.v1.engine.utils import EngineHandshakeMetadata, EngineZmqAddresses
from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder

from vllm_frontend.mock.core import MockEngineOptions
from vllm_frontend.mock.engine import MockEngineGroup

DEAD = b"ENGINE_CORE_DEAD"


def identity(index: int) -> bytes:
    """The ZMQ identity of engine `index` (2-byte little-endian)."""
    return index.to_bytes(2, "little")


def make_request(
    request_id: str,
    prompt: list[int],
    client_index: int = 0,
    eos: int | None = None,
    **sampling: Any,
) -> EngineCoreRequest:
    """An ADD request exactly as vLLM's frontend would build it (``eos``: the model's EOS)."""
    params = SamplingParams(**sampling)
    if eos is not None:
        params.update_from_generation_config({}, eos_token_id=eos)
    return EngineCoreRequest(
        request_id=request_id,
        prompt_token_ids=prompt,
        mm_features=None,
        sampling_params=params,
        pooling_params=None,
        arrival_time=time.time(),
        lora_request=None,
        cache_salt=None,
        data_parallel_rank=None,
        client_index=client_index,
    )


@dataclass
class Handshake:
    """What the engines sent while connecting, raw and decoded."""

    hello: dict[int, bytes] = field(default_factory=dict)
    ready: dict[int, bytes] = field(default_factory=dict)
    # (client index, engine index) -> raw registration payload
    registration: dict[tuple[int, int], bytes] = field(default_factory=dict)

    def registration_of(self, engine: int, client: int = 0) -> EngineCoreReadyResponse:
        """The registration message decoded with vLLM's own struct."""
        return msgspec.msgpack.decode(
            self.registration[(client, engine)], type=EngineCoreReadyResponse
        )


class FakeFrontend:
    """Binds the handshake, input and output sockets and speaks to engines like vLLM's client."""

    def __init__(
        self,
        engines: Iterable[int] = (0,),
        num_clients: int = 1,
        coordinator: bool = False,
        init_payload: bytes | None = None,
    ) -> None:
        self.engines = list(engines)
        self.ctx = zmq.Context()
        self.handshake_sock = self._bind(zmq.ROUTER)
        self.inputs = [self._bind(zmq.ROUTER) for _ in range(num_clients)]
        self.outputs = [self._bind(zmq.PULL) for _ in range(num_clients)]
        self.coord_in: zmq.Socket | None = None
        self.coord_out: zmq.Socket | None = None
        if coordinator:
            # Plays the DP coordinator's engine-facing sockets (XPUB and PULL).
            self.coord_in = self._bind(zmq.XPUB)
            self.coord_in.setsockopt(zmq.XPUB_VERBOSE, 1)
            self.coord_out = self._bind(zmq.PULL)
        self.init_payload = init_payload
        self.encoder = MsgpackEncoder()
        self.decoder = MsgpackDecoder(EngineCoreOutputs)
        self._call_ids = itertools.count(1)
        # Output messages set aside while `call` waited for its reply, per client.
        self._backlog: dict[int, collections.deque[EngineCoreOutputs]] = collections.defaultdict(
            collections.deque
        )
        self.handshake_result = Handshake()

    def _bind(self, kind: int) -> zmq.Socket:
        sock = self.ctx.socket(kind)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVHWM, 0)
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.bind("tcp://127.0.0.1:*")
        return sock

    @staticmethod
    def _endpoint(sock: zmq.Socket) -> str:
        return sock.getsockopt_string(zmq.LAST_ENDPOINT)

    @property
    def handshake_address(self) -> str:
        """The address the engines' `--handshake-address` points at."""
        return self._endpoint(self.handshake_sock)

    def addresses(self) -> EngineZmqAddresses:
        """The INIT addresses, as vLLM's `launch_core_engines` builds them."""
        return EngineZmqAddresses(
            inputs=[self._endpoint(s) for s in self.inputs],
            outputs=[self._endpoint(s) for s in self.outputs],
            coordinator_input=self._endpoint(self.coord_in) if self.coord_in else None,
            coordinator_output=self._endpoint(self.coord_out) if self.coord_out else None,
            frontend_stats_publish_address=None,
        )

    def handshake(self, timeout: float = 30.0) -> Handshake:
        """Run HELLO → INIT → registration → READY with every expected engine."""
        result = self.handshake_result
        init = self.init_payload or msgspec.msgpack.encode(
            EngineHandshakeMetadata(addresses=self.addresses(), parallel_config={})
        )
        poller = zmq.Poller()
        poller.register(self.handshake_sock, zmq.POLLIN)
        for sock in self.inputs:
            poller.register(sock, zmq.POLLIN)
        if self.coord_in is not None:
            poller.register(self.coord_in, zmq.POLLIN)
        subscribed = 0
        expected_regs = len(self.engines) * len(self.inputs)
        deadline = time.monotonic() + timeout
        while len(result.ready) < len(self.engines) or len(result.registration) < expected_regs:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(
                    f"handshake incomplete: hello={sorted(result.hello)} "
                    f"ready={sorted(result.ready)} registrations={sorted(result.registration)}"
                )
            for sock, _ in poller.poll(remaining * 1000):
                if sock is self.handshake_sock:
                    ident, payload = sock.recv_multipart()
                    index = int.from_bytes(ident, "little")
                    assert index in self.engines, f"unexpected engine {index}"
                    status = msgspec.msgpack.decode(payload)["status"]
                    if status == "HELLO":
                        assert index not in result.hello, "second HELLO"
                        result.hello[index] = payload
                        sock.send_multipart([ident, init])
                    else:
                        assert status == "READY" and index in result.hello
                        result.ready[index] = payload
                elif sock is self.coord_in:
                    frame = sock.recv()
                    assert frame == b"\x01", frame
                    subscribed += 1
                    if subscribed == len(self.engines):
                        self.coord_in.send(b"READY")
                else:
                    ident, payload = sock.recv_multipart()
                    client = self.inputs.index(sock)
                    result.registration[(client, int.from_bytes(ident, "little"))] = payload
        return result

    # ------------------------------------------------------------------ requests

    def add(self, request: EngineCoreRequest, engine: int = 0) -> None:
        """Send an ADD for `request` to `engine` through the request's client socket."""
        frames = self.encoder.encode(request)
        self.inputs[request.client_index].send_multipart(
            [identity(engine), b"\x00", *frames], copy=False
        )

    def add_raw(self, payload_frames: list[bytes], engine: int = 0, client: int = 0) -> None:
        """Send an ADD whose payload frames are given as bytes (for malformed inputs)."""
        self.inputs[client].send_multipart([identity(engine), b"\x00", *payload_frames])

    def abort(self, request_ids: list[str], engine: int = 0, client: int = 0) -> None:
        """Send an ABORT for `request_ids`."""
        frames = self.encoder.encode(request_ids)
        self.inputs[client].send_multipart([identity(engine), b"\x01", *frames])

    def utility(self, method: str, *args: Any, engine: int = 0, client: int = 0) -> int:
        """Send a UTILITY call and return its call id."""
        call_id = next(self._call_ids)
        frames = self.encoder.encode((client, call_id, method, args))
        self.inputs[client].send_multipart([identity(engine), b"\x03", *frames])
        return call_id

    # ------------------------------------------------------------------ outputs

    def recv(self, client: int = 0, timeout: float = 10.0) -> EngineCoreOutputs | bytes:
        """The next message on a client's output socket, decoded by vLLM's decoder."""
        if self._backlog[client]:
            return self._backlog[client].popleft()
        sock = self.outputs[client]
        if not sock.poll(timeout * 1000):
            raise TimeoutError(f"no output on client {client} within {timeout}s")
        frames = sock.recv_multipart(copy=False)
        if len(frames) == 1 and frames[0].bytes == DEAD:
            return DEAD
        return self.decoder.decode([f.buffer for f in frames])

    def recv_coordinator(self, timeout: float = 10.0) -> EngineCoreOutputs:
        """The next message the engines pushed to the coordinator."""
        assert self.coord_out is not None
        if not self.coord_out.poll(timeout * 1000):
            raise TimeoutError("no coordinator message")
        return self.decoder.decode(self.coord_out.recv_multipart())

    def call(
        self, method: str, *args: Any, engine: int = 0, client: int = 0, timeout: float = 10.0
    ) -> Any:
        """Call a utility and return its decoded `UtilityOutput`.

        Other messages that arrive meanwhile are kept for `recv` (see `take_backlog`).
        """
        call_id = self.utility(method, *args, engine=engine, client=client)
        deadline = time.monotonic() + timeout
        sock = self.outputs[client]
        while True:
            if not sock.poll(max(deadline - time.monotonic(), 0.001) * 1000):
                raise TimeoutError(f"no reply to {method} within {timeout}s")
            frames = sock.recv_multipart(copy=False)
            msg = self.decoder.decode([f.buffer for f in frames])
            out = msg.utility_output
            if out is not None and out.call_id == call_id:
                return out
            self._backlog[client].append(msg)

    def take_backlog(self, client: int = 0) -> list[EngineCoreOutputs]:
        """The messages `call` set aside, removing them from what `recv` will return."""
        backlog = list(self._backlog[client])
        self._backlog[client].clear()
        return backlog

    def run_until_finished(
        self,
        request_ids: Iterable[str],
        client: int = 0,
        timeout: float = 30.0,
        prior: Iterable[EngineCoreOutputs] = (),
    ) -> tuple[dict[str, list[EngineCoreOutput]], list[EngineCoreOutputs]]:
        """Collect outputs (`prior` messages first) until every id has a finish reason.

        Returns the outputs by request id (ids without output are absent) and every message.
        """
        pending = set(request_ids)
        per_request: dict[str, list[EngineCoreOutput]] = {}
        messages: list[EngineCoreOutputs] = []
        deadline = time.monotonic() + timeout
        prior = collections.deque(prior)
        while pending or prior:
            if prior:
                msg = prior.popleft()
            else:
                msg = self.recv(client, max(deadline - time.monotonic(), 0.001))
            assert isinstance(msg, EngineCoreOutputs), msg
            messages.append(msg)
            for out in msg.outputs:
                per_request.setdefault(out.request_id, []).append(out)
                if out.finish_reason is not None:
                    pending.discard(out.request_id)
        return per_request, messages

    def close(self) -> None:
        """Close every socket."""
        self.ctx.destroy(linger=0)


@contextmanager
def connected(
    options: MockEngineOptions | None = None,
    engines: tuple[int, ...] = (0,),
    num_clients: int = 1,
    coordinator: bool = False,
) -> Iterator[tuple[FakeFrontend, MockEngineGroup]]:
    """A fake frontend and mock engines that completed the handshake with it."""
    frontend = FakeFrontend(engines, num_clients=num_clients, coordinator=coordinator)
    group = MockEngineGroup(
        frontend.handshake_address, engines, options or MockEngineOptions(step_ms=1.0)
    )
    group.start()
    try:
        frontend.handshake(timeout=30)
        assert group.wait_ready(10)
        yield frontend, group
    finally:
        group.stop()
        group.join(timeout=10)
        frontend.close()


@contextmanager
def paused(frontend: FakeFrontend, engine: int = 0) -> Iterator[list[EngineCoreOutputs]]:
    """Hold engine `engine`'s scheduler (pause mode "keep") for the block, then resume it.

    Requests sent inside the block queue up and start in the same step. The block gets the
    messages that arrived before the pause was confirmed (they are not returned by `recv`):
    nothing the engine sends later was produced before the pause.
    """
    reply = frontend.call("pause_scheduler", "keep", True, engine=engine)
    assert reply.failure_message is None, reply.failure_message
    yield frontend.take_backlog()
    reply = frontend.call("resume_scheduler", engine=engine)
    assert reply.failure_message is None, reply.failure_message

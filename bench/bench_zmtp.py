"""Micro-benchmark of the engines' input/output sockets: our ZMTP (engine/zmtp_sockets.py) against
libzmq's (engine/transport.py's ``send_parts``/``recv_ready``/``watch_readable``).

Measures, under uvloop over ipc, with the engine side (a libzmq DEALER and PUSH) in another
process:

* ``write``: a request's three parts (identity, type, a 300-byte payload) sent through the
  input ROUTER, in batches of 100 per loop iteration (``tight``) or one per 200 µs (``spaced``,
  where libzmq's I/O thread sleeps between sends; the loop's timer is counted too);
* ``read``: 300-byte messages from a PUSH, through the output PULL and the read callback;
* ``rtt``: a request out, the engine echoes it, the output in: the round trip, 500 µs apart.

CPU is the thread's (ours: the event loop) and the process's (adds libzmq's I/O thread).

Run: ``.venv/bin/python bench/bench_zmtp.py [--rounds N]``; rounds alternate ours and libzmq.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import uvloop
import zmq

from vllm_frontend.engine.transport import recv_ready, send_parts, watch_readable
from vllm_frontend.engine.zmtp_sockets import ZmtpPull, ZmtpRouter

PAYLOAD = os.urandom(300)
IDENTITY = b"\0\0"


def _dealer(endpoint: str, count: int) -> None:  # the engine's input side, another process
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.IDENTITY, IDENTITY)
    sock.setsockopt(zmq.RCVHWM, 0)
    sock.connect(endpoint)
    sock.send(b"hello")
    for _ in range(count):
        sock.recv_multipart()
    sock.close(0)
    ctx.term()


def _pusher(endpoint: str, count: int, spaced: bool, go: Any) -> None:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.connect(endpoint)
    go.wait()
    for _ in range(count):
        sock.send(PAYLOAD)
        if spaced:
            time.sleep(200e-6)
    sock.send(b"END")
    time.sleep(1)
    sock.close(0)
    ctx.term()


def _echo(inp: str, out: str) -> None:
    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.IDENTITY, IDENTITY)
    dealer.connect(inp)
    push = ctx.socket(zmq.PUSH)
    push.connect(out)
    dealer.send(b"hello")
    while (parts := dealer.recv_multipart())[0] != b"END":
        push.send_multipart(parts[1:])
    time.sleep(0.5)
    dealer.close(0)
    push.close(0)
    ctx.term()


class _Sockets:
    """One implementation's input ROUTER and output PULL, bound in ``tmp``."""

    def __init__(self, ours: bool, tmp: str, tag: str) -> None:
        self.ours = ours
        self.inp = f"ipc://{tmp}/in-{tag}"
        self.out = f"ipc://{tmp}/out-{tag}"
        self._zin: ZmtpRouter | None = None
        self._zout: ZmtpPull | None = None
        self._ctx: zmq.Context[zmq.Socket[bytes]] | None = None
        self._lin: zmq.Socket[bytes] | None = None
        self._lout: zmq.Socket[bytes] | None = None
        self.send: Callable[[Sequence[Any]], None]
        self.recv: Callable[[], Any]
        self.watch: Callable[[Callable[[], None]], Callable[[], None]]

    async def open(self) -> None:
        if self.ours:
            zin = self._zin = ZmtpRouter("input", heartbeat_interval_s=0)
            zout = self._zout = ZmtpPull("output", heartbeat_interval_s=0)
            zin.bind(self.inp)
            zout.bind(self.out)
            await zin.start()
            await zout.start()
            self.send, self.recv, self.watch = zin.send_parts, zout.recv_ready, zout.watch
            return
        ctx = self._ctx = zmq.Context()
        lin = self._lin = ctx.socket(zmq.ROUTER)
        lout = self._lout = ctx.socket(zmq.PULL)
        for sock in (lin, lout):
            sock.setsockopt(zmq.SNDHWM, 0)
            sock.setsockopt(zmq.RCVHWM, 0)
        lin.bind(self.inp)
        lout.bind(self.out)
        self.send = lambda parts: send_parts(lin, parts)
        self.recv = lambda: recv_ready(lout)
        self.watch = lambda callback: watch_readable(lout, callback)

    async def first_input(self) -> None:
        """Wait for the engine's hello on the input socket (its connection is then routable)."""
        while True:
            if self._zin is not None:
                if self._zin.recv_nowait() is not None:
                    return
            else:
                assert self._lin is not None
                try:
                    self._lin.recv_multipart(zmq.NOBLOCK)
                    return
                except zmq.Again:
                    pass
            await asyncio.sleep(0.005)

    def close(self) -> None:
        for zsock in (self._zin, self._zout):
            if zsock is not None:
                zsock.close()
        for sock in (self._lin, self._lout):
            if sock is not None:
                sock.close(0)
        if self._ctx is not None:
            self._ctx.term()


def _cpu() -> tuple[float, float]:
    return time.thread_time(), time.process_time()


def _per(start: tuple[float, float], count: int) -> str:
    thread, process = _cpu()
    return (
        f"thread {1e6 * (thread - start[0]) / count:6.2f} µs, "
        f"process {1e6 * (process - start[1]) / count:6.2f} µs"
    )


async def _write(socks: _Sockets, count: int, spaced: bool) -> str:
    proc = mp.Process(target=_dealer, args=(socks.inp, count))
    proc.start()
    await socks.first_input()
    parts = [IDENTITY, b"\0", PAYLOAD]
    start = _cpu()
    if spaced:
        for _ in range(count):
            socks.send(parts)
            await asyncio.sleep(200e-6)
    else:
        for _ in range(count // 100):
            for _ in range(100):
                socks.send(parts)
            await asyncio.sleep(0)
    await asyncio.get_running_loop().run_in_executor(None, proc.join)
    return _per(start, count)


async def _read(socks: _Sockets, count: int, spaced: bool) -> str:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    go = mp.Event()

    def on_readable() -> None:
        while (frames := socks.recv()) is not None:
            if len(frames[0]) == 3 and not done.done():
                done.set_result(None)

    proc = mp.Process(target=_pusher, args=(socks.out, count, spaced, go))
    proc.start()
    await asyncio.sleep(0.5)  # connected
    unwatch = socks.watch(on_readable)
    start = _cpu()
    go.set()
    await done
    result = _per(start, count)
    unwatch()
    await loop.run_in_executor(None, proc.join)
    return result


async def _rtt(socks: _Sockets, count: int) -> str:
    loop = asyncio.get_running_loop()
    proc = mp.Process(target=_echo, args=(socks.inp, socks.out))
    proc.start()
    await socks.first_input()
    waiting: list[asyncio.Future[float]] = []

    def on_readable() -> None:
        while socks.recv() is not None:
            if waiting and not waiting[0].done():
                waiting[0].set_result(time.perf_counter())

    unwatch = socks.watch(on_readable)
    rtts = []
    start = _cpu()
    for _ in range(count):
        waiting[:] = [loop.create_future()]
        sent = time.perf_counter()
        socks.send([IDENTITY, b"\0", PAYLOAD])
        rtts.append(1e6 * (await waiting[0] - sent))
        await asyncio.sleep(500e-6)
    result = _per(start, count)
    socks.send([IDENTITY, b"END"])
    unwatch()
    await loop.run_in_executor(None, proc.join)
    rtts.sort()
    return (
        f"p50 {rtts[len(rtts) // 2]:5.0f} µs, p90 {rtts[len(rtts) * 9 // 10]:5.0f} µs; "
        f"per round trip {result}"
    )


async def _main(rounds: int) -> None:
    tmp = tempfile.mkdtemp()
    runs = 0
    for _ in range(rounds):
        for ours in (True, False):
            name = "ours  " if ours else "libzmq"
            for what in ("write tight", "write spaced", "read tight", "read spaced", "rtt"):
                runs += 1
                socks = _Sockets(ours, tmp, str(runs))
                await socks.open()
                try:
                    if what == "rtt":
                        line = await _rtt(socks, 3_000)
                    else:
                        spaced = what.endswith("spaced")
                        count = 5_000 if spaced else 200_000
                        run = _write if what.startswith("write") else _read
                        line = await run(socks, count, spaced) + " per message"
                finally:
                    socks.close()
                print(f"{name} {what:12} {line}", flush=True)


def main() -> None:
    """Run the benchmark and print one line per measurement."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="alternations of ours and libzmq")
    args = parser.parse_args()
    uvloop.run(_main(args.rounds))


if __name__ == "__main__":
    main()

"""Instructions per non-streamed short request of the whole served frontend (sockets, HTTP
transport, engine client, ZMTP, output routing), under valgrind.

    .venv/bin/python bench/serve_instructions.py [--baseline main] [--route chat]
        [--requests 600] [--base-requests 100] [--repeat 2] [--step-ms 200] [--keep]

``bench/instructions.py`` counts ``bench_short.py``'s path (route handler to the engine client's
streams, no sockets). This one serves the tiny model with ``vllm-frontend serve`` under
callgrind in front of the mock engine (``--precise-steps``); the mock and the load client (this
process: ``--concurrency`` keep-alive connections, issue 19's short bodies: 32-token prompts,
4 output tokens) run outside valgrind. After a warm-up, each measurement zeroes callgrind's
counters (``callgrind_control -z``), sends a fixed number of requests and dumps the counters
(``-d``): the instructions of that window, every thread of the frontend. A window of
``--base-requests`` and one of ``--base-requests + --requests`` give the instructions per
request as their difference over ``--requests`` (connection set-up and idle work at the
windows' edges cancel). ``--repeat`` measures each pair again in the same server.

Batching is what the count depends on besides the code: each engine step the frontend sees
costs it ~36 thousand instructions (reading and routing the output message, waking its
consumers), whatever it carries. The frontend runs ~50 times slower under valgrind, so with
the benchmark's 1 ms steps a request saw ~3 steps (at full speed ~0.2) and the count moved by
~5% with the steps per request between runs; with 20 ms steps it saw 0.2-0.8 steps, by the
machine's load, and an A/B moved by ~1.5% with it. The default 200 ms steps make the engine
the bottleneck: every step carries an output of each of the ``--concurrency`` requests, so a
request sees 4/32 = 0.125 steps (printed: ``engine steps per request``), and the same tree
measured 538,181 and 538,160 (main 539,625 and 540,225). A heavily loaded machine can still
make the frontend fall behind the steps (0.192 seen with a test run beside it): compare only
runs at ~0.12. A tree takes ~1 minute to start and ~2.5 s per 100 requests (40 requests/s).
Instructions are not time: the kernel's side of the syscalls is not in them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import glob
import json
import os
import pathlib
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.frontends import (  # noqa: E402
    Proc,
    await_fastokens,
    free_port,
    mock_engine_command,
    spawn,
    tiny_model,
    wait_healthy,
)
from bench.instructions import source_tree  # noqa: E402

_PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions", "health": "/health"}
_TOTALS = re.compile(r"^(?:summary|totals):\s+(\d+)", re.MULTILINE)


def bodies(
    model: pathlib.Path, route: str, n: int = 64, seed: int = 0, max_tokens: int = 4
) -> list[bytes]:
    """``n`` request bodies of issue 19's short rows: 32 random tokens as text, 4 output tokens
    (or ``max_tokens``)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model / "tokenizer.json"))
    special = set(tok.get_added_tokens_decoder())
    rng = random.Random(seed)
    vocab = [i for i in range(tok.get_vocab_size(with_added_tokens=False)) if i not in special]
    out = []
    for _ in range(n):
        text = tok.decode([rng.choice(vocab) for _ in range(32)])
        payload: dict[str, Any] = (
            {"messages": [{"role": "user", "content": text}]}
            if route == "chat"
            else {"prompt": text}
        )
        payload |= {
            "model": str(model),
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "temperature": 0,
        }
        out.append(json.dumps(payload).encode())
    return out


def request_bytes(path: str, body: bytes) -> bytes:
    """One keep-alive HTTP/1.1 POST of a JSON ``body``, as a load client sends it (a GET
    without a body for an empty one)."""
    if not body:
        return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """Status and body of one Content-Length-framed HTTP/1.1 response."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    return status, await reader.readexactly(length)


async def closed_loop(
    port: int, path: str, payloads: Sequence[bytes], n: int, concurrency: int
) -> None:
    """Send ``n`` requests over ``concurrency`` keep-alive connections, each sending its next
    request when the previous answer is in; raise on any status but 200."""
    left = n
    turn = 0

    async def connection() -> None:
        nonlocal left, turn
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while left > 0:
                left -= 1
                writer.write(request_bytes(path, payloads[turn % len(payloads)]))
                turn += 1
                status, data = await read_response(reader)
                if status != 200:
                    raise RuntimeError(f"status {status}: {data[:300]!r}")
        finally:
            writer.close()

    await asyncio.gather(*(connection() for _ in range(min(concurrency, n))))


def callgrind_control(pid: int, flag: str) -> None:
    """``callgrind_control flag pid`` (``-z`` zero, ``-d`` dump); raises when it fails."""
    out = subprocess.run(["callgrind_control", flag, str(pid)], capture_output=True, text=True)
    if out.returncode != 0 or "OK" not in out.stdout:
        raise RuntimeError(f"callgrind_control {flag} failed: {out.stdout}{out.stderr}")


def dumped_total(prefix: str, before: set[str]) -> int:
    """Instructions in the newest dump ``prefix``.N that is not in ``before``."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        new = sorted(set(glob.glob(prefix + ".*")) - before, key=lambda p: int(p.rsplit(".", 1)[1]))
        if new:
            text = pathlib.Path(new[-1]).read_text(errors="replace")
            match = _TOTALS.search(text)
            if match is not None:
                return int(match.group(1))
        time.sleep(0.2)
    raise RuntimeError(f"no callgrind dump under {prefix}")


def mock_counters(stats: pathlib.Path) -> dict[str, Any]:
    """The mock engine's last report (requests, steps, output tokens)."""
    for _ in range(50):
        with contextlib.suppress(OSError, ValueError):
            data: dict[str, Any] = json.loads(stats.read_text())
            return data
        time.sleep(0.1)
    return {}


@contextlib.contextmanager
def served(
    src: pathlib.Path, model: pathlib.Path, work: pathlib.Path, tag: str, step_ms: float
) -> Iterator[tuple[Proc, int, pathlib.Path, str]]:
    """The frontend of ``src`` under callgrind in front of a precise 1 ms mock engine: the
    frontend, its HTTP port, the mock's stats file, callgrind's dump prefix."""
    port, handshake = free_port(), free_port()
    stats = work / f"mock-{tag}.json"
    flags = ["--precise-steps", "--report-interval", "0.2"]
    mock = spawn(
        f"mock-{tag}", [*mock_engine_command(handshake, 1, step_ms, stats_file=stats), *flags], work
    )
    prefix = str(work / f"callgrind-{tag}")
    argv = ["env", "PYTHONHASHSEED=0", f"PYTHONPATH={src}{os.pathsep}{REPO}",
            "valgrind", "--tool=callgrind", f"--callgrind-out-file={prefix}",
            "--dump-instr=no", "--compress-strings=no",
            sys.executable, "-m", "vllm_frontend", "serve", str(model), "--port", str(port),
            "--data-parallel-size-local", "0", "--data-parallel-size", "1",
            "--data-parallel-rpc-port", str(handshake)]  # fmt: skip
    fe: Proc | None = None
    try:
        time.sleep(1.0)
        fe = spawn(f"frontend-{tag}", argv, work, role="frontend")
        wait_healthy(fe, port, timeout=900.0)
        await_fastokens(fe.log, timeout=600.0)  # its background load is not a request's work
        yield fe, port, stats, prefix
    finally:
        if fe is not None:
            fe.stop()
        mock.stop()


def measure(
    fe: Proc,
    port: int,
    stats: pathlib.Path,
    prefix: str,
    path: str,
    payloads: Sequence[bytes],
    n: int,
    concurrency: int,
) -> tuple[int, int]:
    """Instructions of a window of ``n`` requests, and the engine steps it took."""
    pid = fe.pid  # valgrind's (``env`` execs it)
    before = set(glob.glob(prefix + ".*"))
    steps0 = mock_counters(stats).get("steps", 0)
    callgrind_control(pid, "-z")
    asyncio.run(closed_loop(port, path, payloads, n, concurrency))
    callgrind_control(pid, "-d")
    time.sleep(0.5)
    steps1 = mock_counters(stats).get("steps", 0)
    return dumped_total(prefix, before), steps1 - steps0


def run_tree(
    name: str,
    src: pathlib.Path,
    model: pathlib.Path,
    work: pathlib.Path,
    args: argparse.Namespace,
    payloads: Sequence[bytes],
) -> list[float]:
    """Instructions per request of ``src``, ``args.repeat`` times in one server."""
    path = _PATHS[args.route]
    out = []
    with served(src, model, work, name.split()[0], args.step_ms) as (fe, port, stats, prefix):
        asyncio.run(closed_loop(port, path, payloads, args.warm_up, args.concurrency))
        for _ in range(args.repeat):
            small, s_steps = measure(
                fe, port, stats, prefix, path, payloads, args.base_requests, args.concurrency
            )
            large, l_steps = measure(
                fe,
                port,
                stats,
                prefix,
                path,
                payloads,
                args.base_requests + args.requests,
                args.concurrency,
            )
            out.append((large - small) / args.requests)
            steps = (l_steps - s_steps) / args.requests
            print(
                f"{name}: {out[-1]:,.0f} instructions per request "
                f"(windows {small:,} / {large:,}; engine steps per request {steps:.3f})",
                flush=True,
            )
    return out


def main() -> None:
    """Print the frontend's instructions per request for this checkout (and ``--baseline``)."""
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--baseline", default=None, help="git ref to compare with")
    p.add_argument(
        "--route",
        choices=tuple(_PATHS),
        default="completions",
        help="health: GET /health, the HTTP transport's and app's floor (no engine request)",
    )
    p.add_argument("--requests", type=int, default=600)
    p.add_argument("--base-requests", type=int, default=100)
    p.add_argument("--warm-up", type=int, default=100)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--max-tokens", type=int, default=4, help="output tokens per request")
    p.add_argument("--step-ms", type=float, default=200.0, help="the mock engine's step period")
    p.add_argument(
        "--keep", action="store_true", help="keep the callgrind dumps and logs (path printed)"
    )
    p.add_argument("--repeat", type=int, default=1, help="measure each tree this many times")
    args = p.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("valgrind (with callgrind_control) is not installed")
    model = tiny_model()
    payloads = (
        [b""] if args.route == "health" else bodies(model, args.route, max_tokens=args.max_tokens)
    )
    trees = {"ours": source_tree(None)}
    if args.baseline is not None:
        trees[f"base ({args.baseline})"] = source_tree(args.baseline)
    work = pathlib.Path(tempfile.mkdtemp(prefix="vllm-frontend-serve-instr-"))
    results = {
        name: run_tree(name, src, model, work, args, payloads) for name, src in trees.items()
    }
    if args.baseline is not None:
        ours, base = (min(v) for v in results.values())
        print(f"ours ÷ base: {ours / base:.4f} (lowest of {args.repeat} each)")
    if args.keep:
        print(f"dumps and logs kept in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

"""``vllm-frontend mock-engine``: run mock engines that join a frontend's handshake.

The process reports its own CPU time (user + system, all threads) so that benchmarks can
subtract it: a line on stderr every ``--report-interval`` seconds and at exit, and a JSON file
(``--stats-file``) rewritten at every report and at exit.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import signal
import sys
import time
from types import FrameType
from typing import TYPE_CHECKING, Any

from vllm_frontend.mock.core import MockEngineOptions

if TYPE_CHECKING:
    from vllm_frontend.mock.engine import MockEngineGroup

__all__ = ["add_arguments", "main", "run"]

logger = logging.getLogger("vllm_frontend.mock")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the mock engine's flags to ``parser``."""
    parser.add_argument(
        "--handshake-address",
        required=True,
        help="the frontend's handshake ROUTER, e.g. tcp://127.0.0.1:29550 "
        "(vLLM's --data-parallel-address/--data-parallel-rpc-port)",
    )
    parser.add_argument("--engine-count", type=int, default=1, help="engines in this process")
    parser.add_argument(
        "--engine-start-index", type=int, default=0, help="global index of the first engine"
    )
    parser.add_argument(
        "--data-parallel-size",
        type=int,
        default=None,
        help="global DP size reported by the engines (default: start index + count)",
    )
    parser.add_argument("--vocab-size", type=int, default=128000, help="token ids are < this")
    parser.add_argument("--tokens-per-step", type=int, default=1, help="new tokens per step")
    parser.add_argument(
        "--step-ms", type=float, default=5.0, help="step period in ms (0: as fast as possible)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the token generator")
    parser.add_argument("--max-model-len", type=int, default=8192)
    parser.add_argument("--num-gpu-blocks", type=int, default=1_000_000, help="KV blocks")
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--max-num-seqs", type=int, default=1024, help="running request cap")
    parser.add_argument("--max-num-batched-tokens", type=int, default=8192)
    parser.add_argument("--dtype", default="bfloat16", help="model dtype to report")
    parser.add_argument(
        "--precise-steps",
        action="store_true",
        help="step on the clock (a sleep waits out the last fraction of a millisecond) instead "
        "of polling for whole milliseconds, which runs a step up to 1 ms late unless an input "
        "arrives",
    )
    parser.add_argument(
        "--disable-log-stats",
        action="store_true",
        help="send no scheduler stats or request events (like the real engine flag)",
    )
    parser.add_argument(
        "--die-after-requests",
        type=int,
        default=None,
        metavar="N",
        help="fault injection: once an engine has received N requests it runs one more step, "
        "sends ENGINE_CORE_DEAD to every frontend and the process exits with status 1",
    )
    parser.add_argument(
        "--mm-cache-misses",
        action="store_true",
        help="fault injection: every multimodal item sent without data is an engine cache miss "
        "(the request finishes with ERROR and mm_cache_miss_hashes, as vLLM's engine answers)",
    )
    parser.add_argument(
        "--record-requests",
        default=None,
        metavar="PATH",
        help="append every ADD request's frames to PATH (for tests comparing frontends)",
    )
    parser.add_argument(
        "--script-tokens",
        default=None,
        metavar="PATH",
        help="scripted output: every request emits the token ids of this JSON list in order "
        "(wrapping around) instead of random ids",
    )
    parser.add_argument(
        "--stats-file", default=None, help="write CPU time and counters as JSON here"
    )
    parser.add_argument(
        "--report-interval",
        type=float,
        default=10.0,
        help="seconds between CPU reports on stderr (0: only at exit)",
    )
    parser.add_argument("--log-level", default="INFO", help="logging level")


def _options(args: argparse.Namespace) -> MockEngineOptions:
    for name in ("engine_count", "vocab_size", "tokens_per_step", "max_model_len"):
        if getattr(args, name) < 1:
            raise SystemExit(f"mock-engine: --{name.replace('_', '-')} must be at least 1")
    if args.step_ms < 0:
        raise SystemExit("mock-engine: --step-ms must not be negative")
    if args.engine_start_index < 0:
        raise SystemExit("mock-engine: --engine-start-index must not be negative")
    if args.die_after_requests is not None and args.die_after_requests < 1:
        raise SystemExit("mock-engine: --die-after-requests must be at least 1")
    dp = args.data_parallel_size or args.engine_start_index + args.engine_count
    if dp < args.engine_start_index + args.engine_count:
        raise SystemExit("mock-engine: --data-parallel-size is smaller than the engine indices")
    if not args.handshake_address.startswith(("tcp://", "ipc://", "inproc://")):
        raise SystemExit(
            f"mock-engine: --handshake-address must be a ZMQ endpoint such as "
            f"tcp://HOST:PORT, got {args.handshake_address!r}"
        )
    return MockEngineOptions(
        vocab_size=args.vocab_size,
        tokens_per_step=args.tokens_per_step,
        step_ms=args.step_ms,
        precise_steps=args.precise_steps,
        seed=args.seed,
        max_model_len=args.max_model_len,
        data_parallel_size=dp,
        log_stats=not args.disable_log_stats,
        num_gpu_blocks=args.num_gpu_blocks,
        block_size=args.block_size,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        dtype=args.dtype,
        die_after_requests=args.die_after_requests,
        mm_cache_misses=args.mm_cache_misses,
        record_requests=args.record_requests,
        script=_script(args.script_tokens, args.vocab_size),
    )


def _script(path: str | None, vocab_size: int) -> tuple[int, ...] | None:
    """The token ids of ``--script-tokens`` (None without it), checked against the vocabulary."""
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            ids = json.load(f)
    except (OSError, ValueError) as exc:
        raise SystemExit(f"mock-engine: cannot read --script-tokens {path}: {exc}") from None
    if (
        not isinstance(ids, list)
        or not ids
        or not all(type(t) is int and 0 <= t < vocab_size for t in ids)
    ):
        raise SystemExit(
            f"mock-engine: --script-tokens {path} must hold a non-empty JSON list of token ids "
            f"in [0, {vocab_size})"
        )
    return tuple(ids)


def cpu_seconds() -> tuple[float, float]:
    """This process's (user, system) CPU seconds, all threads included."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def _report(
    group: MockEngineGroup, started: float, stats_file: str | None, final: bool
) -> dict[str, Any]:
    utime, stime = cpu_seconds()
    cpu = utime + stime
    totals = group.totals()
    tokens = totals["output_tokens"]
    at_ready = group.cpu_at_ready
    serving = None if at_ready is None else cpu - at_ready
    report: dict[str, Any] = {
        "pid": os.getpid(),
        "final": final,
        "wall_seconds": round(time.monotonic() - started, 6),
        "utime": utime,
        "stime": stime,
        "cpu_seconds": cpu,
        # CPU spent since every engine completed its handshake (excludes imports and startup).
        "cpu_seconds_serving": serving,
        **totals,
        "cpu_us_per_output_token": round(serving / tokens * 1e6, 3)
        if tokens and serving is not None
        else None,
        "engines": {str(i): c for i, c in group.per_engine().items()},
    }
    per = report["cpu_us_per_output_token"]
    print(
        f"mock-engine cpu: utime={utime:.3f}s stime={stime:.3f}s cpu={cpu:.3f}s "
        f"serving={'-' if serving is None else f'{serving:.3f}s'} "
        f"requests={totals['requests']} output_tokens={tokens} steps={totals['steps']} "
        f"cpu_us_per_output_token={per}" + (" (exit)" if final else ""),
        file=sys.stderr,
        flush=True,
    )
    if stats_file:
        tmp = f"{stats_file}.tmp"
        with open(tmp, "w") as f:
            json.dump(report, f, indent=1)
        os.replace(tmp, stats_file)
    return report


def run(args: argparse.Namespace) -> int:
    """Run the engines until SIGTERM/SIGINT (exit 0) or an injected death (exit 1)."""
    from vllm_frontend.mock.engine import MockEngineGroup

    options = _options(args)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    indices = range(args.engine_start_index, args.engine_start_index + args.engine_count)
    group = MockEngineGroup(args.handshake_address, indices, options)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        logger.info("received %s, shutting down", signal.Signals(signum).name)
        group.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    started = time.monotonic()
    logger.info(
        "mock engines %d..%d joining %s (vocab %d, %d token(s)/step, step %.3g ms)",
        indices[0],
        indices[-1],
        args.handshake_address,
        options.vocab_size,
        options.tokens_per_step,
        options.step_ms,
    )
    group.start()
    interval = args.report_interval if args.report_interval > 0 else None
    while not group.wait(interval):
        _report(group, started, args.stats_file, final=False)
    group.join(timeout=10.0)
    _report(group, started, args.stats_file, final=True)
    if group.died.is_set() or group.errors:
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry point (``python -m vllm_frontend.mock.cli``)."""
    parser = argparse.ArgumentParser(prog="vllm-frontend mock-engine", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())

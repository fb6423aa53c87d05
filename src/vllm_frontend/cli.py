"""Command line entry point: ``vllm-frontend {frontend,serve,render,mock-engine}``.

``frontend`` is what ``vllm serve`` launches with ``VLLM_USE_RUST_FRONTEND=1
VLLM_RUST_FRONTEND_PATH=$(which vllm-frontend)``; ``serve`` starts (or joins) headless engines
itself; ``render`` serves the render routes without engines. Heavy modules are imported only by
the subcommand that needs them.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import sys
from collections.abc import Iterator, Sequence


def _add_frontend_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from vllm_frontend.cmd.serve_args import add_http_limit_arguments

    p = sub.add_parser(
        "frontend",
        help="serve HTTP for engines launched by `vllm serve` (inherited listening sockets)",
        description="Run as vLLM's external frontend: the flags `vllm serve` 0.32 passes.",
    )
    p.add_argument("--listen-fd", type=int, required=True, help="inherited HTTP socket (bound)")
    p.add_argument("--input-listener-fd", type=int, required=True)
    p.add_argument("--output-listener-fd", type=int, required=True)
    p.add_argument("--engine-start-index", type=int, default=0)
    p.add_argument("--engine-count", type=int, default=1)
    p.add_argument("--data-parallel-size", type=int, default=None)
    p.add_argument("--grpc-listen-fd", type=int, default=None)
    p.add_argument("--coordinator-address", default=None)
    p.add_argument("--args-json", required=True, help="the vllm serve arguments as JSON")
    add_http_limit_arguments(p, defaults=False)  # override what --args-json says
    # Set by `serve --api-server-count N` for each of its N frontends (not by `vllm serve`).
    p.add_argument("--client-index", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--client-count", type=int, default=1, help=argparse.SUPPRESS)


def build_parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """Build the top-level parser; returns it and the ``serve`` subparser (``render`` takes the
    same options)."""
    from vllm_frontend.cmd.serve_args import add_serve_arguments

    parser = argparse.ArgumentParser(prog="vllm-frontend", description=__doc__)
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command")
    _add_frontend_parser(sub)
    serve = sub.add_parser(
        "serve",
        help="serve MODEL behind managed (or, with --data-parallel-size-local 0, external) engines",
        description="Serve MODEL. Unknown options, and everything after --, go to the engines.",
    )
    add_serve_arguments(serve)
    render = sub.add_parser(
        "render",
        help="serve MODEL's render routes without engines (as `vllm launch render`)",
        description="Render chat and completion requests into token ids, without engines.",
    )
    add_serve_arguments(render)
    sub.add_parser(
        "mock-engine",
        help="run a mock EngineCore for load tests (see `mock-engine --help`)",
        add_help=False,
    )
    return parser, serve


@contextlib.contextmanager
def _server_imports() -> Iterator[None]:
    """Import the server's modules faster.

    The imports allocate ~70k long-lived objects: collecting among them is wasted, and so is
    rescanning them later, so GC is paused and they are frozen (~30 ms less; ~0.2 MB of import
    garbage stays). numpy's OpenBLAS would start a thread per core as it loads (15-60 ms, more
    on a busy host); the frontend's few matrix products (torch-style resizes) run on its media
    threads, one BLAS thread each. Only this process is affected:
    the environment is restored for children (a managed engine keeps its BLAS threads)."""
    blas = "OPENBLAS_NUM_THREADS"
    set_blas = blas not in os.environ and "numpy" not in sys.modules
    if set_blas:
        os.environ[blas] = "1"
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()
        if set_blas:
            os.environ.pop(blas, None)


def _exit_code(code: int) -> int:
    from vllm_frontend.cmd.process import exit_code

    return exit_code(code)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI and return the process exit code (a server subcommand stopped while its
    tokenizer's background load runs ends the process itself, see
    :func:`vllm_frontend.cmd.process.exit_code`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, serve_parser = build_parser()
    if argv and argv[0] == "serve":
        with _server_imports():
            from vllm_frontend.cmd.runner import run_serve
        from vllm_frontend.cmd.serve_args import parse_serve_args

        return _exit_code(run_serve(parse_serve_args(serve_parser, argv[1:])))
    if argv and argv[0] == "render":
        with _server_imports():
            from vllm_frontend.cmd.render import run_render
        from vllm_frontend.cmd.serve_args import parse_serve_args

        return _exit_code(run_render(parse_serve_args(serve_parser, argv[1:])))
    if argv and argv[0] == "mock-engine":
        from vllm_frontend.mock.cli import main as mock_main

        return mock_main(argv[1:])
    args = parser.parse_args(argv)
    if args.version:
        from vllm_frontend import __version__

        print(__version__)
        return 0
    if args.command == "frontend":
        with _server_imports():
            from vllm_frontend.cmd.runner import run_frontend

        return _exit_code(run_frontend(args))
    parser.print_help(sys.stderr)
    return 2

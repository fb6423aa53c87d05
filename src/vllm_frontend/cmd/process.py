"""What every ``vllm-frontend`` process runner shares: the event loop, startup-failure exits and
the environment that ties ``--api-server-count`` children together."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import sys
from collections.abc import Awaitable

__all__ = ["METRICS_DIR_ENV", "exit_code", "fail", "run_event_loop"]

METRICS_DIR_ENV = "VLLM_FRONTEND_API_SERVER_METRICS_DIR"
"""Set by the ``--api-server-count`` supervisor for its children: the private directory where
each one serves its own metrics to the others, so that any of them answers ``/metrics`` for all
(as vLLM's ``PROMETHEUS_MULTIPROC_DIR``)."""


def run_event_loop(main: Awaitable[int]) -> int:
    """Run ``main`` to completion on uvloop (asyncio's loop where uvloop is missing)."""
    try:
        import uvloop

        return uvloop.run(main)  # type: ignore[arg-type]
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return asyncio.run(main)  # type: ignore[arg-type]


def fail(message: str, code: int) -> int:
    """Print a startup failure the way argparse does (no traceback) and return exit ``code``."""
    print(f"vllm-frontend: error: {message}", file=sys.stderr)
    return code


def exit_code(code: int) -> int:
    """Return ``code`` for a serving process's exit, or, while a ``fastokens`` load is still
    running (a server stopped seconds after it began serving), end the process now with it.

    The interpreter's finalisation must not meet a load running in native code (it can abort
    the process), so a normal exit waits for the load, up to 10 s. Once the server has stopped,
    nothing but the exit is left to do: the ``atexit`` work (logging's flush, the OTLP
    exporter's, ...) runs here, stdio is flushed and the process leaves without finalising."""
    if "vllm_frontend.text.tokenizer" not in sys.modules:  # no tokenizer, no load
        return code
    from vllm_frontend.text.tokenizer import leave_fast_encoder_loads

    if not leave_fast_encoder_loads():
        return code
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # closed, or a broken pipe
            stream.flush()
    os._exit(code)

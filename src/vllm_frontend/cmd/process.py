"""What every ``vllm-frontend`` process runner shares: the event loop, startup-failure exits and
the environment that ties ``--api-server-count`` children together."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable

__all__ = ["METRICS_DIR_ENV", "fail", "run_event_loop"]

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

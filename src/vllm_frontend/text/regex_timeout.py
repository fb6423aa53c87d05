"""A regex build bounded in time as vLLM 0.32 bounds it (``compile_regex_with_timeout`` in
vllm/v1/structured_output/utils.py): ``VLLM_REGEX_COMPILATION_TIMEOUT_S`` seconds (5; 0 or less:
unbounded), in a worker thread left running when it overruns, with vLLM's timeout message.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

__all__ = ["build_regex_with_timeout"]


def build_regex_with_timeout(build: Callable[[str], object], regex: str) -> None:
    """Run ``build(regex)``, re-raising what it raises; ValueError (vLLM's text) on a timeout."""
    timeout = int(os.environ.get("VLLM_REGEX_COMPILATION_TIMEOUT_S", "5"))
    if timeout <= 0:
        build(regex)
        return
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            build(regex)
        except BaseException as e:  # handed to the waiting request
            outcome.append(e)
        else:
            outcome.append(None)

    worker = threading.Thread(target=run, name="regex-build", daemon=True)
    worker.start()
    worker.join(timeout)
    if not outcome:
        raise ValueError(
            f"Regex compilation timed out after {timeout}s. The pattern may be too complex or "
            "contain constructs that cause exponential state-space explosion (e.g. nested "
            f"quantifiers). Pattern: {regex[:200]}"
        )
    if outcome[0] is not None:
        raise outcome[0]

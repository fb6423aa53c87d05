"""``vllm`` (the CLI) whose EngineCore processes fork from the launching process instead of
starting a fresh interpreter, for the tests' CPU engines.

vLLM's CPU platform sets ``VLLM_WORKER_MULTIPROC_METHOD=spawn`` for its multiprocessing
executor's workers (``CpuPlatform.check_and_update_config``); the tests' engines have none
(``VLLM_ENABLE_V1_MULTIPROCESSING=0`` keeps the worker inside EngineCore, see
tests/support/engines.py), but the setting also makes every EngineCore process (of a headless
launcher, of an API server) a spawned interpreter that imports torch and vLLM again: on two
cores a fifth of an engine's start. Forked, the EngineCore runs the same code on the same
configuration (vLLM forks it so itself where nothing forces spawn, e.g. on a GPU host before
CUDA is initialised); OpenMP has started no threads to lose (``OMP_NUM_THREADS=1``).

Run as ``python tests/support/vllm_forking_cli.py ARGS`` (what ``vllm ARGS`` runs)."""

from __future__ import annotations

import os
import sys
from typing import Any

# (the script's directory, tests/support, holds modules whose names could shadow vLLM's imports)
if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]


def _fork_engine_cores() -> None:
    from vllm.platforms.cpu import CpuPlatform

    update = CpuPlatform.check_and_update_config.__func__  # type: ignore[attr-defined]

    def check_and_update_config(cls: Any, vllm_config: Any) -> None:
        update(cls, vllm_config)
        if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0":
            os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "fork"

    CpuPlatform.check_and_update_config = classmethod(check_and_update_config)  # type: ignore[method-assign,assignment]


if __name__ == "__main__":
    _fork_engine_cores()
    from vllm.entrypoints.cli.main import main

    sys.exit(main())

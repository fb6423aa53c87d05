"""Mock EngineCore for load-testing frontends without a GPU (``vllm-frontend mock-engine``).

It joins a frontend-owned handshake exactly as headless vLLM 0.32 engines do and then behaves
like an engine whose model is free: prefill is instant, every step (``--step-ms``) gives each
running request ``--tokens-per-step`` random token ids below ``--vocab-size``, and requests
finish at ``max_tokens`` / ``max_model_len`` or on a sampled stop id. Works behind vLLM's own
frontend, vllm-rs and ours (``--data-parallel-size-local 0`` on the frontend side)::

    vllm-frontend mock-engine --handshake-address tcp://127.0.0.1:29550 --engine-count 2 \\
        --step-ms 5 --stats-file /tmp/mock.json

Layers: :mod:`~vllm_frontend.mock.core` (sans-IO scheduler), :mod:`~vllm_frontend.mock.engine`
(ZMQ threads, one per engine), :mod:`~vllm_frontend.mock.cli` (flags, signals, CPU report).
"""

from vllm_frontend.mock.core import MockEngineCore, MockEngineOptions
from vllm_frontend.mock.engine import MockEngineGroup

__all__ = ["MockEngineCore", "MockEngineGroup", "MockEngineOptions"]

"""Token-in / token-out generation over the engine client: ids, n>1 fan-out, and the
adapter feeding engine steps to the request metrics (``vllm_frontend.metrics``)."""

from vllm_frontend.llm.generate import (
    FINISH_REASONS,
    LLM,
    EngineClientLike,
    GenerateRequest,
    GenerationStream,
    OutputKind,
    SampleOutput,
    TokenConsumer,
)
from vllm_frontend.llm.ids import (
    base_request_id,
    child_request_id,
    engine_request_id,
    public_request_id,
)

__all__ = [
    "FINISH_REASONS",
    "LLM",
    "EngineClientLike",
    "GenerateRequest",
    "GenerationStream",
    "OutputKind",
    "SampleOutput",
    "TokenConsumer",
    "base_request_id",
    "child_request_id",
    "engine_request_id",
    "public_request_id",
]

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
from vllm_frontend.llm.lora import AdapterLoadFailed, LoraAdapters

__all__ = [
    "FINISH_REASONS",
    "LLM",
    "AdapterLoadFailed",
    "EngineClientLike",
    "GenerateRequest",
    "GenerationStream",
    "LoraAdapters",
    "OutputKind",
    "SampleOutput",
    "TokenConsumer",
    "base_request_id",
    "child_request_id",
    "engine_request_id",
    "public_request_id",
]

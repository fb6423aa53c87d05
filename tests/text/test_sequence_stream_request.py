"""A text request's engine request: each field the text layer hands a prompt's
``SequenceStream`` (positionally) reaches the ``GenerateRequest`` it starts as the text
request's field of the same meaning."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.support.tiny_model import tiny_model_dir

from vllm_frontend.engine.protocol import EngineCoreRequest
from vllm_frontend.llm import LLM
from vllm_frontend.llm.generate import GenerateRequest
from vllm_frontend.text.llm import TextLlm, TextRequest
from vllm_frontend.text.sampling import ModelSamplingInfo, SamplingRequest
from vllm_frontend.text.tokenizer import Tokenizer


class _CapturingLLM(LLM):
    """An LLM that keeps the requests it is asked to start (and starts none)."""

    seen: list[GenerateRequest]

    def generate(self, request: GenerateRequest) -> Any:
        self.seen.append(request)
        return None


def test_the_engine_request_carries_the_text_requests_fields() -> None:
    tokenizer = Tokenizer.from_dir(tiny_model_dir())
    llm = _CapturingLLM(None, EngineCoreRequest)  # type: ignore[arg-type]
    llm.seen = []
    sampling = ModelSamplingInfo(max_model_len=128, eos_token_id=tokenizer.eos_token_id)
    text = TextLlm(llm, tokenizer, 128, sampling)
    request = TextRequest(
        request_id="req",
        sampling=SamplingRequest(n=2, temperature=1.0, skip_special_tokens=False),
        prompt="hi",
        max_tokens=4,
        numbered=True,
        priority=7,
        data_parallel_rank=1,
        cache_salt="salt",
        reasoning_ended=False,
        reasoning_parser_kwargs={"parser": 1},
        trace_headers={"traceparent": "t"},
    )
    generation = asyncio.run(text.generate(request))
    generation.source(0)
    [seen] = llm.seen
    assert seen.request_id == "req-0"
    assert seen.n == 2
    assert seen.prompt_token_ids == generation.prompts[0].token_ids
    assert seen.sampling_params is generation.params[0]
    assert seen.sampling_params.skip_special_tokens is False
    assert seen.priority == 7
    assert seen.data_parallel_rank == 1
    assert seen.cache_salt == "salt"
    assert seen.lora_request is None
    assert seen.reasoning_ended is False
    assert seen.reasoning_parser_kwargs == {"parser": 1}
    assert seen.trace_headers == {"traceparent": "t"}

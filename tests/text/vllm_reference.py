"""Drive vLLM's real OutputProcessor (test-only import) with the same engine outputs as ours."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class RefOutput:
    text: str
    token_ids: list[int]
    finish_reason: str | None
    stop_reason: int | str | None
    logprobs: Any
    prompt_logprobs: Any
    aborted_engine: bool


def vllm_engine_request(prompt: list[int], params: Any) -> Any:
    """vLLM's EngineCoreRequest for one prompt with ``params`` (id "req")."""
    from vllm.v1.engine import EngineCoreRequest

    return EngineCoreRequest(
        request_id="req",
        prompt_token_ids=list(prompt),
        mm_features=None,
        sampling_params=params,
        pooling_params=None,
        arrival_time=0.0,
        lora_request=None,
        cache_salt=None,
        data_parallel_rank=None,
        external_req_id="req",
    )


class VllmSequence:
    """One request in vLLM's OutputProcessor; feed engine outputs, read RequestOutputs."""

    def __init__(self, hf_tokenizer: Any, prompt: list[int], params: Any) -> None:
        from vllm.v1.engine.output_processor import OutputProcessor

        self._op = OutputProcessor(hf_tokenizer, log_stats=False)
        self._request = vllm_engine_request(prompt, params)
        self._op.add_request(self._request, prompt=None)

    def step(
        self,
        new_token_ids: list[int],
        finish_reason: int | None = None,
        stop_reason: int | str | None = None,
        logprobs: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
        prompt_logprobs: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    ) -> RefOutput | None:
        import torch
        from vllm.v1.engine import EngineCoreOutput, FinishReason
        from vllm.v1.outputs import LogprobsLists, LogprobsTensors

        out = EngineCoreOutput(
            request_id="req",
            new_token_ids=list(new_token_ids),
            finish_reason=None if finish_reason is None else FinishReason(finish_reason),
            stop_reason=stop_reason,
            new_logprobs=None if logprobs is None else LogprobsLists(*logprobs),
            new_prompt_logprobs_tensors=None
            if prompt_logprobs is None
            else LogprobsTensors(*(torch.from_numpy(np.asarray(a)) for a in prompt_logprobs)),
        )
        result = self._op.process_outputs([out])
        if not result.request_outputs:
            return None
        (ro,) = result.request_outputs
        (co,) = ro.outputs
        return RefOutput(
            text=co.text,
            token_ids=list(co.token_ids),
            finish_reason=co.finish_reason,
            stop_reason=co.stop_reason,
            logprobs=co.logprobs,
            prompt_logprobs=ro.prompt_logprobs,
            aborted_engine=bool(result.reqs_to_abort),
        )

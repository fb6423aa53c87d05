"""``--enable-log-requests`` writes the sampling parameters as vLLM's ``SamplingParams``
repr writes them (compared with vLLM's own object made from the same values), and logs each
prompt's request with the prompt cut to ``--max-log-len`` at DEBUG."""

from __future__ import annotations

import logging

import pytest

from vllm_frontend.engine.protocol import SamplingParams, StructuredOutputsParams
from vllm_frontend.text.request_log import RequestLog, sampling_params_repr

CASES = [
    {},
    {"n": 2, "temperature": 0.7, "top_p": 0.9, "top_k": 5, "seed": 3, "max_tokens": 7,
     "stop": ["x", "y'"], "stop_token_ids": [1, 2], "logprobs": 2, "prompt_logprobs": 1,
     "min_tokens": 1, "ignore_eos": True, "bad_words": ["bad"], "presence_penalty": 0.5,
     "frequency_penalty": -0.5, "repetition_penalty": 1.1, "min_p": 0.05,
     "skip_special_tokens": False, "include_stop_str_in_output": True,
     "extra_args": {"kv_transfer_params": {"a": 1}}, "thinking_token_budget": 9},
    {"structured_outputs": {"json": {"type": "object"}}},
    {"structured_outputs": {"regex": "a+", "disable_any_whitespace": True}},
]  # fmt: skip


@pytest.mark.oracle
@pytest.mark.parametrize("fields", CASES)
def test_params_are_written_as_vllms_repr(fields: dict[str, object]) -> None:
    from vllm.sampling_params import SamplingParams as VllmSamplingParams
    from vllm.sampling_params import StructuredOutputsParams as VllmStructured

    ours_fields = dict(fields)
    theirs_fields = dict(fields)
    if "structured_outputs" in fields:
        so = fields["structured_outputs"]
        assert isinstance(so, dict)
        ours_fields["structured_outputs"] = StructuredOutputsParams(**so)
        theirs_fields["structured_outputs"] = VllmStructured(**so)
    ours = sampling_params_repr(SamplingParams(**ours_fields))  # type: ignore[arg-type]
    assert ours == repr(VllmSamplingParams(**theirs_fields))  # type: ignore[arg-type]


def test_inputs_are_logged_at_info_and_the_prompt_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="vllm_frontend.text.request_log")
    RequestLog(max_log_len=3).log_inputs("cmpl-1-0", "Hello there", [5, 6, 7, 8], SamplingParams())
    messages = [r.getMessage() for r in caplog.records]
    assert (
        "Request cmpl-1-0 details: prompt: 'Hel', prompt_token_ids: [5, 6, 7], "
        "prompt_embeds shape: None." in messages
    )
    assert any(
        m.startswith("Received request cmpl-1-0: params: SamplingParams(n=1, ")
        and m.endswith(", lora_request: None.")
        for m in messages
    )

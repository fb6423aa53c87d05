"""The text facade checks a request's sampling parameters once, where vLLM does
(``SamplingParams.__post_init__``): the greedy-sampling rule comes after the other checks and
sees the temperature after vLLM raises tiny ones to 0.01."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from tests.support.tiny_model import tiny_model_dir

from vllm_frontend.engine.protocol import EngineCoreRequest
from vllm_frontend.engine.validate import InvalidRequestError
from vllm_frontend.llm import LLM
from vllm_frontend.text.llm import TextLlm, TextRequest
from vllm_frontend.text.sampling import ModelSamplingInfo, SamplingRequest
from vllm_frontend.text.tokenizer import Tokenizer

pytestmark = pytest.mark.oracle  # imports vLLM as the reference


def _text_llm() -> TextLlm:
    tokenizer = Tokenizer.from_dir(tiny_model_dir())
    sampling = ModelSamplingInfo(max_model_len=128, eos_token_id=tokenizer.eos_token_id)
    return TextLlm(LLM(None, EngineCoreRequest), tokenizer, 128, sampling)  # type: ignore[arg-type]


def _generate(**fields: Any) -> Any:
    request = TextRequest(
        request_id="r", prompt="hi", max_tokens=4, sampling=SamplingRequest(**fields)
    )
    return asyncio.run(_text_llm().generate(request))


CASES = [
    {"n": 2, "temperature": 0.0},
    {"n": 2, "temperature": 1e-6},  # raised to 0.01 first: not greedy
    {"n": 2, "temperature": 0.0, "presence_penalty": 5.0},  # the range check comes first
    {"n": 3, "temperature": 0.0, "top_k": -3},
    {"n": 1, "temperature": 0.0},
]


@pytest.mark.parametrize("fields", CASES)
def test_sampling_checks_come_in_vllms_order(fields: dict[str, Any]) -> None:
    from vllm.exceptions import VLLMValidationError
    from vllm.sampling_params import SamplingParams as VllmSamplingParams

    try:
        VllmSamplingParams(max_tokens=4, **fields)
    except (ValueError, VLLMValidationError) as e:
        with pytest.raises(InvalidRequestError) as ours:
            _generate(**fields)
        assert ours.value.args[0] == e.args[0]
        return
    [params] = _generate(**fields).params
    assert params.n == fields["n"]

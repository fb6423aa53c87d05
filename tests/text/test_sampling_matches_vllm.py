"""Request sampling fields become exactly the engine SamplingParams vLLM's frontend builds."""

from __future__ import annotations

import enum
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vllm_frontend.engine.protocol import SamplingParams
from vllm_frontend.text.sampling import (
    InvalidRequestError,
    ModelSamplingInfo,
    SamplingRequest,
    check_prompt_length,
    child_request_id,
    child_sampling_params,
    lower_sampling_params,
    resolve_max_tokens,
)
from vllm_frontend.text.tokenizer import Tokenizer

pytestmark = pytest.mark.oracle  # imports vLLM or transformers as the reference

_OPENAI = {
    "repetition_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": 0,
    "min_p": 0.0,
}


def vllm_lowering(req: SamplingRequest, max_tokens: int, model: ModelSamplingInfo, hf: Any) -> Any:
    """vLLM 0.32's own path: to_sampling_params → from_optional → input processor updates."""
    from vllm.sampling_params import RequestOutputKind
    from vllm.sampling_params import SamplingParams as VllmSamplingParams

    d = model.sampling_defaults
    values = {
        k: getattr(req, k) if getattr(req, k) is not None else d.get(k, v)
        for k, v in _OPENAI.items()
    }
    sp = VllmSamplingParams.from_optional(
        n=req.n,
        **values,
        watermarking=req.watermarking,
        seed=req.seed,
        stop=req.stop,
        stop_token_ids=req.stop_token_ids,
        logprobs=req.logprobs,
        prompt_logprobs=req.prompt_logprobs,
        ignore_eos=req.ignore_eos,
        max_tokens=max_tokens,
        min_tokens=req.min_tokens,
        skip_special_tokens=req.skip_special_tokens,
        spaces_between_special_tokens=req.spaces_between_special_tokens,
        include_stop_str_in_output=req.include_stop_str_in_output,
        output_kind=RequestOutputKind.DELTA if req.stream else RequestOutputKind.FINAL_ONLY,
        logit_bias=req.logit_bias,
        bad_words=req.bad_words,
        allowed_token_ids=req.allowed_token_ids,
        skip_clone=True,
    )
    sp.update_from_generation_config(
        {"eos_token_id": model.generation_eos_token_ids}, model.eos_token_id
    )
    sp.update_from_tokenizer(hf)
    # The input processor's watermark resolution, on an engine without a watermark config.
    from types import SimpleNamespace

    from vllm.config import VllmConfig
    from vllm.v1.engine.input_processor import InputProcessor

    config = SimpleNamespace(watermark_config=None, speculative_config=None)
    resolved = VllmConfig._check_supports_watermarking(config, sp)  # type: ignore[arg-type]
    InputProcessor.apply_watermarking(SimpleNamespace(vllm_config=config), sp, resolved)  # type: ignore[arg-type]
    return sp


def wire_view(params: Any) -> dict[str, Any]:
    out = {}
    for f in msgspec.structs.fields(SamplingParams):
        value = getattr(params, f.name)
        if isinstance(value, enum.Enum):
            value = value.value
        if isinstance(value, set):
            value = list(value)
        out[f.encode_name] = value
    return out


def vllm_wire_view(sp: Any) -> dict[str, Any]:
    out = {}
    for f in msgspec.structs.fields(SamplingParams):
        value = getattr(sp, f.encode_name)
        if isinstance(value, enum.Enum):
            value = value.value
        if isinstance(value, set):
            value = list(value)
        out[f.encode_name] = value
    return out


words = st.sampled_from(["hello", " world", "café", "日本", "STOP", "ab", "  x"])
requests = st.builds(
    SamplingRequest,
    n=st.sampled_from([None, 1, 2, 3]),
    temperature=st.sampled_from([None, 0.0, 0.005, 0.7, 1.0, 2.0, 2.5, -0.1]),
    top_p=st.sampled_from([None, 0.5, 1.0, 0.0]),
    top_k=st.sampled_from([None, -1, 0, 5, -2]),
    min_p=st.sampled_from([None, 0.0, 0.3, 1.5]),
    presence_penalty=st.sampled_from([None, 0.0, 1.0, 3.0]),
    repetition_penalty=st.sampled_from([None, 1.0, 1.3, 0.0]),
    seed=st.sampled_from([None, -1, 0, 42]),
    stop=st.one_of(st.none(), words, st.lists(words, max_size=3)),
    stop_token_ids=st.one_of(st.none(), st.lists(st.integers(0, 20), max_size=4)),
    include_stop_str_in_output=st.booleans(),
    ignore_eos=st.booleans(),
    min_tokens=st.sampled_from([0, 1, 5, 50, -1]),
    logprobs=st.sampled_from([None, 0, 3, -1, -2]),
    prompt_logprobs=st.sampled_from([None, 0, 2, -1]),
    logit_bias=st.one_of(
        st.none(), st.dictionaries(st.sampled_from(["1", "2", "x", "7"]), st.floats(-200, 200))
    ),
    bad_words=st.one_of(st.none(), st.lists(words, max_size=3)),
    stream=st.booleans(),
)
models = st.builds(
    lambda eos, gen, temp, topk: ModelSamplingInfo(
        max_model_len=100,
        eos_token_id=eos,
        generation_eos_token_ids=gen,
        sampling_defaults={
            k: v for k, v in (("temperature", temp), ("top_k", topk)) if v is not None
        },
    ),
    st.sampled_from([None, 2, 7]),
    st.lists(st.integers(0, 12), max_size=4),
    st.sampled_from([None, 0.6, 0.0]),
    st.sampled_from([None, 20]),
)


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(req=requests, model=models, max_tokens=st.sampled_from([1, 16, 40]))
def test_engine_sampling_params_equal_vllms(
    ours: Tokenizer, hf: Any, req: SamplingRequest, model: ModelSamplingInfo, max_tokens: int
) -> None:
    from vllm.exceptions import VLLMValidationError

    try:
        expected = vllm_wire_view(vllm_lowering(req, max_tokens, model, hf))
    except (ValueError, VLLMValidationError) as e:
        with pytest.raises(InvalidRequestError) as caught:
            lower_sampling_params(req, max_tokens=max_tokens, model=model, tokenizer=ours)
        assert caught.value.args[0] == e.args[0]  # the message; the (parameter, value) suffix aside
        assert caught.value.parameter == getattr(e, "parameter", None)
        return
    got = wire_view(lower_sampling_params(req, max_tokens=max_tokens, model=model, tokenizer=ours))
    assert got == expected


def test_max_tokens_is_what_the_context_leaves_unless_asked_for_less() -> None:
    from vllm.entrypoints.serve.utils.api_utils import get_max_tokens

    for requested, default, prompt in [(None, None, 10), (5, None, 10), (None, 7, 10), (500, 7, 3)]:
        ours = resolve_max_tokens(requested, prompt, 100, default_max_tokens=default)
        ref = get_max_tokens(100, requested, prompt, {"max_tokens": default} if default else {})
        assert ours == ref


def test_prompt_longer_than_the_context_is_refused_with_vllms_message() -> None:
    from vllm.renderers.params import TokenizeParams

    params = TokenizeParams(max_total_tokens=8, max_output_tokens=0)
    for n in (9, 12):
        with pytest.raises(Exception) as ref:
            params._token_len_check(None, list(range(n)))
        with pytest.raises(InvalidRequestError) as ours:
            check_prompt_length(n, 8, from_text=False)
        assert str(ours.value) == ref.value.args[0]
        assert ours.value.parameter == "input_tokens"
    check_prompt_length(8, 8, from_text=False)


def test_n_choices_get_their_own_ids_and_consecutive_seeds() -> None:
    from vllm.sampling_params import SamplingParams as VllmSamplingParams
    from vllm.v1.engine import EngineCoreRequest
    from vllm.v1.engine.parallel_sampling import ParentRequest

    for seed in (None, 5):
        parent = ParentRequest(
            EngineCoreRequest(
                request_id="abc",
                prompt_token_ids=[1],
                mm_features=None,
                sampling_params=VllmSamplingParams(n=3, seed=seed),
                pooling_params=None,
                arrival_time=0.0,
                lora_request=None,
                cache_salt=None,
                data_parallel_rank=None,
                external_req_id="abc",
            )
        )
        ours = SamplingParams(n=3, seed=seed)
        for i in range(3):
            ref_id, ref_params = parent.get_child_info(i)
            child = child_sampling_params(ours, i)
            assert child_request_id(i, "abc") == ref_id
            assert (child.n, child.seed) == (ref_params.n, ref_params.seed)
        assert ours.n == 3

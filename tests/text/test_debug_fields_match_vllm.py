"""The scoring and replay fields of a token-in/token-out request (``prompt_logprob_token_ids``,
``prompt_logprob_start``, ``trace_decode_token_ids``, ``routed_experts_prompt_start``) are
checked, refused and sent as vLLM 0.32 does: the reference is vLLM's ``SamplingParams``
(``verify`` on a stand-in model config) and its ``InputProcessor`` steps (``_validate_params``
on a stand-in processor, ``_normalize_trace_replay_params``), against
:meth:`TextLlm.generate_tokens`'s lowering and :func:`check_debug_fields`."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from vllm_frontend.engine.validate import PlainValueError, RequestLimits
from vllm_frontend.text.sampling import (
    InvalidRequestError,
    ModelSamplingInfo,
    SamplingRequest,
    check_debug_fields,
    lower_sampling_params,
    uses_v2_model_runner,
)

pytestmark = pytest.mark.oracle

VOCAB = 1000
MAX_MODEL_LEN = 64
MAX_LOGPROBS = 5
PROMPT_LEN = 10
MAX_TOKENS = 16
EOS = 2


def _model(v2: bool, trace: bool) -> ModelSamplingInfo:
    limits = RequestLimits(max_model_len=MAX_MODEL_LEN, vocab_size=VOCAB, max_logprobs=MAX_LOGPROBS)
    return ModelSamplingInfo(
        max_model_len=MAX_MODEL_LEN,
        eos_token_id=EOS,
        limits=limits,
        v2_model_runner=v2,
        trace_replay=trace,
    )


def ours(fields: dict[str, Any], v2: bool, trace: bool) -> Any:
    """The engine ``SamplingParams`` of a request with ``fields``, or the error (message, param)."""
    model = _model(v2, trace)
    req = SamplingRequest(**fields)
    try:
        params = lower_sampling_params(req, max_tokens=MAX_TOKENS, model=model)
        check_debug_fields(params, PROMPT_LEN, MAX_MODEL_LEN, model)
    except InvalidRequestError as e:
        # a plain ValueError in vLLM: its engine client fails the request (500)
        return (str(e), e.parameter, isinstance(e, PlainValueError))
    return params


def theirs(fields: dict[str, Any], v2: bool, trace: bool) -> Any:
    """vLLM's ``SamplingParams`` for the same fields after its input processor's checks and
    trace normalisation, or its error (message, parameter)."""
    from vllm.exceptions import VLLMValidationError
    from vllm.sampling_params import SamplingParams
    from vllm.v1.engine.input_processor import InputProcessor

    model_config = SimpleNamespace(
        max_logprobs=MAX_LOGPROBS,
        max_model_len=MAX_MODEL_LEN,
        get_vocab_size=lambda: VOCAB,
        enable_trace_replay=trace,
        is_diffusion=False,
        return_sampling_mask=False,
    )
    processor = SimpleNamespace(
        model_config=model_config,
        speculative_config=None,
        structured_outputs_config=None,
        tokenizer=None,
        vllm_config=SimpleNamespace(
            use_v2_model_runner=v2,
            cache_config=SimpleNamespace(kv_sharing_fast_prefill=False),
            reasoning_config=None,
            _check_supports_watermarking=lambda params: False,
        ),
        validate_logits_processors_params=lambda params: None,
        resolve_watermarking=lambda params: False,
    )
    try:
        sp = SamplingParams(max_tokens=MAX_TOKENS, **fields)
        InputProcessor._validate_params(processor, sp, ("generate",))  # type: ignore[arg-type]
        if not 0 <= sp.routed_experts_prompt_start <= PROMPT_LEN:
            # process_inputs' range check (inline there): its message is pinned by the
            # end-to-end comparison (tests/e2e/test_generate.py); here only the verdict.
            return ("routed_experts_prompt_start", "routed_experts_prompt_start", False)
        sp.update_from_generation_config({}, EOS)
        if sp.trace_decode_token_ids:
            InputProcessor._normalize_trace_replay_params(processor, sp, PROMPT_LEN)  # type: ignore[arg-type]
    except (VLLMValidationError, ValueError) as e:
        return (str(e), getattr(e, "parameter", None), not isinstance(e, VLLMValidationError))
    return sp


ROWS = [[1, 2], [3], [4, 5, -1]]
CASES: dict[str, dict[str, Any]] = {
    "rows": {"prompt_logprob_token_ids": ROWS * 3},  # PROMPT_LEN - 1 scored rows
    "rows from a start": {"prompt_logprob_token_ids": ROWS, "prompt_logprob_start": 6},
    "empty rows": {"prompt_logprob_token_ids": []},
    "empty row": {"prompt_logprob_token_ids": [[], []]},
    "too many rows": {"prompt_logprob_token_ids": [[1]] * MAX_MODEL_LEN},
    "too wide": {"prompt_logprob_token_ids": [list(range(MAX_LOGPROBS + 1))]},
    "out of vocabulary": {"prompt_logprob_token_ids": [[VOCAB]]},
    "below the pad": {"prompt_logprob_token_ids": [[-2]]},
    "negative start": {"prompt_logprob_token_ids": ROWS, "prompt_logprob_start": -1},
    "start alone": {"prompt_logprob_start": 2},
    "trace": {"trace_decode_token_ids": [5, 6, 7]},
    "long trace": {"trace_decode_token_ids": list(range(3, 90)), "min_tokens": 3},
    "trace with stops": {"trace_decode_token_ids": [5], "stop_token_ids": [9], "stop": ["x"]},
    "empty trace": {"trace_decode_token_ids": []},
    "trace n=2": {"trace_decode_token_ids": [5], "n": 2, "temperature": 1.0},
    "negative trace": {"trace_decode_token_ids": [5, -1]},
    "trace out of vocabulary": {"trace_decode_token_ids": [5, VOCAB, VOCAB + 1]},
    "trace with prompt logprobs": {"trace_decode_token_ids": [5], "prompt_logprobs": 1},
    "trace with bad words": {"trace_decode_token_ids": [5], "bad_words": ["x"]},
    "trace with a budget": {"trace_decode_token_ids": [5], "thinking_token_budget": 3},
    "routed experts start": {"routed_experts_prompt_start": PROMPT_LEN},
    "routed experts past the prompt": {"routed_experts_prompt_start": PROMPT_LEN + 1},
    "routed experts negative": {"routed_experts_prompt_start": -1},
}


def _compare(case: str, v2: bool, trace: bool) -> None:
    fields = CASES[case]
    mine, ref = ours(fields, v2, trace), theirs(fields, v2, trace)
    if isinstance(ref, tuple):
        assert isinstance(mine, tuple), (case, mine)
        if ref[0] == "routed_experts_prompt_start":
            assert mine[1] == ref[1]
        else:
            assert mine == ref
        return
    assert not isinstance(mine, tuple), (case, mine)
    if ref.prompt_logprob_token_ids is not None:
        array = mine.prompt_logprob_token_ids.numpy()
        assert array.dtype == ref.prompt_logprob_token_ids.dtype
        assert np.array_equal(array, ref.prompt_logprob_token_ids)
    else:
        assert mine.prompt_logprob_token_ids is None
    for name in (
        "prompt_logprob_start",
        "trace_decode_token_ids",
        "routed_experts_prompt_start",
        "skip_reading_prefix_cache",
        "max_tokens",
        "min_tokens",
        "ignore_eos",
        "stop",
        "stop_token_ids",
    ):
        assert getattr(mine, name) == getattr(ref, name), name
    assert mine.eos_token_id == ref._eos_token_id
    assert set(mine.all_stop_token_ids) == ref._all_stop_token_ids


@pytest.mark.parametrize("case", list(CASES))
def test_a_v2_engine_with_trace_replay_gets_vllms_params_or_error(case: str) -> None:
    _compare(case, v2=True, trace=True)


@pytest.mark.parametrize("case", ["rows", "trace", "trace n=2", "routed experts start"])
def test_a_v1_engine_without_trace_replay_refuses_as_vllm(case: str) -> None:
    _compare(case, v2=False, trace=False)


def test_the_v2_runner_is_vllms_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "0")
    assert not uses_v2_model_runner(False)
    assert uses_v2_model_runner(True)  # a watermark config overrides it, as in vLLM
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    assert uses_v2_model_runner(False)
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER")
    assert not uses_v2_model_runner(False)  # V1, as vLLM's CPU engines

"""``LoweredParams`` gives what ``lower_sampling_params`` gives, whether it kept the lowering or
not: the same values and wire bytes, a fresh object per request, the same errors."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from vllm_frontend.engine.validate import InvalidRequestError, RequestLimits
from vllm_frontend.text import lowered_params
from vllm_frontend.text.lowered_params import LoweredParams
from vllm_frontend.text.sampling import ModelSamplingInfo, SamplingRequest, lower_sampling_params

MODEL = ModelSamplingInfo(
    max_model_len=4096,
    eos_token_id=2,
    generation_eos_token_ids=[2, 7],
    sampling_defaults={"temperature": 0.6, "top_p": 0.9},
    limits=RequestLimits(vocab_size=1000, max_logprobs=20),
)

REQUESTS: list[dict[str, Any]] = [
    {},
    {"temperature": 0.0, "ignore_eos": True},
    {"temperature": 1, "top_k": 5},  # an int where a float goes
    {"temperature": 1.0, "top_k": 5},
    {"temperature": 1},
    {"temperature": True},  # equal to 1 as a key, refused as a value
    {"stop": "\n", "seed": 3, "n": 2},
    {"stop": ["a", "b"], "stop_token_ids": [5]},  # lists: lowered afresh
    {"stop": [], "stop_token_ids": [], "bad_words": []},  # as the routes send absent ones
    {"stop": (), "stop_token_ids": []},
    {"stop": None, "stop_token_ids": [], "bad_words": []},
    {"logit_bias": {"5": 1.5}, "stream": True},
    {"temperature": 0.0, "top_p": 1},
    {"temperature": -0.0, "top_p": 1},  # equal to 0.0 as a key, not the same wire bytes
    {"seed": 2**70},  # past msgpack's integers: lowered afresh
    {"logit_bias": {}, "extra_args": {}},
    {"stop": "\n"},
    {"top_p": 0.0},  # refused
    {"min_tokens": 9},  # refused: above max_tokens
]


def _fresh(req: SamplingRequest, max_tokens: int) -> Any:
    try:
        return lower_sampling_params(req, max_tokens=max_tokens, model=MODEL)
    except InvalidRequestError as e:
        return ("error", str(e), e.parameter)


def _kept(table: LoweredParams, req: SamplingRequest, max_tokens: int) -> Any:
    try:
        return table.lower(
            req, max_tokens=max_tokens, model=MODEL, tokenizer=None, engine_side=True
        )
    except InvalidRequestError as e:
        return ("error", str(e), e.parameter)


def test_same_params_and_bytes_as_lowering_afresh_in_any_order() -> None:
    table = LoweredParams()
    given = []
    for _ in range(3):  # first lowered, then kept
        for fields in REQUESTS + REQUESTS[::-1]:
            for max_tokens in (4, 8):
                req = SamplingRequest(**fields)
                expected, got = _fresh(req, max_tokens), _kept(table, req, max_tokens)
                if isinstance(expected, tuple):
                    assert got == expected
                    continue
                assert got == expected
                assert msgspec.msgpack.encode(got) == msgspec.msgpack.encode(expected)
                assert [type(v) for v in msgspec.structs.astuple(got)] == [
                    type(v) for v in msgspec.structs.astuple(expected)
                ]
                given.append(got)
    assert len({id(p) for p in given}) == len(given)  # each request its own object


def test_a_request_changing_its_params_changes_nobody_elses() -> None:
    table = LoweredParams()
    req = SamplingRequest(temperature=0.5)
    first = table.lower(req, max_tokens=4, model=MODEL, tokenizer=None, engine_side=True)
    first.skip_clone = False
    first.extra_args = {"x": 1}
    second = table.lower(req, max_tokens=4, model=MODEL, tokenizer=None, engine_side=True)
    assert second == lower_sampling_params(req, max_tokens=4, model=MODEL)


def test_another_model_is_lowered_with_its_own_constants() -> None:
    table = LoweredParams()
    req = SamplingRequest()
    table.lower(req, max_tokens=4, model=MODEL, tokenizer=None, engine_side=True)
    other = msgspec.structs.replace(MODEL, eos_token_id=3, sampling_defaults={})
    got = table.lower(req, max_tokens=4, model=other, tokenizer=None, engine_side=True)
    assert got == lower_sampling_params(req, max_tokens=4, model=other)


def test_the_table_starts_over_when_full(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lowered_params, "MAX_ENTRIES", 4)
    table = LoweredParams()
    for seed in range(10):
        req = SamplingRequest(seed=seed)
        got = table.lower(req, max_tokens=4, model=MODEL, tokenizer=None, engine_side=True)
        assert got == lower_sampling_params(req, max_tokens=4, model=MODEL)
        assert len(table._table) <= 4


def test_requests_as_the_routes_send_them_are_kept() -> None:
    # The protocol's absent stop / stop_token_ids / bad_words arrive as empty lists.
    table = LoweredParams()
    for _ in range(3):
        req = SamplingRequest(temperature=0.0, stop=[], stop_token_ids=[], bad_words=[])
        table.lower(req, max_tokens=4, model=MODEL, tokenizer=None, engine_side=True)
    table.lower(SamplingRequest(stop=["x"]), max_tokens=4, model=MODEL, tokenizer=None,
                engine_side=True)  # fmt: skip
    assert len(table._table) == 1
    table.lower(SamplingRequest(stop="x"), max_tokens=4, model=MODEL, tokenizer=None,
                engine_side=True)  # fmt: skip
    assert len(table._table) == 2  # a stop string is kept (a str, not a list)


def test_a_thinking_budget_needs_reasoning_configured_on_the_engine_side() -> None:
    # vLLM's input processor refuses it (engine side); its render routes and parameters do not.
    req = SamplingRequest(thinking_token_budget=5)
    without = msgspec.structs.replace(MODEL, thinking_budget=False)
    with pytest.raises(InvalidRequestError, match="reasoning_config is not configured") as info:
        lower_sampling_params(req, max_tokens=4, model=without)
    assert info.value.parameter is None
    lowered = lower_sampling_params(req, max_tokens=4, model=without, engine_side=False)
    assert lowered.thinking_token_budget == 5
    assert lower_sampling_params(req, max_tokens=4, model=MODEL).thinking_token_budget == 5

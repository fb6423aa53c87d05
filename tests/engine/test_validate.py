"""Request validation agrees with the engine: what vLLM's decoder rejects, we reject first.

The reference is vLLM itself: every generated request is encoded with our codec and decoded by
vLLM's own ``MsgpackDecoder(EngineCoreRequest)``, exactly as an engine's input thread does
(engine protocol §4.11). Where that raises, the engine's input thread would die; our validator
must raise too, and must accept everything vLLM accepts.
"""

from __future__ import annotations

import enum
import math
import time
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vllm_frontend.engine import codec
from vllm_frontend.engine.protocol import (
    EngineCoreRequest,
    LoRARequest,
    PoolingParams,
    RepetitionDetectionParams,
    SamplingParams,
    StructuredOutputsParams,
)
from vllm_frontend.engine.tensors import NdArray, Tensor
from vllm_frontend.engine.validate import InvalidRequestError, RequestLimits, validate_request


def make(params: SamplingParams | None = None, **fields: Any) -> EngineCoreRequest:
    prompt = fields.pop("prompt_token_ids", [1, 2, 3])
    pooling = fields.pop("pooling_params", None)
    lora = fields.pop("lora_request", None)
    if params is None and pooling is None:
        params = SamplingParams(max_tokens=4)
    return EngineCoreRequest(
        fields.pop("request_id", "req-0"),
        prompt,
        None,
        params,
        pooling,
        time.time(),
        lora,
        None,
        fields.pop("data_parallel_rank", None),
        **fields,
    )


@pytest.fixture(scope="module")
def vllm_decode() -> Any:
    serial_utils = pytest.importorskip("vllm.v1.serial_utils")
    engine = pytest.importorskip("vllm.v1.engine")
    decoder = serial_utils.MsgpackDecoder(engine.EngineCoreRequest)

    def decode(request: EngineCoreRequest) -> Any:
        frames = codec.encode_request(request)
        return decoder.decode(frames[1:])

    return decode


def engine_accepts(vllm_decode: Any, request: EngineCoreRequest) -> tuple[bool, str]:
    try:
        vllm_decode(request)
    except Exception as exc:  # whatever kills the engine's input thread
        return False, f"{type(exc).__name__}: {exc}"
    return True, ""


def we_accept(request: EngineCoreRequest, limits: RequestLimits | None = None) -> bool:
    try:
        validate_request(request, limits or RequestLimits())
    except InvalidRequestError:
        return False
    return True


# -- generated sampling parameters ------------------------------------------------------------

_odd_floats = st.sampled_from([math.nan, math.inf, -math.inf, 0.0, 1e-6, 0.005, 2.0, 2.0001])
_wrong_types: st.SearchStrategy[Any] = st.sampled_from([True, False, "1", 1.5, [1]])


def _number(lo: float, hi: float) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.floats(lo, hi, allow_nan=False),
        st.integers(int(lo), int(hi)),
        _odd_floats,
    )


def _int(lo: int, hi: int) -> st.SearchStrategy[Any]:
    return st.one_of(st.integers(lo, hi), st.integers(lo, hi), _wrong_types)


_text = st.text(alphabet="ab ", max_size=2)
_structured = st.builds(
    lambda picks, ws: StructuredOutputsParams(
        json=picks[0],
        regex=picks[1],
        choice=picks[2],
        grammar=picks[3],
        json_object=picks[4],
        structural_tag=picks[5],
        disable_any_whitespace=ws,
        backend="xgrammar",
    ),
    st.tuples(
        st.none() | st.just('{"type": "object"}'),
        st.none() | st.just("a+"),
        st.none() | st.just(["x", "y"]),
        st.none() | st.just("root ::= 'a'"),
        st.none() | st.booleans(),
        st.none() | st.just("{}"),
    ),
    st.booleans(),
)

_sampling_fields: dict[str, st.SearchStrategy[Any]] = {
    "n": st.one_of(st.integers(-1, 3), st.just(20000), _wrong_types),
    "presence_penalty": _number(-3, 3),
    "frequency_penalty": _number(-3, 3),
    "repetition_penalty": _number(-1, 3),
    "temperature": _number(-1, 3),
    "top_p": _number(-1, 2),
    "top_k": _int(-3, 5),
    "min_p": _number(-1, 2),
    "seed": st.none() | _int(-2, 10),
    "stop": st.none() | _text | st.lists(_text, max_size=2) | st.just([1]),
    "stop_token_ids": st.none() | st.lists(st.integers(0, 50), max_size=3) | st.just(["a"]),
    "max_tokens": _int(-1, 6),
    "min_tokens": _int(-1, 7),
    "logprobs": st.none() | _int(-3, 5),
    "prompt_logprobs": st.none() | _int(-3, 5),
    "detokenize": st.booleans(),
    "stream_interval": st.none() | _int(-1, 3),
    "output_kind": st.sampled_from([0, 1, 2]),
    "bad_words": st.none() | st.lists(_text, max_size=2),
    "thinking_token_budget": st.none() | _int(-3, 5),
    "extra_args": st.none()
    | st.just({"kv_transfer_params": {"x": 1}})
    | st.just({"big": 2**64 - 1})
    | st.just({"neg": -(2**63)}),
    "structured_outputs": st.none() | _structured,
    "repetition_detection": st.none()
    | st.builds(
        RepetitionDetectionParams,
        max_pattern_size=st.integers(-1, 4),
        min_pattern_size=st.integers(-1, 4),
        min_count=st.integers(0, 3),
    ),
    "logit_bias": st.none() | st.just({5: 1.5, 7: -100.0}),
    "allowed_token_ids": st.none() | st.just([1, 2]),
}


@st.composite
def sampling_params(draw: st.DrawFn) -> SamplingParams:
    # Mostly one field at a time (so each rule is seen in isolation), sometimes several.
    max_size = draw(st.sampled_from([1, 1, 1, 2, 4]))
    chosen = draw(st.sets(st.sampled_from(sorted(_sampling_fields)), max_size=max_size))
    fields = {name: draw(_sampling_fields[name]) for name in chosen}
    fields.setdefault("max_tokens", 16)
    return SamplingParams(**fields)


@pytest.mark.oracle
@settings(
    max_examples=600,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(params=sampling_params())
def test_sampling_params_are_rejected_exactly_when_the_engine_would_reject_them(
    vllm_decode: Any, params: SamplingParams
) -> None:
    request = make(params)
    ok, why = engine_accepts(vllm_decode, request)
    assert we_accept(request) == ok, why or "vLLM accepts this request"


_EDGES: dict[str, list[Any]] = {
    "n": [0, 1, 2, 16384, 16385, True, 1.0],
    "presence_penalty": [-2.0, 2.0, -2.01, 2.01, math.nan, 1],
    "frequency_penalty": [-2.0, 2.0, -2.01, 2.01, math.inf],
    "repetition_penalty": [0.0, 1e-9, math.inf, math.nan, -1.0, 2],
    "temperature": [0.0, 1e-6, 0.005, 2.0, 2.0001, -0.1, math.nan, math.inf, True],
    "top_p": [0.0, 1e-9, 1.0, 1.01, math.nan, 1],
    "top_k": [-2, -1, 0, 1, 1.0, True],
    "min_p": [0.0, 1.0, -0.01, 1.01, math.nan],
    "seed": [-1, -2, 0, 2**63, 1.5],
    "stop": ["", ["a", ""], "a", ["a", "b"], [1]],
    "stop_token_ids": [[1, 1], [True], ["a"]],
    "max_tokens": [0, 1, -1, 1.0],
    "min_tokens": [-1, 0, 16, 17],
    "logprobs": [-2, -1, 0, 20, True],
    "prompt_logprobs": [-2, -1, 0, 5, 1.5],
    "stream_interval": [0, 1, -1],
    "thinking_token_budget": [-2, -1, 0, 7, True],
    "output_kind": [0, 2],
    "bad_words": [[""], ["a"], ["a", "a"]],
    "extra_args": [{"x": 2**64 - 1}, {"x": -(2**63) - 1}, {"x": [2**64]}, {1: "a"}],
    "logit_bias": [{1: 1.0}, {1: "a"}],
    "detokenize": [1],
}


@pytest.mark.oracle
@pytest.mark.parametrize(
    ("field", "value"), [(f, v) for f, values in _EDGES.items() for v in values], ids=repr
)
def test_each_sampling_field_boundary_matches_the_engine(
    vllm_decode: Any, field: str, value: Any
) -> None:
    fields = {"max_tokens": 16, field: value}
    request = make(SamplingParams(**fields))
    try:
        ok, why = engine_accepts(vllm_decode, request)
    except Exception as exc:  # our codec refuses to encode it: the engine never sees it
        ok, why = False, f"unencodable: {exc}"
    assert we_accept(request) == ok, why or "vLLM accepts this request"


@pytest.mark.oracle
@pytest.mark.parametrize(
    "fields",
    [
        {"temperature": 0.0, "n": 2},
        {"top_p": 0.0},
        {"stop": ["a", ""]},
        {"stop": ["a"], "detokenize": False},
        {"min_tokens": 5, "max_tokens": 4},
        {"repetition_penalty": math.nan},
        {"top_k": -2},
        {"thinking_token_budget": -2},
        {"extra_args": {"huge": 2**64}},
    ],
)
def test_known_engine_killers_are_rejected_with_the_parameter_named(
    vllm_decode: Any, fields: dict[str, Any]
) -> None:
    fields.setdefault("max_tokens", 4)
    request = make(SamplingParams(**fields))
    assert not engine_accepts(vllm_decode, request)[0]
    with pytest.raises(InvalidRequestError) as info:
        validate_request(request, RequestLimits())
    assert info.value.parameter in fields


@pytest.mark.oracle
def test_structured_outputs_need_exactly_one_constraint(vllm_decode: Any) -> None:
    for so in (
        StructuredOutputsParams(backend="xgrammar"),
        StructuredOutputsParams(regex="a", choice=["b"], backend="xgrammar"),
    ):
        request = make(SamplingParams(max_tokens=4, structured_outputs=so))
        assert not engine_accepts(vllm_decode, request)[0]
        with pytest.raises(InvalidRequestError, match="exactly one constraint"):
            validate_request(request, RequestLimits())


def test_structured_outputs_without_a_backend_are_a_frontend_bug() -> None:
    request = make(
        SamplingParams(max_tokens=4, structured_outputs=StructuredOutputsParams(regex="a"))
    )
    with pytest.raises(InvalidRequestError, match="_backend"):
        validate_request(request, RequestLimits())


@pytest.mark.oracle
@pytest.mark.parametrize(
    ("lora", "accepted"),
    [
        (LoRARequest("adapter", 1, "/path"), True),
        (LoRARequest("adapter", 0, "/path"), False),
        (LoRARequest("adapter", 2, ""), False),
    ],
)
def test_lora_requests_are_checked_like_the_engine_does(
    vllm_decode: Any, lora: LoRARequest, accepted: bool
) -> None:
    request = make(lora_request=lora)
    assert engine_accepts(vllm_decode, request)[0] == accepted
    assert we_accept(request, RequestLimits(supports_lora=True)) == accepted


def test_lora_is_refused_when_the_engine_has_no_lora_support() -> None:
    request = make(lora_request=LoRARequest("adapter", 1, "/path"))
    with pytest.raises(InvalidRequestError, match="--enable-lora"):
        validate_request(request, RequestLimits(supports_lora=False))


def test_missing_max_tokens_is_refused_because_the_engine_would_fail_the_request() -> None:
    with pytest.raises(InvalidRequestError, match="max_tokens must be set"):
        validate_request(make(SamplingParams(max_tokens=None)), RequestLimits())


def test_sampling_checked_upstream_is_not_checked_again() -> None:
    # The serving process lowers every request's sampling parameters through
    # validate_sampling_params (text.sampling); its engine client then skips them, and only them.
    bad = make(SamplingParams(max_tokens=None))
    validate_request(bad, RequestLimits(check_sampling=False))
    with pytest.raises(InvalidRequestError, match="prompt"):
        validate_request(
            make(SamplingParams(max_tokens=4), prompt_token_ids=[]),
            RequestLimits(check_sampling=False),
        )


def test_prompt_must_be_non_empty_fit_the_context_and_the_vocabulary() -> None:
    limits = RequestLimits(max_model_len=8, vocab_size=100)
    assert we_accept(make(prompt_token_ids=[0, 99]), limits)
    for prompt, message in (
        ([], "cannot be empty"),
        (list(range(9)), "maximum context length 8"),
        ([5, 100], "Token id 100 is out of vocabulary"),
        ([-1], "non-negative"),
        ([1.0], "non-negative ints"),
    ):
        with pytest.raises(InvalidRequestError, match=message):
            validate_request(make(prompt_token_ids=prompt), limits)
    with pytest.raises(InvalidRequestError, match="prompt_token_ids or prompt_embeds"):
        validate_request(make(prompt_token_ids=None), limits)


class _Level(enum.IntEnum):
    TWO = 2


_prompt_id = st.one_of(
    st.integers(0, 120),
    st.integers(-3, 2**65),
    st.sampled_from([True, False, 1.0, "1", None, np.int64(5), np.int32(-1), _Level.TWO]),
    st.just(2**64),
)


def _expected_prompt_error(tokens: list[Any], vocab: int | None, rows: int | None) -> str | None:
    # The order the checks are documented in: each id a non-negative int (numpy integers and
    # int subclasses but bool count), the embeddings' rows, the largest id against the
    # vocabulary, then the length.
    for t in tokens:
        is_int = (isinstance(t, int) and not isinstance(t, bool)) or isinstance(t, np.integer)
        if not is_int or t < 0:
            return f"prompt_token_ids must be non-negative ints, got {t!r}"
    if rows is not None and rows != len(tokens):
        return "prompt_embeds must have one row per prompt token"
    if vocab is not None and tokens and max(tokens) >= vocab:
        return f"Token id {max(tokens)} is out of vocabulary"
    if not tokens:
        return "The decoder prompt cannot be empty"
    return None


@settings(max_examples=400, deadline=None)
@given(
    tokens=st.lists(_prompt_id, max_size=6),
    vocab=st.sampled_from([None, 0, 1, 100, 2**64]),
    rows=st.sampled_from([None, 0, 1, 3]),
    as_tuple=st.booleans(),
)
def test_prompt_id_checks_keep_their_order_and_messages(
    tokens: list[Any], vocab: int | None, rows: int | None, as_tuple: bool
) -> None:
    # The usual prompt passes one fast check; whatever it refuses is decided by the element
    # checks: both give exactly these outcomes.
    embeds = None if rows is None else Tensor.from_numpy(np.zeros((rows, 2), np.float32))
    request = make(prompt_token_ids=tuple(tokens) if as_tuple else tokens, prompt_embeds=embeds)
    expected = _expected_prompt_error(tokens, vocab, rows)
    try:
        validate_request(request, RequestLimits(vocab_size=vocab))
    except InvalidRequestError as exc:
        assert str(exc) == expected
    else:
        assert expected is None


def test_token_ids_in_sampling_params_must_be_in_the_vocabulary() -> None:
    limits = RequestLimits(vocab_size=100)
    for fields, message in (
        ({"stop_token_ids": [100]}, "in stop_token_ids contain out-of-vocab token ids"),
        ({"allowed_token_ids": [3, 200]}, "allowed_token_ids contains out-of-vocab token id!"),
        ({"logit_bias": {100: 1.0}}, "in logit_bias contain out-of-vocab token ids"),
        ({"eos_token_id": 128001}, "outside the vocabulary"),
        ({"logprob_token_ids": [5, 100]}, "outside the vocabulary"),
    ):
        with pytest.raises(InvalidRequestError, match=message):
            validate_request(make(SamplingParams(max_tokens=4, **fields)), limits)
    with pytest.raises(InvalidRequestError, match="allowed_token_ids is not None and empty"):
        validate_request(make(SamplingParams(max_tokens=4, allowed_token_ids=[])), limits)


def test_logprobs_are_limited_to_the_engine_maximum() -> None:
    limits = RequestLimits(vocab_size=1000, max_logprobs=20)
    assert we_accept(make(SamplingParams(max_tokens=4, logprobs=20, prompt_logprobs=20)), limits)
    for fields in ({"logprobs": 21}, {"prompt_logprobs": -1}):
        with pytest.raises(InvalidRequestError, match="greater than max allowed: 20"):
            validate_request(make(SamplingParams(max_tokens=4, **fields)), limits)
    full_vocab = RequestLimits(vocab_size=1000, max_logprobs=-1)
    assert we_accept(make(SamplingParams(max_tokens=4, logprobs=-1)), full_vocab)


def test_prompt_logprob_token_ids_must_be_a_2d_integer_array_in_the_vocabulary() -> None:
    limits = RequestLimits(vocab_size=50, max_model_len=16, max_logprobs=20)

    def with_ids(array: np.ndarray, **extra: Any) -> EngineCoreRequest:
        ids = NdArray.from_numpy(array)
        return make(SamplingParams(max_tokens=4, prompt_logprob_token_ids=ids, **extra))

    assert we_accept(with_ids(np.array([[1, -1], [2, 3]], dtype=np.int32)), limits)
    for array in (np.zeros((2,), np.int64), np.zeros((2, 2), np.float32), np.array([[50]])):
        assert not we_accept(with_ids(array), limits)
    assert not we_accept(with_ids(np.array([[1]]), prompt_logprob_start=-1), limits)
    with pytest.raises(InvalidRequestError, match="requires prompt_logprob_token_ids"):
        validate_request(make(SamplingParams(max_tokens=4, prompt_logprob_start=1)), limits)


def test_prompt_embeds_must_match_their_shape_and_the_prompt() -> None:
    embeds = Tensor.from_numpy(np.zeros((3, 4), np.float32))
    assert we_accept(make(prompt_token_ids=None, prompt_embeds=embeds))
    assert we_accept(make(prompt_token_ids=[1, 2, 3], prompt_embeds=embeds))
    with pytest.raises(InvalidRequestError, match="one row per prompt token"):
        validate_request(make(prompt_token_ids=[1, 2], prompt_embeds=embeds), RequestLimits())
    garbled = Tensor("float32", (3, 4), np.zeros(5, np.float32))
    with pytest.raises(InvalidRequestError, match="needs 48"):
        validate_request(make(prompt_token_ids=None, prompt_embeds=garbled), RequestLimits())
    unknown = Tensor("<f4", (3, 4), np.zeros((3, 4), np.float32))
    with pytest.raises(InvalidRequestError, match="unknown dtype"):
        validate_request(make(prompt_token_ids=None, prompt_embeds=unknown), RequestLimits())


def test_exactly_one_of_sampling_and_pooling_params() -> None:
    both = make(SamplingParams(max_tokens=4), pooling_params=PoolingParams(task="embed"))
    with pytest.raises(InvalidRequestError, match="exactly one of"):
        validate_request(both, RequestLimits())


def test_pooling_task_must_be_one_the_engine_supports() -> None:
    request = make(None, pooling_params=PoolingParams(task="embed"))
    assert we_accept(request, RequestLimits(supported_tasks=frozenset({"embed"})))
    with pytest.raises(InvalidRequestError, match="not supported by the engine"):
        validate_request(request, RequestLimits(supported_tasks=frozenset({"generate"})))


def test_routing_fields_are_checked_against_this_frontend() -> None:
    limits = RequestLimits(engine_count=2, client_index=0)
    assert we_accept(make(data_parallel_rank=1), limits)
    for fields, name in (
        ({"data_parallel_rank": 2}, "data_parallel_rank"),
        ({"data_parallel_rank": -1}, "data_parallel_rank"),
        ({"client_index": 1}, "client_index"),
        ({"request_id": ""}, "request_id"),
        ({"priority": 1.5}, "priority"),
        ({"trace_headers": {"a": 1}}, "trace_headers"),
    ):
        with pytest.raises(InvalidRequestError) as info:
            validate_request(make(**fields), limits)
        assert info.value.parameter == name

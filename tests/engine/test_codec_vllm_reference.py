"""Our encoder against vLLM's own serializer (test-only use of vLLM as the reference peer).

Random messages encoded by us must be accepted by vLLM's decoder (the one the engine runs,
including SamplingParams validation) and must come out of vLLM's encoder as the same bytes and
the same aux frames: that pins field order, defaults, dtype spellings and the out-of-band
policy beyond the fixed vectors.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.engine.test_codec_properties import (
    bf16_tensors,
    finite,
    json_maps,
    names,
    outputs_messages,
    tensors,
    token_ids,
)

from vllm_frontend.engine import codec
from vllm_frontend.engine.protocol import (
    EngineCoreOutputs,
    EngineCoreRequest,
    LoRARequest,
    PoolingParams,
    SamplingParams,
    StructuredOutputsParams,
    Tensor,
)
from vllm_frontend.engine.tensors import to_bfloat16_words

pytestmark = pytest.mark.oracle  # imports vLLM or transformers as the reference

serial_utils = pytest.importorskip("vllm.v1.serial_utils")
vllm_engine = pytest.importorskip("vllm.v1.engine")

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def vllm_roundtrip(cls: type, frames: list[Any]) -> list[bytes]:
    """Decode ``frames`` ([payload, aux…]) with vLLM's decoder, re-encode with its encoder."""
    decoded = serial_utils.MsgpackDecoder(cls).decode([bytes(f) for f in frames])
    return [bytes(f) for f in serial_utils.MsgpackEncoder().encode(decoded)]


_SAMPLING_DEFAULTS = {
    f.encode_name: f.default_factory() if f.default_factory is not msgspec.NODEFAULT else f.default
    for f in msgspec.structs.fields(SamplingParams)
}


def _typed(value: Any) -> Any:
    """``value`` with every scalar tagged by its type, so 1 and 1.0 compare unequal."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return (type(value).__name__, value)


def _canonical(payload: bytes) -> Any:
    """A request payload with sampling parameters compared by value.

    msgspec omits a default only when the value *is* the default object, so whether, say,
    ``top_p: 1.0`` is written depends on object identity on either side; the engine reads both
    forms alike. ``_all_stop_token_ids`` is a Python set in vLLM (re-encoded in hash order).
    """
    request = msgspec.msgpack.decode(payload)
    params = request[3]
    if isinstance(params, dict):
        params = {k: v for k, v in params.items() if v != _SAMPLING_DEFAULTS.get(k, object())}
        if "_all_stop_token_ids" in params:
            params["_all_stop_token_ids"] = sorted(params["_all_stop_token_ids"])
        request[3] = params
    return _typed(request)


@SETTINGS
@given(outputs_messages)
def test_vllm_decodes_our_outputs_and_reencodes_the_same_bytes(
    message: EngineCoreOutputs,
) -> None:
    # vLLM stamps timestamp 0.0 with its own clock, and re-encodes its finished_requests set
    # in hash order: keep both out of the comparison's way.
    message.timestamp = message.timestamp or 1.5
    if message.finished_requests:
        message.finished_requests = message.finished_requests[:1]
    for out in message.outputs:  # vLLM cannot build torch tensors over empty buffers
        for name in ("pooling_output", "prompt_token_id_logprobs"):
            value = getattr(out, name)
            if value is not None and value.nbytes == 0:
                setattr(out, name, None)
        plp = out.new_prompt_logprobs_tensors
        if plp is not None and plp.logprobs.nbytes == 0:
            out.new_prompt_logprobs_tensors = None
    frames = codec.encode_outputs(message)
    assert vllm_roundtrip(vllm_engine.EngineCoreOutputs, frames) == [bytes(f) for f in frames]


@st.composite
def valid_sampling_params(draw: st.DrawFn) -> SamplingParams:
    """Sampling parameters in the normal form vLLM's __post_init__ leaves unchanged."""
    greedy = draw(st.booleans())
    stop = draw(st.lists(names.filter(bool), max_size=2, unique=True))
    stop_ids = draw(st.lists(st.integers(0, 50_000), max_size=3, unique=True))
    eos = draw(st.none() | st.integers(0, 50_000))
    max_tokens = draw(st.integers(1, 4096))
    return SamplingParams(
        temperature=0.0 if greedy else draw(st.floats(0.01, 2.0)),
        top_p=1.0 if greedy else draw(st.floats(0.05, 1.0)),
        top_k=0 if greedy else draw(st.sampled_from([0, -1, 1, 50])),
        min_p=0.0 if greedy else draw(st.floats(0.0, 1.0)),
        presence_penalty=draw(st.floats(-2.0, 2.0)),
        repetition_penalty=draw(st.floats(0.5, 2.0)),
        seed=draw(st.none() | st.integers(0, 2**31)),
        stop=stop,
        stop_token_ids=stop_ids,
        max_tokens=max_tokens,
        min_tokens=draw(st.integers(0, max_tokens)),
        logprobs=draw(st.none() | st.integers(0, 20)),
        prompt_logprobs=draw(st.none() | st.integers(0, 5)),
        output_kind=draw(st.sampled_from([0, 1, 2])),
        output_text_buffer_length=max((len(s) for s in stop), default=1) - 1,
        eos_token_id=eos,
        all_stop_token_ids=list(dict.fromkeys(stop_ids + ([] if eos is None else [eos]))),
        structured_outputs=draw(
            st.none() | st.builds(StructuredOutputsParams, regex=names, backend=st.just("xgrammar"))
        ),
        logit_bias=draw(st.none() | st.dictionaries(st.integers(0, 1000), st.floats(-5, 5))),
        extra_args=draw(st.none() | json_maps),
        bad_words=[],
        bad_words_token_ids=draw(st.none() | st.lists(token_ids.filter(bool), max_size=2)),
        skip_reading_prefix_cache=draw(st.booleans()),
    )


nonempty_tensors = (tensors("<f4") | bf16_tensors()).filter(lambda t: t.nbytes > 0)

valid_requests = st.builds(
    EngineCoreRequest,
    request_id=names,
    prompt_token_ids=st.none() | token_ids,
    mm_features=st.none(),
    sampling_params=valid_sampling_params(),
    pooling_params=st.none(),
    arrival_time=finite,
    lora_request=st.none()
    | st.builds(LoRARequest, names, st.integers(1, 100), names.filter(bool), st.none() | names),
    cache_salt=st.none() | names,
    data_parallel_rank=st.none() | st.integers(0, 16),
    prompt_embeds=st.none() | nonempty_tensors,
    client_index=st.integers(0, 4),
    current_wave=st.integers(0, 100),
    priority=st.integers(-100, 100),
    trace_headers=st.none() | st.dictionaries(names, names, max_size=2),
    resumable=st.booleans(),
    external_req_id=st.none() | names,
    reasoning_parser_kwargs=st.none() | json_maps,
)


@SETTINGS
@given(valid_requests)
def test_vllm_accepts_our_requests_and_reads_the_same_values(
    request: EngineCoreRequest,
) -> None:
    frames = codec.encode_request(request)
    assert frames[0] == b"\x00"
    theirs = vllm_roundtrip(vllm_engine.EngineCoreRequest, frames[1:])
    ours = [bytes(f) for f in frames[1:]]
    assert _canonical(theirs[0]) == _canonical(ours[0])
    assert theirs[1:] == ours[1:]  # out-of-band buffers: same count, order and bytes


def test_vllm_accepts_our_pooling_request() -> None:
    request = EngineCoreRequest(
        "embed-1", [1, 2, 3], None, None, PoolingParams(task="embed", dimensions=8), 2.5,
        None, None, None,
    )  # fmt: skip
    frames = codec.encode_request(request)
    assert vllm_roundtrip(vllm_engine.EngineCoreRequest, frames[1:]) == [frames[1]]


def test_vllm_reads_our_prompt_embeds_as_the_same_tensor() -> None:
    import torch

    values = np.linspace(-2, 2, 4 * 64, dtype=np.float32).reshape(4, 64)
    request = EngineCoreRequest(
        "e", None, None, SamplingParams(max_tokens=1), None, 0.0, None, None, None,
        prompt_embeds=Tensor.from_numpy(values),
    )  # fmt: skip
    frames = codec.encode_request(request)
    decoded = serial_utils.MsgpackDecoder(vllm_engine.EngineCoreRequest).decode(
        [bytes(f) for f in frames[1:]]
    )
    assert decoded.prompt_embeds.dtype == torch.float32
    assert torch.equal(decoded.prompt_embeds, torch.from_numpy(values))


def assert_same_bfloat16(ours: np.ndarray, theirs: np.ndarray) -> None:
    """Equal words, except that any NaN matches any NaN: torch writes 0x7FC0 on its scalar path
    and 0xFFFF on its vectorized one."""
    nan = (theirs & 0x7FFF) > 0x7F80
    assert ours[~nan].tolist() == theirs[~nan].tolist()
    assert ((ours[nan] & 0x7FFF) > 0x7F80).all()


@SETTINGS
@given(
    st.lists(
        st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True),
        max_size=64,
    )
)
def test_bfloat16_rounding_and_widening_match_torch(values: list[float]) -> None:
    import torch

    array = np.array(values, dtype=np.float32)
    words = to_bfloat16_words(array)
    theirs = torch.from_numpy(array).to(torch.bfloat16)
    assert_same_bfloat16(words, theirs.view(torch.int16).numpy().view(np.uint16))
    widened = Tensor.from_numpy(words, dtype="bfloat16").numpy()
    np.testing.assert_array_equal(widened, theirs.float().numpy())  # NaN == NaN here


def test_bfloat16_rounding_edge_cases_match_torch() -> None:
    import torch

    bits = np.array(
        [0x3F808000, 0x3F818000, 0x3F807FFF, 0x7F7FFFFF, 0xFF7FFFFF, 0x00000001, 0x7FFFFFFF,
         0xFFC00001, 0x7F800000, 0x80000000],
        dtype=np.uint32,
    )  # fmt: skip  # ties to even (both ways), below a tie, overflow to inf, subnormal, NaNs
    array = bits.view(np.float32)
    theirs = torch.from_numpy(array).to(torch.bfloat16).view(torch.int16).numpy()
    assert_same_bfloat16(to_bfloat16_words(array), theirs.view(np.uint16))

"""Property tests of the codec: random messages round-trip; bad bytes only ever raise
ProtocolError (never another exception, never a hang)."""

from __future__ import annotations

import contextlib
import pathlib
from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from tests.support.fixtures import PROTOCOL_VECTORS

from vllm_frontend.engine import codec
from vllm_frontend.engine.errors import EngineDeadSignal, ProtocolError
from vllm_frontend.engine.protocol import (
    CoordinatorFirstRequest,
    CoordinatorPublish,
    EngineCoreEvent,
    EngineCoreEventType,
    EngineCoreOutput,
    EngineCoreOutputs,
    EngineCoreReadyResponse,
    EngineCoreRequest,
    EngineHandshakeMetadata,
    EngineZmqAddresses,
    FinishReason,
    HandshakeStatus,
    LogprobsLists,
    LogprobsTensors,
    LoRARequest,
    MultiModalFeatureSpec,
    MultiModalFieldElem,
    NdArray,
    PlaceholderRange,
    PoolingParams,
    PrefillStats,
    RequestType,
    SamplingParams,
    SchedulerStats,
    StartDpWave,
    StructuredOutputsParams,
    Tensor,
    UtilityOutput,
    UtilityResult,
)

VECTORS = PROTOCOL_VECTORS
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --- building blocks --------------------------------------------------------------------------

names = st.text(max_size=24)
small_ints = st.integers(-(2**31), 2**31 - 1)
token_ids = st.lists(st.integers(0, 2**31 - 1), max_size=8)
finite = st.floats(allow_nan=False, width=64)
json_scalars = st.none() | st.booleans() | small_ints | finite | names
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names, inner, max_size=3),
    max_leaves=8,
)
json_maps = st.dictionaries(names, json_values, max_size=4)


@st.composite
def numpy_arrays(draw: st.DrawFn, dtype: str, rows: int | None = None, ndim: int = 2) -> Any:
    """A random C-contiguous array; sizes straddle the 256-byte inline/out-of-band threshold."""
    shape = [rows if rows is not None else draw(st.integers(0, 6))]
    shape += [draw(st.integers(0, 40)) for _ in range(ndim - 1)]
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if np.dtype(dtype).kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    return rng.integers(0, 1000, shape).astype(dtype)


def ndarrays(dtype: str, ndim: int = 2) -> st.SearchStrategy[NdArray]:
    return numpy_arrays(dtype, ndim=ndim).map(NdArray.from_numpy)


def tensors(dtype: str, ndim: int = 2) -> st.SearchStrategy[Tensor]:
    return numpy_arrays(dtype, ndim=ndim).map(Tensor.from_numpy)


@st.composite
def bf16_tensors(draw: st.DrawFn) -> Tensor:
    words = draw(numpy_arrays("<u2"))
    return Tensor.from_numpy(words, dtype="bfloat16")


@st.composite
def logprobs_lists(draw: st.DrawFn) -> LogprobsLists:
    ids = draw(numpy_arrays(draw(st.sampled_from(["<i4", "<i8"]))))
    rows = ids.shape[0]
    return LogprobsLists(
        NdArray.from_numpy(ids),
        NdArray.from_numpy(np.ones(ids.shape, np.float32)),
        NdArray.from_numpy(np.arange(rows, dtype=np.int64)),
    )


@st.composite
def logprobs_tensors(draw: st.DrawFn) -> LogprobsTensors:
    ids = draw(numpy_arrays("<i4"))
    return LogprobsTensors(
        Tensor.from_numpy(ids),
        Tensor.from_numpy(np.zeros(ids.shape, np.float32)),
        Tensor.from_numpy(np.arange(ids.shape[0], dtype=np.int64)),
    )


engine_outputs = st.builds(
    EngineCoreOutput,
    request_id=names,
    new_token_ids=token_ids,
    new_logprobs=st.none() | logprobs_lists(),
    new_prompt_logprobs_tensors=st.none() | logprobs_tensors(),
    pooling_output=st.none() | tensors("<f4", ndim=1),
    finish_reason=st.none() | st.sampled_from(FinishReason),
    stop_reason=st.none() | small_ints | names,
    events=st.none()
    | st.lists(st.builds(EngineCoreEvent, st.sampled_from(EngineCoreEventType), finite)),
    kv_transfer_params=st.none() | json_maps,
    trace_headers=st.none() | st.dictionaries(names, names, max_size=2),
    prefill_stats=st.none() | st.builds(PrefillStats, num_prompt_tokens=st.integers(0, 10**6)),
    routed_experts=st.none() | ndarrays("<i4"),
    num_nans_in_logits=st.integers(0, 100),
    mm_cache_miss_hashes=st.none() | st.lists(names, max_size=2),
    prompt_token_id_logprobs=st.none() | tensors("<f4"),
)

utility_outputs = st.builds(
    UtilityOutput,
    call_id=st.integers(-2, 2**64 - 1),
    failure_message=st.none() | names,
    result=st.none() | st.builds(UtilityResult, st.none(), json_values),
)

outputs_messages = st.builds(
    EngineCoreOutputs,
    engine_index=st.integers(0, 1024),
    outputs=st.lists(engine_outputs, max_size=5),
    scheduler_stats=st.none()
    | st.builds(
        SchedulerStats,
        num_running_reqs=st.integers(0, 1000),
        kv_cache_usage=st.floats(0, 1),
    ),
    timestamp=finite,
    utility_output=st.none() | utility_outputs,
    finished_requests=st.none() | st.lists(names, max_size=3),
    wave_complete=st.none() | st.integers(0, 100),
    start_wave=st.none() | st.integers(0, 100),
    weight_version=st.none() | names,
)

sampling_params = st.builds(
    SamplingParams,
    temperature=st.floats(0, 2),
    top_p=st.floats(0.01, 1),
    top_k=st.integers(-1, 100),
    seed=st.none() | small_ints,
    stop=st.none() | st.lists(names.filter(bool), max_size=2),
    stop_token_ids=st.none() | token_ids,
    max_tokens=st.none() | st.integers(1, 10**6),
    logprobs=st.none() | st.integers(-1, 20),
    prompt_logprob_token_ids=st.none() | ndarrays("<i8"),
    eos_token_id=st.none() | st.integers(0, 10**6),
    all_stop_token_ids=token_ids,
    structured_outputs=st.none()
    | st.builds(StructuredOutputsParams, regex=names, backend=st.just("xgrammar")),
    logit_bias=st.none() | st.dictionaries(st.integers(0, 10**6), finite, max_size=3),
    extra_args=st.none() | json_maps,
    bad_words_token_ids=st.none() | st.lists(token_ids, max_size=2),
)


@st.composite
def nested_tensors(draw: st.DrawFn) -> Any:
    return draw(
        st.recursive(
            tensors("<f4") | bf16_tensors() | small_ints | finite,
            lambda inner: st.lists(inner, min_size=1, max_size=3),
            max_leaves=4,
        )
    )


mm_features = st.builds(
    MultiModalFeatureSpec,
    data=st.none()
    | st.dictionaries(
        names,
        st.builds(
            MultiModalFieldElem,
            nested_tensors(),
            st.tuples(st.sampled_from(["batched", "flat", "shared"]), json_maps),
        ),
        max_size=3,
    ),
    modality=st.sampled_from(["image", "audio", "video"]),
    identifier=names,
    mm_position=st.builds(
        PlaceholderRange,
        st.integers(0, 1000),
        st.integers(0, 1000),
        st.none() | tensors("|b1", ndim=1),
    ),
    mm_hash=st.none() | names,
)

requests = st.builds(
    EngineCoreRequest,
    request_id=names,
    prompt_token_ids=st.none() | token_ids,
    mm_features=st.none() | st.lists(mm_features, max_size=2),
    sampling_params=st.none() | sampling_params,
    pooling_params=st.none() | st.builds(PoolingParams, task=st.just("embed")),
    arrival_time=finite,
    lora_request=st.none() | st.builds(LoRARequest, names, st.integers(1, 100), names),
    cache_salt=st.none() | names,
    data_parallel_rank=st.none() | st.integers(0, 16),
    prompt_embeds=st.none() | tensors("<f4") | bf16_tensors(),
    prompt_is_token_ids=st.none() | st.lists(st.booleans(), max_size=4),
    client_index=st.integers(0, 4),
    current_wave=st.integers(0, 100),
    priority=small_ints,
    trace_headers=st.none() | st.dictionaries(names, names, max_size=2),
    resumable=st.booleans(),
    kv_hints=st.none() | json_maps,
)

# --- comparing messages by content ------------------------------------------------------------


def _array_hook(obj: object) -> object:
    if isinstance(obj, np.ndarray):
        return ("raw", obj.tobytes())
    if isinstance(obj, msgspec.msgpack.Ext):
        return ("raw", bytes(obj.data))
    raise TypeError(type(obj))


def content(message: object) -> object:
    """A message as builtins, with every array's data reduced to its bytes."""
    return msgspec.to_builtins(message, enc_hook=_array_hook)


def array_sizes(message: object) -> list[int]:
    """Byte sizes of every numpy-backed array in a message, found by a walk independent of the
    codec."""
    sizes: list[int] = []

    def walk(value: object) -> None:
        if isinstance(value, (NdArray, Tensor)):
            if isinstance(value.data, np.ndarray):
                sizes.append(value.data.nbytes)
        elif isinstance(value, msgspec.Struct):
            for name in value.__struct_fields__:
                walk(getattr(value, name))
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(v)

    walk(message)
    return sizes


# --- round trips ------------------------------------------------------------------------------


@SETTINGS
@given(outputs_messages)
def test_random_outputs_round_trip(message: EngineCoreOutputs) -> None:
    frames = codec.encode_outputs(message)
    # vLLM's policy: every array of >= 256 bytes travels in its own aux frame.
    assert len(frames) - 1 == sum(1 for n in array_sizes(message) if n >= 256)
    decoded = codec.decode_outputs([bytes(f) for f in frames])
    assert content(decoded) == content(message)
    for out, original in zip(decoded.outputs, message.outputs, strict=True):
        if original.new_logprobs is not None:
            assert out.new_logprobs is not None
            np.testing.assert_array_equal(
                out.new_logprobs.logprob_token_ids.numpy(),
                original.new_logprobs.logprob_token_ids.numpy(),
            )


@SETTINGS
@given(requests)
def test_random_requests_round_trip(request: EngineCoreRequest) -> None:
    frames = codec.encode_request(request)
    assert len(frames) - 2 == sum(1 for n in array_sizes(request) if n >= 256)
    kind, decoded = codec.decode_request([bytes(f) for f in frames])
    assert kind.value == b"\x00"
    assert content(decoded) == content(request)
    if request.prompt_embeds is not None and request.prompt_embeds.dtype == "float32":
        assert isinstance(decoded, EngineCoreRequest) and decoded.prompt_embeds is not None
        np.testing.assert_array_equal(decoded.prompt_embeds.numpy(), request.prompt_embeds.numpy())


@SETTINGS
@given(st.lists(names, max_size=5), st.integers(0, 2**64 - 1), names, st.lists(json_values))
def test_abort_and_utility_round_trip(
    ids: list[str], call_id: int, method: str, args: list[Any]
) -> None:
    assert codec.decode_request(codec.encode_abort(ids)) == (RequestType.ABORT, ids)
    kind, call = codec.decode_request(codec.encode_utility(0, call_id, method, args))
    assert kind is RequestType.UTILITY
    assert content(call) == [0, call_id, method, args]


def test_outgoing_out_of_band_buffers_alias_the_callers_array() -> None:
    embeds = np.arange(4 * 64, dtype=np.float32).reshape(4, 64)
    request = EngineCoreRequest(
        "r", None, None, SamplingParams(max_tokens=1), None, 0.0, None, None, None,
        prompt_embeds=Tensor.from_numpy(embeds),
    )  # fmt: skip
    frames = codec.encode_request(request)
    assert len(frames) == 3 and isinstance(frames[2], memoryview)
    assert np.shares_memory(np.frombuffer(frames[2], np.uint8), embeds)


# --- bad bytes --------------------------------------------------------------------------------

Decoder = Callable[[list[bytes]], object]


def _materialize_arrays(message: object) -> None:
    """Touch every array of a decoded message, as a consumer would (must also be safe)."""
    if isinstance(message, (NdArray, Tensor)):
        with contextlib.suppress(ProtocolError):
            message.numpy()
    elif isinstance(message, msgspec.Struct):
        for name in message.__struct_fields__:
            _materialize_arrays(getattr(message, name))
    elif isinstance(message, dict):
        for v in message.values():
            _materialize_arrays(v)
    elif isinstance(message, (list, tuple)):
        for v in message:
            _materialize_arrays(v)


def _payload(frames: list[bytes]) -> bytes:
    return frames[-1] if frames else b""


DECODERS: dict[str, Decoder] = {
    "outputs": codec.decode_outputs,
    "request": codec.decode_request,
    "registration": lambda frames: codec.decode_registration(_payload(frames)),
    "handshake_status": lambda frames: codec.decode_handshake_status(_payload(frames)),
    "handshake_init": lambda frames: codec.decode_handshake_init(_payload(frames)),
    "coordinator_publish": lambda frames: codec.decode_coordinator_publish(_payload(frames)),
    "coordinator_first_request": lambda frames: codec.decode_coordinator_first_request(
        _payload(frames)
    ),
}


def only_protocol_errors(decoder: Decoder, frames: list[bytes]) -> None:
    try:
        message = decoder(frames)
    except ProtocolError:
        return
    except EngineDeadSignal:
        assert frames == [b"ENGINE_CORE_DEAD"]
        return
    _materialize_arrays(message)


def _vector_frames() -> list[list[bytes]]:
    groups: dict[str, list[pathlib.Path]] = {}
    for path in sorted(VECTORS.glob("*.frame*.bin")):
        groups.setdefault(path.name.split(".")[0], []).append(path)
    return [[p.read_bytes() for p in paths] for _, paths in sorted(groups.items())]


VECTOR_FRAMES = _vector_frames()


@pytest.mark.parametrize("decoder_name", sorted(DECODERS))
def test_every_truncation_of_every_vector_raises_protocol_error_only(decoder_name: str) -> None:
    decoder = DECODERS[decoder_name]
    for frames in VECTOR_FRAMES:
        for i, frame in enumerate(frames):
            for cut in range(len(frame)):
                only_protocol_errors(decoder, [*frames[:i], frame[:cut], *frames[i + 1 :]])
        only_protocol_errors(decoder, frames[:-1])


@SETTINGS
@given(st.data())
def test_garbled_vectors_raise_protocol_error_only(data: st.DataObject) -> None:
    decoder = DECODERS[data.draw(st.sampled_from(sorted(DECODERS)))]
    frames = list(data.draw(st.sampled_from(VECTOR_FRAMES)))
    i = data.draw(st.integers(0, len(frames) - 1))
    frame = bytearray(frames[i])
    assume(frame)
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(frame) - 1))
        frame[pos] = data.draw(st.integers(0, 255))
    frames[i] = bytes(frame)
    only_protocol_errors(decoder, frames)


@SETTINGS
@given(st.sampled_from(sorted(DECODERS)), st.lists(st.binary(max_size=64), max_size=4))
def test_random_frames_raise_protocol_error_only(decoder_name: str, frames: list[bytes]) -> None:
    only_protocol_errors(DECODERS[decoder_name], frames)


@pytest.mark.parametrize(
    "payload",
    [
        b"\xdd\xff\xff\xff\xff",  # array claiming 4 billion elements
        b"\x91" * 200_000 + b"\xc0",  # absurd nesting
        b"\x99\x00\x91\xdc\x00\x12\xa1r\x90\x94"  # logprobs triple with a huge shape
        + b"\x93\xa3<i4\x92\xcf\xff\xff\xff\xff\xff\xff\xff\xff\x02\xc7\x00\x03",
    ],
)
def test_hostile_payloads_fail_fast(payload: bytes) -> None:
    for decoder in DECODERS.values():
        only_protocol_errors(decoder, [payload])
        only_protocol_errors(decoder, [b"\x00", payload])


def test_wrong_request_type_bytes_are_rejected() -> None:
    payload = codec.encode_abort(["x"])[1]
    for type_byte in (b"\x04", b"\x05", b"\x09", b"", b"\x00\x00"):
        with pytest.raises(ProtocolError):
            codec.decode_request([type_byte, payload])


def test_unresolvable_aux_index_surfaces_as_protocol_error() -> None:
    frames = [(VECTORS / "outputs_multi_oob.frame0.bin").read_bytes()]  # aux frames dropped
    outputs = codec.decode_outputs(frames)
    lp = outputs.outputs[0].new_logprobs
    assert lp is not None
    with pytest.raises(ProtocolError, match="aux frame 2"):
        lp.logprobs.numpy()


@SETTINGS
@given(
    st.sampled_from(["<i4", "<i8", "<f4", "<f8", "|u1", "|b1", "<i2"]),
    st.integers(0, 3),
    st.data(),
)
def test_array_values_survive_the_wire_as_numpy_and_lists(
    dtype: str, ndim: int, data: st.DataObject
) -> None:
    original = data.draw(numpy_arrays(dtype, ndim=max(ndim, 1)))
    if ndim == 0:
        original = original.reshape(-1)[:1].reshape(()) if original.size else np.array(0, dtype)
    message = EngineCoreOutputs(
        outputs=[EngineCoreOutput("r", [], routed_experts=NdArray.from_numpy(original))]
    )
    decoded = codec.decode_outputs([bytes(f) for f in codec.encode_outputs(message)])
    array = decoded.outputs[0].routed_experts
    assert array is not None and array.shape == original.shape
    np.testing.assert_array_equal(array.numpy(), original)
    assert array.numpy().dtype == original.dtype
    assert array.tolist() == original.tolist()


def test_one_encoder_shared_by_threads_numbers_each_messages_aux_frames() -> None:
    import sys
    import threading

    encoder = codec.MessageEncoder()
    errors: list[str] = []

    def run(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(100):
            arrays = [rng.standard_normal((4, 64)).astype(np.float32) for _ in range(60)]
            outputs = [
                EngineCoreOutput(
                    "r",
                    [1],
                    new_logprobs=LogprobsLists(*map(NdArray.from_numpy, arrays[i : i + 3])),
                )
                for i in range(0, 60, 3)
            ]
            frames = encoder.encode_outputs(EngineCoreOutputs(outputs=outputs))
            if len(frames) != 61:
                errors.append(f"thread {seed}: {len(frames) - 1} aux frames instead of 60")
                return
            got = [
                array.numpy()
                for out in codec.decode_outputs([bytes(f) for f in frames]).outputs
                if out.new_logprobs is not None
                for array in (
                    out.new_logprobs.logprob_token_ids,
                    out.new_logprobs.logprobs,
                    out.new_logprobs.sampled_token_ranks,
                )
            ]
            if not all(map(np.array_equal, got, arrays)):
                errors.append(f"thread {seed}: aux frames of another message")
                return

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads inside encode calls as often as possible
    try:
        threads = [threading.Thread(target=run, args=(seed,)) for seed in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []


control_messages = st.one_of(
    st.builds(
        HandshakeStatus,
        status=st.sampled_from(["HELLO", "READY"]),
        local=st.booleans(),
        headless=st.booleans(),
        parallel_config_hash=st.none() | names,
    ),
    st.builds(
        EngineHandshakeMetadata,
        addresses=st.builds(
            EngineZmqAddresses,
            inputs=st.lists(names, max_size=2),
            outputs=st.lists(names, max_size=2),
            coordinator_input=st.none() | names,
        ),
        parallel_config=st.dictionaries(names, small_ints | names | st.lists(small_ints)),
    ),
    st.builds(
        EngineCoreReadyResponse,
        max_model_len=st.none() | st.integers(1, 2**20),
        dtype=st.none() | names,
        kv_cache_max_concurrency=st.none() | finite,
        kv_events_config=st.none() | json_maps,
        enable_sleep_mode=st.booleans(),
    ),
    st.builds(
        CoordinatorPublish,
        counts=st.none()
        | st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6), st.floats(0, 1))),
        current_wave=st.integers(0, 10**6),
        engines_running=st.booleans(),
    ),
    st.builds(
        CoordinatorFirstRequest,
        exclude_engine_index=st.none() | st.integers(0, 2**16) | st.binary(min_size=2, max_size=2),
        wave=st.integers(0, 10**6),
    ),
)
CONTROL_CODECS: dict[type, tuple[Callable[[Any], bytes], Callable[[bytes], object]]] = {
    HandshakeStatus: (codec.encode_handshake_status, codec.decode_handshake_status),
    EngineHandshakeMetadata: (codec.encode_handshake_init, codec.decode_handshake_init),
    EngineCoreReadyResponse: (codec.encode_registration, codec.decode_registration),
    CoordinatorPublish: (codec.encode_coordinator_publish, codec.decode_coordinator_publish),
    CoordinatorFirstRequest: (
        codec.encode_coordinator_first_request,
        codec.decode_coordinator_first_request,
    ),
}


@SETTINGS
@given(control_messages)
def test_random_handshake_registration_and_coordinator_messages_round_trip(
    message: msgspec.Struct,
) -> None:
    encode, decode = CONTROL_CODECS[type(message)]
    assert decode(encode(message)) == message


@SETTINGS
@given(st.integers(0, 10**6), st.none() | st.integers(0, 2**16) | st.binary(max_size=2))
def test_start_dp_wave_round_trips(wave: int, exclude: int | bytes | None) -> None:
    kind, payload = codec.decode_request(codec.encode_start_dp_wave(wave, exclude))
    assert kind is RequestType.START_DP_WAVE and payload == StartDpWave(wave, exclude)


@pytest.mark.parametrize("shape", [(0,), (0, 3), (2, 0), (2, 0, 3), (1, 2, 0)])
def test_empty_arrays_read_as_lists_as_numpy_reads_them(shape: tuple[int, ...]) -> None:
    array = NdArray("<i8", shape, msgspec.msgpack.Ext(3, b""))
    assert array.tolist() == np.zeros(shape, np.int64).tolist()


def test_an_empty_shape_with_element_bytes_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        NdArray("<i8", (2, 0), msgspec.msgpack.Ext(3, bytes(8))).tolist()

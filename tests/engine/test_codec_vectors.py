"""Conformance with the bytes vLLM 0.32's own encoder produced (tests/fixtures/protocol-vectors).

Every vector is decoded with our codec, compared field by field (by wire name) with the JSON
rendering of the payload in manifest.json, and re-encoded to byte-identical frames.
"""

from __future__ import annotations

import json
import math
from typing import Any

import msgspec
import numpy as np
import pytest
from tests.support.fixtures import PROTOCOL_VECTORS

from vllm_frontend.engine import codec
from vllm_frontend.engine.errors import EngineDeadSignal
from vllm_frontend.engine.protocol import (
    COORDINATOR_READY,
    COORDINATOR_SUBSCRIBE,
    EngineCoreOutputs,
    EngineCoreRequest,
    FinishReason,
    LoRARequest,
    MultiModalFeatureSpec,
    RequestType,
    SamplingParams,
    StartDpWave,
    Tensor,
    UtilityRequest,
    engine_identity,
)
from vllm_frontend.engine.tensors import NdArray

VECTORS = PROTOCOL_VECTORS
MANIFEST = json.loads((VECTORS / "manifest.json").read_text())["vectors"]
BY_NAME = {v["name"]: v for v in MANIFEST}


def frames_of(name: str) -> list[bytes]:
    return [(VECTORS / f["file"]).read_bytes() for f in BY_NAME[name]["frames"]]


# --- field-by-field comparison against the manifest's JSON rendering -------------------------


def _same_float(expected: float, actual: float) -> bool:
    return expected == actual or (math.isnan(expected) and math.isnan(actual))


def assert_matches(expected: Any, actual: Any, frames: list[bytes], path: str = "$") -> None:
    """Check that our decoded value ``actual`` is what the manifest rendering ``expected`` says.

    ``frames`` are the message's frames counted from the payload (index 0), to check that
    out-of-band arrays were resolved to the right aux frame.
    """
    if isinstance(actual, (NdArray, Tensor)):
        dtype, shape, data = expected
        assert actual.dtype == dtype, path
        assert list(actual.shape) == shape, path
        if isinstance(data, int):  # out-of-band: must now be a view of that aux frame
            assert isinstance(actual.data, np.ndarray), path
            assert actual.data.tobytes() == frames[data], path
        else:
            assert isinstance(actual.data, msgspec.msgpack.Ext), path
            assert actual.data.code == data["$ext"], path
            assert bytes(actual.data.data).hex() == data["$hex"], path
        return
    if isinstance(actual, msgspec.Struct):
        cls = type(actual)
        fields = msgspec.structs.fields(cls)
        if cls.__struct_config__.array_like:
            assert isinstance(expected, list), path
            assert len(expected) == len(fields), f"{path}: {len(expected)} != {len(fields)} fields"
            for f, exp in zip(fields, expected, strict=True):
                assert_matches(exp, getattr(actual, f.name), frames, f"{path}.{f.name}")
        else:
            assert isinstance(expected, dict), path
            names = {f.encode_name for f in fields}
            assert set(expected) <= names, f"{path}: unknown keys {set(expected) - names}"
            for f in fields:
                value = getattr(actual, f.name)
                if f.encode_name in expected:
                    assert_matches(expected[f.encode_name], value, frames, f"{path}.{f.name}")
                else:  # omitted on the wire: must be the default
                    assert cls.__struct_config__.omit_defaults, f"{path}: {f.name} missing"
                    default = (
                        f.default_factory()
                        if f.default_factory is not msgspec.NODEFAULT
                        else f.default
                    )
                    assert value == default, f"{path}.{f.name}"
        return
    if isinstance(actual, msgspec.msgpack.Ext):
        assert expected == {"$ext": actual.code, "$hex": bytes(actual.data).hex()}, path
        return
    if isinstance(actual, dict):
        if isinstance(expected, dict) and "$map" in expected:
            pairs = [tuple(p) for p in expected["$map"]]
            assert [k for k, _ in pairs] == list(actual), path
            for (_, exp), act in zip(pairs, actual.values(), strict=True):
                assert_matches(exp, act, frames, path + "[]")
            return
        assert isinstance(expected, dict), path
        assert list(expected) == list(actual), f"{path}: key order"
        for key, exp in expected.items():
            assert_matches(exp, actual[key], frames, f"{path}[{key!r}]")
        return
    if isinstance(actual, (list, tuple)):
        assert isinstance(expected, list) and len(expected) == len(actual), path
        for i, (exp, act) in enumerate(zip(expected, actual, strict=True)):
            assert_matches(exp, act, frames, f"{path}[{i}]")
        return
    if isinstance(actual, bytes):
        assert expected == {"$bin": actual.hex()}, path
        return
    if isinstance(actual, bool) or actual is None or isinstance(actual, str):
        assert expected == actual and type(expected) is type(actual), path
        return
    if isinstance(actual, float):
        assert isinstance(expected, float) and _same_float(expected, actual), path
        return
    if isinstance(actual, int):  # includes IntEnum members
        assert isinstance(expected, int) and not isinstance(expected, bool), path
        assert expected == int(actual), path
        return
    raise AssertionError(f"{path}: unexpected decoded type {type(actual).__name__}")


def assert_frames_equal(actual: list[Any], expected: list[bytes]) -> None:
    assert [bytes(f) for f in actual] == expected


# --- which vectors go through which codec function -------------------------------------------

REQUEST_VECTORS = [
    n
    for n in BY_NAME
    if n.startswith(("add_request_", "abort_", "utility_")) or n == "start_dp_wave"
]
COORDINATOR_OUTPUTS = {"coord_wave_complete", "coord_start_wave", "coord_lb_stats"}
OUTPUT_VECTORS = [n for n in BY_NAME if n.startswith("outputs_") or n in COORDINATOR_OUTPUTS]
PAYLOAD_VECTORS = {
    "handshake_hello_headless": (codec.decode_handshake_status, codec.encode_handshake_status),
    "handshake_ready_headless": (codec.decode_handshake_status, codec.encode_handshake_status),
    "handshake_ready_dp": (codec.decode_handshake_status, codec.encode_handshake_status),
    "handshake_init": (codec.decode_handshake_init, codec.encode_handshake_init),
    "handshake_init_dp_moe": (codec.decode_handshake_init, codec.encode_handshake_init),
    "engine_registration": (codec.decode_registration, codec.encode_registration),
    "coord_publish_counts": (codec.decode_coordinator_publish, codec.encode_coordinator_publish),
    "coord_publish_wave": (codec.decode_coordinator_publish, codec.encode_coordinator_publish),
    "coord_first_request": (
        codec.decode_coordinator_first_request,
        codec.encode_coordinator_first_request,
    ),
}


def test_every_vector_is_covered() -> None:
    covered = set(REQUEST_VECTORS) | set(OUTPUT_VECTORS) | set(PAYLOAD_VECTORS)
    covered |= {"engine_core_dead", "coord_subscribe", "coord_ready"}
    assert covered == set(BY_NAME)


def _reencode_request(kind: RequestType, payload: Any) -> list[Any]:
    if kind is RequestType.ADD:
        return codec.encode_request(payload)
    if kind is RequestType.ABORT:
        return codec.encode_abort(payload)
    if kind is RequestType.UTILITY:
        return codec.encode_utility(
            payload.client_index, payload.call_id, payload.method_name, payload.args
        )
    assert kind is RequestType.START_DP_WAVE
    return codec.encode_start_dp_wave(payload.wave, payload.exclude_engine_index)


@pytest.mark.parametrize("name", REQUEST_VECTORS)
def test_request_vector_decodes_and_reencodes_identically(name: str) -> None:
    vector = BY_NAME[name]
    frames = frames_of(name)
    kind, payload = codec.decode_request(frames)
    assert kind.value == frames[0]
    assert_matches(vector["decoded"], payload, frames[1:])
    assert_frames_equal(_reencode_request(kind, payload), frames)


@pytest.mark.parametrize("name", OUTPUT_VECTORS)
def test_output_vector_decodes_and_reencodes_identically(name: str) -> None:
    vector = BY_NAME[name]
    frames = frames_of(name)
    outputs = codec.decode_outputs(frames)
    assert isinstance(outputs, EngineCoreOutputs)
    assert_matches(vector["decoded"], outputs, frames)
    assert_frames_equal(codec.encode_outputs(outputs), frames)


@pytest.mark.parametrize("name", sorted(PAYLOAD_VECTORS))
def test_payload_vector_decodes_and_reencodes_identically(name: str) -> None:
    vector = BY_NAME[name]
    frames = frames_of(name)
    decode, encode = PAYLOAD_VECTORS[name]
    payload_frame = frames[vector["payload_frame"]]
    message = decode(payload_frame)
    assert message is not None
    assert_matches(vector["decoded"], message, [payload_frame])
    assert encode(message) == payload_frame  # type: ignore[operator]
    if vector["payload_frame"] == 1:  # frame 0 is the routing identity of engine 0 or 1
        assert frames[0] in (engine_identity(0), engine_identity(1))


def test_engine_core_dead_sentinel_is_recognised() -> None:
    frames = frames_of("engine_core_dead")
    assert codec.is_engine_dead(frames[0])
    with pytest.raises(EngineDeadSignal):
        codec.decode_outputs(frames)


def test_coordinator_raw_frames_match_constants() -> None:
    assert frames_of("coord_subscribe") == [COORDINATOR_SUBSCRIBE]
    assert frames_of("coord_ready") == [COORDINATOR_READY]


# --- spot checks of meaning (values stated in engine-protocol.md §11) ------------------------


def test_greedy_request_fields() -> None:
    kind, req = codec.decode_request(frames_of("add_request_greedy"))
    assert kind is RequestType.ADD and isinstance(req, EngineCoreRequest)
    assert req.request_id == "req-0" and req.prompt_token_ids == [1, 2, 3]
    sp = req.sampling_params
    assert sp is not None and sp.temperature == 0.0 and sp.max_tokens == 4
    assert sp.eos_token_id is None and sp.all_stop_token_ids == []
    assert req.arrival_time == 1700000000.0 and req.client_index == 0


def test_full_request_private_fields_and_lora() -> None:
    _, req = codec.decode_request(frames_of("add_request_full"))
    assert isinstance(req, EngineCoreRequest)
    sp = req.sampling_params
    assert sp is not None
    assert sp.eos_token_id == 2 and sp.all_stop_token_ids == [2, 7]
    assert sp.logit_bias == {5: 1.5}
    assert sp.structured_outputs is not None and sp.structured_outputs.backend == "xgrammar"
    assert req.lora_request == LoRARequest("my-adapter", 1, "/adapters/my-adapter")
    assert req.priority == -1 and req.current_wave == 3


def test_multimodal_request_tensors_are_views_of_their_frames() -> None:
    frames = frames_of("add_request_multimodal")
    _, req = codec.decode_request(frames)
    assert isinstance(req, EngineCoreRequest) and req.mm_features
    feature = req.mm_features[0]
    assert isinstance(feature, MultiModalFeatureSpec) and feature.data is not None
    pixels = feature.data["pixel_values"].data
    assert isinstance(pixels, Tensor) and pixels.dtype == "float32"
    arr = pixels.numpy()
    assert arr.shape == (2, 3, 8, 8)
    assert np.array_equal(arr, np.frombuffer(frames[2], np.float32).reshape(2, 3, 8, 8))
    assert not arr.flags.writeable  # a view of the received frame, not a copy
    grid = feature.data["image_grid_thw"].data
    assert isinstance(grid, Tensor) and grid.numpy().tolist() == [1, 2, 2]
    assert feature.data["image_grid_thw"].field == ("batched", {"keep_on_cpu": False})
    is_embed = feature.mm_position.is_embed
    assert is_embed is not None
    assert is_embed.numpy().tolist() == [False, True, True, True, True, False]


def test_prompt_embeds_bfloat16_out_of_band() -> None:
    frames = frames_of("add_request_prompt_embeds")
    _, req = codec.decode_request(frames)
    assert isinstance(req, EngineCoreRequest) and req.prompt_embeds is not None
    assert req.prompt_token_ids is None
    embeds = req.prompt_embeds
    assert embeds.dtype == "bfloat16" and embeds.shape == (4, 64) and embeds.nbytes == 512
    # bfloat16 is the top half of a float32: widen the raw words independently.
    words = np.frombuffer(frames[2], "<u2").astype("<u4") << 16
    assert np.array_equal(embeds.numpy(), words.view("<f4").reshape(4, 64))


def test_finish_logprobs_output_values() -> None:
    outputs = codec.decode_outputs(frames_of("outputs_finish_logprobs"))
    (out,) = outputs.outputs
    assert out.request_id == "req-0" and out.new_token_ids == [11, 12]
    assert out.finish_reason is FinishReason.LENGTH and out.finish_reason.openai_name == "length"
    assert out.finished and str(out.finish_reason) == "length"
    lp = out.new_logprobs
    assert lp is not None
    assert lp.logprob_token_ids.numpy().tolist() == [[11, 11, 40], [12, 99, 12]]
    assert lp.logprob_token_ids.numpy().dtype == np.int32
    assert lp.logprobs.numpy().dtype == np.float32 and lp.logprobs.numpy().shape == (2, 3)
    assert lp.sampled_token_ranks.numpy().tolist() == [1, 2]
    assert out.prefill_stats is not None and out.prefill_stats.num_prompt_tokens == 3
    assert outputs.finished_requests == ["req-0"] and outputs.weight_version == "default"


def test_out_of_band_output_arrays_are_views_of_aux_frames() -> None:
    frames = frames_of("outputs_multi_oob")
    outputs = codec.decode_outputs(frames)
    assert outputs.engine_index == 1
    first = outputs.outputs[0]
    assert first.stop_reason == 7 and first.finish_reason is FinishReason.STOP
    lp = first.new_logprobs
    plp = first.new_prompt_logprobs_tensors
    assert lp is not None and plp is not None
    ids = lp.logprob_token_ids.numpy()
    assert ids.shape == (6, 21) and np.shares_memory(ids, np.frombuffer(frames[1], np.uint8))
    assert np.array_equal(plp.logprobs.numpy(), np.frombuffer(frames[4], np.float32).reshape(10, 8))
    assert plp.logprob_token_ids.dtype == "int32"
    assert outputs.outputs[2].finish_reason is FinishReason.ERROR


def test_utility_reply_and_registration_values() -> None:
    reply = codec.decode_outputs(frames_of("outputs_utility_result")).utility_output
    assert reply is not None and reply.call_id == 12345678901234567890
    assert reply.failure_message is None and reply.result is not None and reply.result.value is True
    failure = codec.decode_outputs(frames_of("outputs_utility_failure")).utility_output
    assert failure is not None and failure.failure_message and failure.result is None
    reg = codec.decode_registration(frames_of("engine_registration")[1])
    assert reg is not None and reg.max_model_len == 4096 and reg.dtype == "bfloat16"
    assert codec.decode_registration(b"") is None  # older engines register with an empty frame


def test_utility_and_wave_request_payloads() -> None:
    kind, call = codec.decode_request(frames_of("utility_is_sleeping"))
    assert kind is RequestType.UTILITY and isinstance(call, UtilityRequest)
    assert (call.client_index, call.call_id, call.method_name, call.args) == (
        0,
        12345678901234567890,
        "is_sleeping",
        [],
    )
    kind, wave = codec.decode_request(frames_of("start_dp_wave"))
    assert kind is RequestType.START_DP_WAVE and wave == StartDpWave(3, 1)
    kind, ids = codec.decode_request(frames_of("abort_requests"))
    assert kind is RequestType.ABORT and ids == ["req-0", "req-1-a1b2c3d4"]


# --- leniency and canonical form (engine-protocol.md §1.2, §1.3, §3.3, §5) -------------------


def test_sampling_params_use_a_map16_header_even_with_one_key() -> None:
    payload = msgspec.msgpack.encode(SamplingParams(max_tokens=4))
    assert payload == b"\xde\x00\x01\xaamax_tokens\x04"


def test_outputs_from_older_or_newer_engines_decode() -> None:
    enc = msgspec.msgpack.encode
    # EngineCoreOutput with only the two required fields, inside an 8-field (older)
    # EngineCoreOutputs: missing trailing fields take their defaults.
    short = enc([3, [["req-1", [5]]], None, 1.0, None, None, None, None])
    outputs = codec.decode_outputs([short])
    assert outputs.engine_index == 3 and outputs.weight_version is None
    assert outputs.outputs[0].new_token_ids == [5] and outputs.outputs[0].finish_reason is None
    # Extra trailing elements (a newer engine) are ignored, at both levels.
    out = ["req-2", [6], *[None] * 11, 0, *[None] * 4, "future-field"]
    longer = enc([0, [out], None, 1.0, None, ["req-2"], None, None, "v1", {"new": 1}])
    outputs = codec.decode_outputs([longer])
    assert outputs.outputs[0].request_id == "req-2" and outputs.finished_requests == ["req-2"]
    # Maps: unknown keys are ignored and missing ones take defaults.
    stats = {"num_running_reqs": 2, "some_future_counter": 7, "prefix_cache_stats": {"hits": 1}}
    outputs = codec.decode_outputs([enc([0, [], stats, 1.0])])
    assert outputs.scheduler_stats is not None
    assert outputs.scheduler_stats.num_running_reqs == 2
    assert outputs.scheduler_stats.prefix_cache_stats.hits == 1
    assert outputs.scheduler_stats.kv_cache_usage == 0.0
    # Prompt logprobs as the 4-element tuple of older engines.
    triple = ["int64", [1], msgspec.msgpack.Ext(3, bytes(8))]
    out = ["r", [], None, [triple, ["float32", [1], msgspec.msgpack.Ext(3, bytes(4))], triple]]
    outputs = codec.decode_outputs([enc([0, [out]])])
    plp = outputs.outputs[0].new_prompt_logprobs_tensors
    assert plp is not None and plp.selected_token_ranks.numpy().tolist() == [0]


def test_registration_decodes_by_key() -> None:
    payload = msgspec.msgpack.encode({"max_model_len": 2048, "block_size": 16, "future": True})
    reg = codec.decode_registration(payload)
    assert reg is not None and reg.max_model_len == 2048 and reg.block_size == 16
    assert reg.num_gpu_blocks is None  # not reported
    assert codec.decode_registration(msgspec.msgpack.encode({})) is not None

"""The ``LoRARequest`` on the wire, against vLLM's own msgspec encoder: alone, inside an ADD
request, and as the argument of the ``add_lora`` utility call (engine-protocol.md §4.5, §6)."""

from __future__ import annotations

import msgspec
import pytest

from vllm_frontend.engine import codec
from vllm_frontend.engine.protocol import EngineCoreRequest, LoRARequest, SamplingParams

pytestmark = pytest.mark.oracle  # imports vLLM as the reference

serial_utils = pytest.importorskip("vllm.v1.serial_utils")
vllm_lora = pytest.importorskip("vllm.lora.request")
vllm_engine = pytest.importorskip("vllm.v1.engine")

CASES = [
    {"lora_name": "a", "lora_int_id": 1, "lora_path": "/adapters/a"},
    {"lora_name": "b", "lora_int_id": 7, "lora_path": "/b", "base_model_name": "base"},
    {"lora_name": "c", "lora_int_id": 2, "lora_path": "/c", "load_inplace": True},
    {"lora_name": "d", "lora_int_id": 3, "lora_path": "/d", "is_3d_lora_weight": True},
    {"lora_name": "é", "lora_int_id": 2**31, "lora_path": "/é", "base_model_name": "m",
     "load_inplace": True, "is_3d_lora_weight": True},
]  # fmt: skip


@pytest.mark.parametrize("fields", CASES)
def test_a_lora_request_encodes_as_vllms(fields: dict[str, object]) -> None:
    ours = msgspec.msgpack.encode(LoRARequest(**fields))  # type: ignore[arg-type]
    theirs = serial_utils.MsgpackEncoder().encode(vllm_lora.LoRARequest(**fields))
    assert [ours] == [bytes(f) for f in theirs]
    decoded = serial_utils.MsgpackDecoder(vllm_lora.LoRARequest).decode(ours)
    assert {k: getattr(decoded, k) for k in fields} == fields


@pytest.mark.parametrize("fields", CASES)
def test_the_add_lora_utility_call_encodes_as_vllms(fields: dict[str, object]) -> None:
    frames = codec.encode_utility(0, 5, "add_lora", [LoRARequest(**fields)])  # type: ignore[arg-type]
    lora = vllm_lora.LoRARequest(**fields)
    # vLLM's client sends (client_index, call_id, method, args) with the MsgpackEncoder
    theirs = serial_utils.MsgpackEncoder().encode((0, 5, "add_lora", (lora,)))
    assert frames[1:] == [bytes(f) for f in theirs]


@pytest.mark.parametrize("fields", CASES)
def test_an_add_request_with_an_adapter_reads_the_same_in_vllm(fields: dict[str, object]) -> None:
    request = EngineCoreRequest(
        "r-1", [1, 2, 3], None, SamplingParams(max_tokens=4), None, 1.5,
        LoRARequest(**fields), None, None,  # type: ignore[arg-type]
    )  # fmt: skip
    frames = codec.encode_request(request)
    decoded = serial_utils.MsgpackDecoder(vllm_engine.EngineCoreRequest).decode(frames[1])
    assert isinstance(decoded.lora_request, vllm_lora.LoRARequest)
    assert {k: getattr(decoded.lora_request, k) for k in fields} == fields
    reencoded = serial_utils.MsgpackEncoder().encode(decoded)
    assert msgspec.msgpack.decode(bytes(reencoded[0]))[6] == msgspec.msgpack.decode(frames[1])[6]

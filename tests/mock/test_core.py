"""The mock scheduler without sockets: its pre-encoded fast path writes the struct encoding."""

from __future__ import annotations

from vllm_frontend.engine.codec import MessageEncoder
from vllm_frontend.engine.protocol import EngineCoreRequest, SamplingParams
from vllm_frontend.mock.core import MockEngineCore, MockEngineOptions


def _request(
    rid: str, trace: dict[str, str] | None = None, **sampling: object
) -> EngineCoreRequest:
    return EngineCoreRequest(
        rid,
        [1, 2, 3],
        None,
        SamplingParams(**sampling),  # type: ignore[arg-type]
        None,
        0.0,
        None,
        None,
        None,
        trace_headers=trace,
    )


def test_fast_path_bytes_equal_the_struct_encoding() -> None:
    options = MockEngineOptions(vocab_size=20, tokens_per_step=3)
    cores = [MockEngineCore(0, options, clock=lambda: 12.5) for _ in range(2)]
    cores[1].raw_outputs = False
    for core in cores:
        core.add(_request("plain", max_tokens=30))
        core.add(_request("traced", {"traceparent": "00-abc-def-01"}, max_tokens=30))
        core.add(_request("stops", max_tokens=30, stop_token_ids=[7], min_tokens=4))
        core.add(_request("a-much-longer-request-id-" + "x" * 40, max_tokens=7))
    encoder = MessageEncoder()
    steps = 0
    while cores[1].has_work:
        fast, slow = (core.step() for core in cores)
        assert [c for c, _ in fast] == [c for c, _ in slow]
        for (_, a), (_, b) in zip(fast, slow, strict=True):
            assert encoder.encode_outputs(a) == encoder.encode_outputs(b)
        steps += 1
    assert not cores[0].has_work
    assert steps >= 3

"""The mock scheduler without sockets: its pre-encoded fast path writes the struct encoding,
and scripted output replays a token list."""

from __future__ import annotations

import argparse
import pathlib

import pytest

from vllm_frontend.engine.codec import MessageEncoder, OutputDecoder
from vllm_frontend.engine.protocol import EngineCoreRequest, SamplingParams
from vllm_frontend.mock import cli
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


def _drain(core: MockEngineCore) -> dict[str, list[int]]:
    """Every request's output token ids, stepping ``core`` until it has no work."""
    decoder = OutputDecoder()
    encoder = MessageEncoder()
    got: dict[str, list[int]] = {}
    while core.has_work:
        for _, message in core.step():
            for out in decoder.decode(encoder.encode_outputs(message)).outputs:
                got.setdefault(out.request_id, []).extend(out.new_token_ids)
    return got


def test_scripted_output_emits_the_script_in_order_and_wraps_around() -> None:
    script = (5, 9, 2, 7)
    options = MockEngineOptions(vocab_size=20, tokens_per_step=3, script=script)
    core = MockEngineCore(0, options, clock=lambda: 1.0)
    core.add(_request("short", max_tokens=3))
    core.add(_request("long", max_tokens=10))
    core.add(_request("stops", max_tokens=10, stop_token_ids=[7]))
    got = _drain(core)
    assert got == {
        "short": [5, 9, 2],
        "long": [5, 9, 2, 7, 5, 9, 2, 7, 5, 9],
        "stops": [5, 9, 2, 7],
    }


def test_script_tokens_flag_reads_a_json_list_and_rejects_ids_out_of_the_vocabulary(
    tmp_path: pathlib.Path,
) -> None:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    path = tmp_path / "script.json"
    flags = ["--handshake-address", "tcp://127.0.0.1:1", "--vocab-size", "10"]
    path.write_text("[1, 2, 9]")
    options = cli._options(parser.parse_args([*flags, "--script-tokens", str(path)]))
    assert options.script == (1, 2, 9)
    assert cli._options(parser.parse_args(flags)).script is None
    for bad in ("[1, 10]", "[]", '{"a": 1}', "[1.5]", "not json"):
        path.write_text(bad)
        with pytest.raises(SystemExit, match="--script-tokens"):
            cli._options(parser.parse_args([*flags, "--script-tokens", str(path)]))

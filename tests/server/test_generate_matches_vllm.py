"""The pure mappings of ``/inference/v1/generate`` against vLLM 0.32's own functions, no engine:
token-mode and text-mode logprobs (``ServingTokens._create_tokens_logprobs`` and
``_create_text_logprobs``) and the body's validation report (``GenerateRequest`` through vLLM's
``validation_exception_handler``)."""

from __future__ import annotations

import asyncio
import json
import math
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest

from vllm_frontend.server import errors
from vllm_frontend.server.generate import text_logprobs, token_logprobs
from vllm_frontend.server.generate_protocol import parse_generate_request
from vllm_frontend.text.logprobs import Logprob

pytestmark = pytest.mark.oracle

# Positions as the text layer builds them: sampled token first, then the top-k by rank.
POSITIONS: list[dict[int, tuple[float, int]]] = [
    {5: (-0.5, 1), 7: (-1.25, 2), 9: (-3.0, 3)},
    {4: (-2.0, 3), 1: (-0.1, 1), 2: (-0.7, 2)},
    {3: (-math.inf, 0), 1: (-0.2, 1)},
    {6: (math.nan, 0), 8: (-0.01, 1)},
    {2: (-0.3, 1)},
]
TOKENS = [5, 4, 3, 6, 11]  # the last one's map lacks it


@pytest.mark.parametrize("num", [-1, 0, 1, 2, 5])
def test_token_logprobs_are_vllms(num: int) -> None:
    from vllm.entrypoints.scale_out.token_in_token_out.serving import ServingTokens
    from vllm.logprobs import Logprob as VllmLogprob

    theirs = ServingTokens._create_tokens_logprobs(
        None,  # type: ignore[arg-type]
        token_ids=TOKENS,
        top_logprobs=[
            {t: VllmLogprob(lp, rank, None) for t, (lp, rank) in p.items()} for p in POSITIONS
        ],
        num_output_top_logprobs=num,
    )
    ours = token_logprobs(
        TOKENS,
        [{t: Logprob(lp, rank, "x") for t, (lp, rank) in p.items()} for p in POSITIONS],
        num,
    )
    assert msgspec.to_builtins(ours) == theirs.model_dump()


class _Decoder:
    """A tokenizer's ``decode`` for one id (ids spelled out, one multi-byte)."""

    def decode(self, ids: list[int]) -> str:
        return "é" if ids == [11] else f"<{ids[0]}>"


@pytest.mark.parametrize("num", [-1, 0, 1, 2, 5])
@pytest.mark.parametrize("placeholders", [False, True])
def test_text_logprobs_are_vllms(num: int, placeholders: bool) -> None:
    from vllm.entrypoints.scale_out.token_in_token_out.serving import ServingTokens
    from vllm.logprobs import Logprob as VllmLogprob

    decoded = {5: "five", 4: "quatre", 7: None, 1: "ü"}  # None: decode the id
    theirs = ServingTokens._create_text_logprobs(
        None,  # type: ignore[arg-type]
        token_ids=TOKENS,
        top_logprobs=[
            {t: VllmLogprob(lp, rank, decoded.get(t)) for t, (lp, rank) in p.items()}
            for p in POSITIONS
        ],
        num_output_top_logprobs=num,
        tokenizer=None if placeholders else _Decoder(),  # type: ignore[arg-type]
    )
    decoder = _Decoder()
    ours = text_logprobs(
        TOKENS,
        [{t: Logprob(lp, rank, decoded.get(t)) for t, (lp, rank) in p.items()} for p in POSITIONS],
        num,
        None if placeholders else (lambda t: decoder.decode([t])),
    )
    assert msgspec.to_builtins(ours) == theirs.model_dump()


def _R(offset: int, length: int) -> dict[str, int]:
    return {"offset": offset, "length": length}


BODIES: list[Any] = [
    {"token_ids": [], "sampling_params": {}},
    {"token_ids": [1, -2], "sampling_params": {}},
    {"token_ids": [1]},
    {"token_ids": "x", "sampling_params": {}},
    {"token_ids": [1], "sampling_params": None},
    {"token_ids": [1], "sampling_params": [1]},
    {"token_ids": [1], "sampling_params": {"n": "x", "top_k": 1.5, "stop": 3}},
    {"token_ids": [1], "sampling_params": {}, "output_mode": "x", "priority": "p"},
    {"token_ids": [1], "sampling_params": {}, "stream": "maybe", "request_id": 3},
    {"token_ids": [1], "sampling_params": {}, "reasoning_parser_kwargs": {"x": 1}},
    {"token_ids": [1], "sampling_params": {}, "features": {}},
    {"token_ids": [1], "sampling_params": {"detokenize": False}, "output_mode": "text"},
    {"token_ids": [1], "sampling_params": {"prompt_logprob_token_ids": [[1, "2"], [1.0]]}},
    {"token_ids": [1], "sampling_params": {"prompt_logprob_token_ids": [1, [True]]}},
    {"token_ids": [1], "sampling_params": {"prompt_logprob_token_ids": "x"}},
    {"token_ids": [1], "sampling_params": {"trace_decode_token_ids": ["a"], "n": 1}},
    {"token_ids": [1], "sampling_params": {"routed_experts_prompt_start": 1.5}},
    *(
        {"token_ids": [1, 2, 3, 4], "sampling_params": {}, "features": f}
        for f in (
            {"mm_hashes": {"image": ["a"]}, "mm_placeholders": {"video": [_R(0, 1)]}},
            {"mm_hashes": {"image": ["a", "b"]}, "mm_placeholders": {"image": [_R(0, 1)]}},
            {
                "mm_hashes": {"image": ["a", "b"]},
                "mm_placeholders": {"image": [_R(0, 2), _R(1, 1)]},
            },
            {"mm_hashes": {"image": ["a"]}, "mm_placeholders": {"image": [_R(2, 3)]}},
            {"mm_hashes": {"image": ["a"]}, "mm_placeholders": {"image": [_R(-1, 0)]}},
            {"mm_hashes": {"image": [1]}, "mm_placeholders": {"image": [{"offset": 0}]}},
            {
                "mm_hashes": {"image": ["a"]},
                "mm_placeholders": {"image": [_R(0, 1)]},
                "kwargs_data": {"audio": [None]},
            },
            {
                "mm_hashes": {"image": ["a"]},
                "mm_placeholders": {"image": [_R(0, 1)]},
                "kwargs_data": {"image": [None, None]},
            },
            {
                "mm_hashes": {"image": ["a"]},
                "mm_placeholders": {"image": [_R(0, 1)]},
                "mm_metadata": {"image": ["eA=="]},
            },
        )
    ),
    {
        "token_ids": [1],
        "sampling_params": {},
        "content_parts": [{}],
        "features": {"mm_hashes": {}, "mm_placeholders": {}},
    },
]


def _vllm_report(body: Any) -> tuple[int, dict[str, Any]]:
    from fastapi.exceptions import RequestValidationError
    from pydantic import ValidationError
    from vllm.entrypoints.scale_out.token_in_token_out.protocol import GenerateRequest
    from vllm.entrypoints.serve.exception_handling.handlers.validation import (
        validation_exception_handler,
    )

    try:
        GenerateRequest.model_validate(body)
    except ValidationError as e:
        errs = [{**err, "loc": ("body", *err["loc"])} for err in e.errors(include_url=False)]
        exc = RequestValidationError(errs)
    else:
        raise AssertionError(f"vLLM accepts {body!r}")
    req = SimpleNamespace(app=SimpleNamespace(state=SimpleNamespace(
        args=SimpleNamespace(log_error_stack=False))), state=SimpleNamespace())  # fmt: skip
    resp = asyncio.run(validation_exception_handler(req, exc))  # type: ignore[arg-type]
    return resp.status_code, json.loads(resp.body)


@pytest.mark.parametrize("body", BODIES, ids=range(len(BODIES)))
def test_bad_bodies_get_vllms_report(body: Any) -> None:
    with pytest.raises(errors.ApiError) as caught:
        parse_generate_request(json.dumps(body).encode())
    status, _, message, param = errors.classify(caught.value)
    ref_status, ref = _vllm_report(body)
    assert (status, message, param) == (ref_status, ref["error"]["message"], ref["error"]["param"])


def test_lax_sampling_values_are_read_as_vllm_reads_them() -> None:
    from vllm.entrypoints.scale_out.token_in_token_out.protocol import GenerateRequest

    params = {"ignore_eos": "yes", "max_tokens": "5.00", "temperature": True, "stop": "x"}
    body = {"token_ids": [1], "sampling_params": params}
    _, ours = parse_generate_request(json.dumps(body).encode())
    theirs = GenerateRequest.model_validate(body).sampling_params
    for name in ("ignore_eos", "max_tokens", "temperature"):
        assert getattr(ours, name) == getattr(theirs, name)

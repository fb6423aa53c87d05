"""Chat ``logprobs`` content built as vLLM 0.32's ``OpenAIServingChat._create_chat_logprobs``
builds it, called on the same steps: sampled tokens with and without their entry, decoded texts
that are None, empty (a stray byte of a split UTF-8 character) or replacement characters, top
candidates cut at ``top_logprobs``, all candidates, and token-id placeholders."""

from __future__ import annotations

import math
from typing import Any

import msgspec
import pytest

from vllm_frontend.server.chat import chat_logprobs
from vllm_frontend.text.logprobs import Logprob

pytestmark = pytest.mark.oracle  # imports vLLM as the reference

pytest.importorskip("vllm")


class _Tokenizer:
    def decode(self, token_ids: Any, skip_special_tokens: bool = False) -> str:
        ids = [token_ids] if isinstance(token_ids, int) else list(token_ids)
        return "".join(f"<{i}>" for i in ids)


STEPS: list[tuple[int, dict[int, tuple[float, int | None, str | None]] | None]] = [
    (5, {5: (-0.1, 1, "a"), 6: (-2.0, 2, "b"), 7: (-3.0, 3, "c")}),
    (8, {8: (-0.5, 2, ""), 9: (-0.4, 1, "\ufffd")}),  # a split character's first byte
    (10, {10: (-1.0, 1, None), 11: (-float("inf"), 2, None)}),
    (12, None),  # no logprobs for this step
    (13, {14: (-0.2, 1, "x")}),  # the sampled token has no entry
    (15, {15: (-0.3, 1, "\ufffd\ufffd"), 16: (-1.5, 2, "")}),
]


def _vllm(num_top: int | None, as_ids: bool, all_candidates: bool) -> Any:
    from vllm.entrypoints.openai.chat_completion.serving import OpenAIServingChat
    from vllm.logprobs import Logprob as VllmLogprob

    serving = object.__new__(OpenAIServingChat)
    serving.return_tokens_as_token_ids = as_ids
    tops = [
        None if s is None else {t: VllmLogprob(lp, r, d) for t, (lp, r, d) in s.items()}
        for _, s in STEPS
    ]
    out = serving._create_chat_logprobs(
        [t for t, _ in STEPS],
        tops,
        _Tokenizer(),
        num_top,
        logprob_token_ids=[1] if all_candidates else None,
    )
    return out.model_dump()["content"]


def _ours(num_top: int | None, as_ids: bool, all_candidates: bool) -> Any:
    positions = [
        None if s is None else {t: Logprob(lp, r, d) for t, (lp, r, d) in s.items()}
        for _, s in STEPS
    ]
    out = chat_logprobs(
        [t for t, _ in STEPS],
        positions,
        num_top,
        lambda tid: _Tokenizer().decode(tid),
        as_token_ids=as_ids,
        all_candidates=all_candidates,
    )
    return msgspec.to_builtins(out)["content"]


def _normal(content: list[dict[str, Any]]) -> list[dict[str, Any]]:
    def value(v: Any) -> Any:
        return "-inf" if isinstance(v, float) and math.isinf(v) else v

    return [
        {
            "token": c["token"],
            "logprob": value(c["logprob"]),
            "bytes": c["bytes"],
            "top_logprobs": [
                {k: value(v) for k, v in t.items()} for t in c.get("top_logprobs") or []
            ],
        }
        for c in content
    ]


@pytest.mark.parametrize("num_top", [None, 0, 1, 2, 5])
@pytest.mark.parametrize("as_ids", [False, True])
@pytest.mark.parametrize("all_candidates", [False, True])
def test_chat_logprobs_match_vllm(num_top: int | None, as_ids: bool, all_candidates: bool) -> None:
    assert _normal(_ours(num_top, as_ids, all_candidates)) == _normal(
        _vllm(num_top, as_ids, all_candidates)
    )

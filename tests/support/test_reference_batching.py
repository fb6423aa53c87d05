"""The reference helper's batching: one vLLM start computes what the first cache miss needs and
every request modules declared, and later calls read the cache (no vLLM here: the worker is
replaced by a recorder)."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from tests.support import reference


def _fake_result(request: dict[str, Any]) -> dict[str, Any]:
    ids = [t + 1 for t in request["prompt_token_ids"]][: request["sampling"]["max_tokens"]]
    return {
        "prompt_token_ids": request["prompt_token_ids"],
        "prompt_logprobs": None,
        "outputs": [{"token_ids": ids, "text": "", "finish_reason": "length",
                     "stop_reason": None, "cumulative_logprob": None, "logprobs": None}],
    }  # fmt: skip


def test_the_first_miss_computes_every_declared_request_in_one_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    runs: list[list[dict[str, Any]]] = []

    def worker(model_dir: pathlib.Path, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        runs.append(requests)
        return [_fake_result(r) for r in requests]

    model = tmp_path / "model"
    monkeypatch.setenv("VLLM_FRONTEND_TEST_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(reference, "_run_worker", worker)
    monkeypatch.setattr(reference, "_DECLARED", [])
    first = reference.declare_reference([[1, 2]], {"max_tokens": 1}, model=model)
    second = reference.declare_reference([[5], [6, 7]], [{"max_tokens": 2}, {"max_tokens": 1}],
                                         model=model)  # fmt: skip
    reference.declare_reference([[9]], {"max_tokens": 1}, model=tmp_path / "other")

    [own] = reference.reference_generate([[3]], {"max_tokens": 1}, model=model)
    assert own.token_ids == [4]
    assert len(runs) == 1
    assert sorted(r["prompt_token_ids"] for r in runs[0]) == [[1, 2], [3], [5], [6, 7]]
    # Declared results come from the cache now, with no further run.
    assert [r.token_ids for r in second.results()] == [[6], [7]]
    assert [r.token_ids for r in first.results()] == [[2]]
    assert len(runs) == 1

"""``vllm-frontend serve`` encodes prompts with fastokens by default, loaded once it is serving
(startup does not wait for it); prompts get the same ids before and after it is ready, and
``VLLM_USE_FASTOKENS=0`` keeps ``tokenizers``."""

from __future__ import annotations

import json
import pathlib
import time

import pytest
from tests.support.mock_serve import MockServe, mock_serve

READY = "prompts are encoded with fastokens from now on"
# Chat-template structure, unicode, whitespace runs and a special token.
PROMPT = "<|start_header_id|>user<|end_header_id|>\n\nHi 🙂 数据  e\u0301 there\n\n\n<|eot_id|>"


def _prompt_ids(serve: MockServe, model: str) -> list[int]:
    body = {"model": model, "prompt": PROMPT, "max_tokens": 1, "return_token_ids": True}
    status, raw = serve.request("POST", "/v1/completions", json.dumps(body))
    assert status == 200, raw
    ids: list[int] = json.loads(raw)["choices"][0]["prompt_token_ids"]
    return ids


def _wait_for(log: pathlib.Path, text: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while text not in (content := log.read_text()):
        assert time.monotonic() < deadline, content[-2000:]
        time.sleep(0.1)
    return content


def test_serve_loads_fastokens_after_it_is_serving(
    tiny_model: pathlib.Path, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VLLM_USE_FASTOKENS", raising=False)
    log = tmp_path / "frontend.log"
    with mock_serve(tiny_model, log) as serve:
        early = _prompt_ids(serve, str(tiny_model))  # most likely before fastokens is ready
        content = _wait_for(log, READY, 120)
        assert content.index("s after start") < content.index(READY)  # /health did not wait
        assert _prompt_ids(serve, str(tiny_model)) == early
    assert early[0] == 128000 and 128009 in early  # <|begin_of_text|> ... <|eot_id|>


def test_serve_keeps_tokenizers_with_vllm_use_fastokens_0(
    tiny_model: pathlib.Path, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_USE_FASTOKENS", "0")
    log = tmp_path / "frontend.log"
    with mock_serve(tiny_model, log) as serve:
        ids = _prompt_ids(serve, str(tiny_model))
        time.sleep(3)  # longer than fastokens takes to load here
        assert _prompt_ids(serve, str(tiny_model)) == ids
    assert "fastokens" not in log.read_text()

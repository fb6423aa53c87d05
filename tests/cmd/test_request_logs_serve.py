"""``serve --enable-log-requests`` logs each prompt's request and each engine request it sends,
as vLLM's frontend does (the lines' format is pinned in tests/text/test_request_log.py)."""

from __future__ import annotations

import pathlib
import re
import time

import pytest
from tests.support.mock_serve import mock_serve


def test_requests_are_logged(tiny_model: pathlib.Path, tmp_path: pathlib.Path) -> None:
    log = tmp_path / "serve.log"
    with mock_serve(tiny_model, log, serve_args=["--enable-log-requests"]) as serve:
        status, _ = serve.request("POST", "/v1/completions",
                                  '{"prompt": ["a", "b"], "max_tokens": 2, "n": 2}')  # fmt: skip
        assert status == 200
        # /tokenize and /detokenize log their inputs too, as vLLM's tokenize serving does:
        # "tokenize-" + X-Request-Id (else a random id), no params
        for path, body, headers in (
            ("/tokenize", '{"prompt": "a b c"}', {"X-Request-Id": "t1"}),
            ("/tokenize", '{"messages": [{"role": "user", "content": "hi"}]}', {}),
            ("/detokenize", '{"tokens": [1, 2]}', {"X-Request-Id": "d1"}),
        ):
            answer = serve.request("POST", path, body, headers)
            assert answer[0] == 200, answer
    text = log.read_text()
    tokenize_ids = re.findall(
        r"Received request tokenize-(\S+): params: None, lora_request: None\.", text
    )
    assert len(tokenize_ids) == 3 and tokenize_ids[0] == "t1" and tokenize_ids[2] == "d1"
    assert re.fullmatch(r"[0-9a-f]{16}", tokenize_ids[1])
    received = re.findall(r"Received request (cmpl-\S+): params: SamplingParams\(n=2, ", text)
    assert [r.rsplit("-", 1)[1] for r in received] == ["0", "1"]
    # logged before the input processor resolves watermarking: as the request gave it (none),
    # which vLLM's SamplingParams writes as None
    assert re.findall(r"Received request cmpl-\S+: params: .*?, watermarking=(\w+), ", text) == [
        "None",
        "None",
    ]
    assert len(re.findall(r"Added request \S+\.", text)) == 4  # two prompts x n=2


def test_the_stats_line_is_logged_unless_disabled(
    tiny_model: pathlib.Path, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_LOG_STATS_INTERVAL", "0.2")
    for flags, expected in (([], True), (["--disable-log-stats"], False)):
        log = tmp_path / f"serve{len(flags)}.log"
        with mock_serve(tiny_model, log, serve_args=flags) as serve:
            status, _ = serve.request("POST", "/v1/completions",
                                      '{"prompt": "a", "max_tokens": 8}')  # fmt: skip
            assert status == 200
            time.sleep(0.6)
            # vLLM makes its vllm:* families in the stat logger --disable-log-stats turns off
            # (AsyncLLM's StatLoggerManager); the process series stay
            status, metrics = serve.request("GET", "/metrics")
            assert status == 200 and b"process_cpu_seconds_total" in metrics
            assert (b"\nvllm:" in metrics) is expected
        lines = re.findall(
            r"Engine 000: Avg prompt throughput: [\d.]+ tokens/s, .*", log.read_text()
        )
        assert bool(lines) is expected, lines

"""``serve`` registers the development routes only with ``VLLM_SERVER_DEV_MODE=1``, the
profiler routes only with a ``--profiler-config`` naming a profiler, and ``/tokenizer_info`` only
with ``--enable-tokenizer-info-endpoint`` (as vLLM 0.32), end to end in
front of the mock engine: sleep / wake and pause / resume reach the engine and report its state.
What each route answers and sends is pinned against vLLM's routers in
tests/server/test_dev_routes_match_vllm.py."""

from __future__ import annotations

import json
import pathlib

import pytest
from tests.support.mock_serve import mock_serve


def test_without_dev_mode_the_routes_are_absent(
    tiny_model: pathlib.Path, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VLLM_SERVER_DEV_MODE", raising=False)
    with mock_serve(tiny_model, tmp_path / "serve.log") as serve:
        for method, path in (("POST", "/sleep"), ("GET", "/is_paused"), ("POST", "/start_profile"),
                             ("GET", "/server_info"), ("GET", "/tokenizer_info"),
                             ("POST", "/abort_requests"), ("GET", "/weight_info")):  # fmt: skip
            assert serve.request(method, path)[0] == 404, path


def test_dev_mode_routes_reach_the_engine(
    tiny_model: pathlib.Path, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_SERVER_DEV_MODE", "1")
    flags = ["--tensor-parallel-size", "2", "--profiler-config", '{"profiler": "torch"}',
             "--enable-tokenizer-info-endpoint"]  # fmt: skip
    log = tmp_path / "serve.log"
    with mock_serve(tiny_model, log, serve_args=flags) as serve:

        def call(method: str, path: str, body: str | None = None) -> object:
            status, raw = serve.request(method, path, body)
            assert status == 200, (path, raw)
            return json.loads(raw) if raw else None

        assert call("GET", "/is_sleeping") == {"is_sleeping": False}
        assert call("POST", "/sleep?level=1") == {"status": "sleeping", "level": 1}
        assert call("GET", "/is_sleeping") == {"is_sleeping": True}
        assert call("POST", "/wake_up") == {"status": "awake", "tags": None}
        assert call("GET", "/is_sleeping") == {"is_sleeping": False}
        assert call("POST", "/pause?mode=keep") == {"status": "paused"}
        assert call("GET", "/is_paused") == {"is_paused": True}
        assert call("POST", "/resume") == {"status": "resumed"}
        assert call("GET", "/is_paused") == {"is_paused": False}
        assert call("POST", "/reset_prefix_cache") == {"success": True}
        assert call("POST", "/collective_rpc", '{"method": "ping"}') == {"results": [None]}
        assert call("GET", "/get_world_size") == {"world_size": 2}
        assert call("POST", "/start_profile") is None
        assert call("POST", "/stop_profile") is None
        info = call("GET", "/server_info?config_format=json")
        assert isinstance(info, dict) and info["vllm_env"]["VLLM_SERVER_DEV_MODE"] == "1"
        # the RL trainers' routes (vLLM's answers to the same calls on the mock engine)
        assert call("POST", "/abort_requests", "{}") == {"status": "aborted", "aborted": 0}
        aborted = call("POST", "/abort_requests", '{"request_ids": ["x", "y"]}')
        assert aborted == {"status": "aborted", "aborted": 2}
        assert call("GET", "/weight_info") == {"weight_version": "default"}
        assert call("POST", "/update_weight_version", '{"new_version": "v2"}') == {
            "success": True,
            "new_version": "v2",
        }
        assert call("GET", "/weight_info") == {"weight_version": "v2"}
        status, page = serve.request("GET", "/metrics")
        assert status == 200 and b"rl_weight_update" not in page  # (vLLM's come with the first)
        assert call("POST", "/start_weight_update") == {"message": "Weight update started"}
        status, page = serve.request("GET", "/metrics")
        assert b'vllm:rl_weight_update_operations_in_flight{operation="start"} 0.0' in page
        tokenizer = call("GET", "/tokenizer_info")
        assert isinstance(tokenizer, dict) and tokenizer["name_or_path"] == str(tiny_model)
        status, _ = serve.request("POST", "/v1/completions",
                                  '{"prompt": "hi", "max_tokens": 2}')  # fmt: skip
        assert status == 200
    assert "Development endpoints are enabled" in log.read_text()

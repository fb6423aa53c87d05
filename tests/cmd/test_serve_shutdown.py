"""SIGTERM with requests in flight: what ``--shutdown-timeout`` did not see finish ends as vLLM
0.32's API server ends it, and its engine requests are aborted.

vLLM's server, signalled, shuts its engine client down (``serve_http``'s ``handle_shutdown``):
every request still in flight fails with ``EngineDeadError``, which its handlers answer with the
dead-engine 500, or in a stream with that error event and ``[DONE]``; then it stops serving.
Those endings are the ones an engine's death gives, which tests/mock/test_clients_match_vllm.py
compares with vLLM's server (its last test). A probe of vLLM 0.32's server in front of an
external mock engine gave these endings under ``--shutdown-timeout`` 0 and 5 alike.
"""

from __future__ import annotations

import json
import pathlib
import signal
import socket
import threading
import time

import pytest
from tests.support.mock_serve import mock_serve

from vllm_frontend.server.errors import ENGINE_DEAD_MESSAGE

DEAD = {"message": ENGINE_DEAD_MESSAGE, "type": "InternalServerError", "param": None, "code": 500}


def _post(port: int, path: str, body: dict[str, object], out: dict[str, bytes]) -> None:
    data = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(head.encode() + data)
        raw = b""
        while chunk := s.recv(65536):
            raw += chunk
    out[f"{path} {body.get('stream', False)}"] = raw


def _running(stats: pathlib.Path) -> int:
    return int(json.loads(stats.read_text())["engines"]["0"]["running"])


@pytest.mark.parametrize("timeout", ["0", "0.5"])
def test_requests_in_flight_at_sigterm_end_with_vllms_error_and_are_aborted(
    tiny_model: pathlib.Path, tmp_path: pathlib.Path, timeout: str
) -> None:
    stats = tmp_path / "stats.json"
    # 20 ms steps: a 100-token request would run 2 s; the signal comes after 0.3 s
    engine = ["--step-ms", "20", "--stats-file", str(stats), "--report-interval", "0.05"]
    out: dict[str, bytes] = {}
    with mock_serve(
        tiny_model, tmp_path / "serve.log", serve_args=["--shutdown-timeout", timeout],
        engine_args=engine,
    ) as serve:  # fmt: skip
        messages = [{"role": "user", "content": "hi"}]
        bodies = [
            ("/v1/completions", {"prompt": "hi", "max_tokens": 100, "stream": True}),
            ("/v1/completions", {"prompt": "hi", "max_tokens": 100}),
            ("/v1/chat/completions", {"messages": messages, "max_tokens": 100, "stream": True}),
        ]
        threads = [
            threading.Thread(target=_post, args=(serve.port, path, body, out))
            for path, body in bodies
        ]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 10
        while not stats.exists() or _running(stats) < 3:
            assert time.monotonic() < deadline, "the requests did not reach the engine"
            time.sleep(0.02)
        time.sleep(0.3)
        signalled = time.monotonic()
        serve.process.send_signal(signal.SIGTERM)
        for thread in threads:
            thread.join(30)
        assert serve.process.wait(30) == 0
        # aborted at the engine, long before the requests' own end
        while _running(stats):
            assert time.monotonic() - signalled < 1.5, "the engine requests were not aborted"
            time.sleep(0.02)
    for key, raw in out.items():
        head, _, body = raw.partition(b"\r\n\r\n")
        if key.endswith("True"):
            assert head.startswith(b"HTTP/1.1 200 "), key
            assert body.endswith(b"0\r\n\r\n"), f"{key}: the stream was cut off"
            events = [line for line in body.split(b"\n") if line.startswith(b"data: ")]
            assert json.loads(events[-2][6:]) == {"error": DEAD} and events[-1] == b"data: [DONE]"
        else:
            assert head.startswith(b"HTTP/1.1 500 "), key
            assert json.loads(body) == {"error": DEAD}

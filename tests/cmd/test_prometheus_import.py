"""prometheus_client stays out of the serving process: ``vllm-frontend serve`` renders
``/metrics`` itself (``vllm_frontend.exposition``), so neither startup nor a scrape imports it
(its import is ~60 ms of CPU, which a scrape would spend on the event loop).

The serve test runs the real command in front of the mock engine under ``python -X importtime``,
whose log names every module when it is first imported, as it is imported.
"""

from __future__ import annotations

import http.client
import json
import pathlib
import signal
import subprocess
import sys
import time

from tests.support.engines import free_port, http_status


def test_importing_the_runner_leaves_prometheus_client_unimported() -> None:
    code = "import sys, vllm_frontend.cmd.runner; print('prometheus_client' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False"]


def _request(port: int, method: str, path: str, body: str | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_serve_answers_metrics_scrapes_without_importing_prometheus_client(
    tiny_model: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    port, rpc = free_port(), free_port()
    model = str(tiny_model)
    engine = subprocess.Popen(
        [sys.executable, "-m", "vllm_frontend", "mock-engine",
         "--handshake-address", f"tcp://127.0.0.1:{rpc}", "--max-model-len", "256"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    log = tmp_path / "importtime.log"
    with log.open("w") as stderr:
        frontend = subprocess.Popen(
            [sys.executable, "-X", "importtime", "-m", "vllm_frontend", "serve", model,
             "--port", str(port), "--data-parallel-size-local", "0",
             "--data-parallel-rpc-port", str(rpc)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
            start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while http_status(port, "/health") != 200:
            assert frontend.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, "frontend not healthy after 120 s"
            time.sleep(0.05)
        completion = json.dumps({"model": model, "prompt": "Hello there", "max_tokens": 3})
        chat = json.dumps(
            {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
        )
        assert _request(port, "POST", "/v1/completions", completion)[0] == 200
        assert _request(port, "POST", "/v1/chat/completions", chat)[0] == 200
        assert _request(port, "GET", "/v1/models")[0] == 200
        assert "prometheus_client" not in log.read_text()

        status, body = _request(port, "GET", "/metrics")
        assert status == 200
        text = body.decode()
        assert 'http_requests_total{handler="/v1/completions",method="POST",status="2xx"} 1.0' in (
            text
        )
        assert "vllm:request_success_total{" in text
        assert "vllm:num_requests_running{" in text
        # one process: prometheus_client's default collectors' series come first
        assert text.startswith("# HELP python_gc_objects_collected_total ")
        assert "\nprocess_resident_memory_bytes " in text
        assert _request(port, "GET", "/metrics")[1].count(b"http_requests_total{") == 3
        assert "prometheus_client" not in log.read_text()
    finally:
        frontend.send_signal(signal.SIGTERM)
        try:
            assert frontend.wait(30) == 0
        finally:
            if frontend.poll() is None:
                frontend.kill()
                frontend.wait()
            engine.kill()
            engine.wait()

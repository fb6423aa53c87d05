"""prometheus_client stays out of the serving process: ``vllm-frontend serve`` renders
``/metrics`` itself (``vllm_frontend.metrics.exposition``), so neither startup nor a scrape imports
it (its import is ~60 ms of CPU, which a scrape would spend on the event loop).

The serve test runs the real command in front of the mock engine under ``python -X importtime``,
whose log names every module when it is first imported, as it is imported.
"""

from __future__ import annotations

import gzip
import json
import pathlib
import subprocess
import sys

from tests.support.mock_serve import mock_serve


def test_importing_the_runner_leaves_prometheus_client_unimported() -> None:
    code = "import sys, vllm_frontend.cmd.runner; print('prometheus_client' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False"]


def test_serve_answers_metrics_scrapes_without_importing_prometheus_client(
    tiny_model: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    model = str(tiny_model)
    log = tmp_path / "importtime.log"
    with mock_serve(tiny_model, log, ("-X", "importtime")) as serve:
        completion = json.dumps({"model": model, "prompt": "Hello there", "max_tokens": 3})
        chat = json.dumps(
            {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
        )
        assert serve.request("POST", "/v1/completions", completion)[0] == 200
        assert serve.request("POST", "/v1/chat/completions", chat)[0] == 200
        assert serve.request("GET", "/v1/models")[0] == 200
        assert "prometheus_client" not in log.read_text()

        status, body = serve.request("GET", "/metrics")
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
        assert serve.request("GET", "/metrics")[1].count(b"http_requests_total{") == 3
        assert "prometheus_client" not in log.read_text()

        # the negotiating mount: OpenMetrics, gzip-compressed, rendered here too
        accept = {"Accept": "application/openmetrics-text", "Accept-Encoding": "gzip"}
        status, body = serve.request("GET", "/metrics/", headers=accept)
        assert status == 200
        page = gzip.decompress(body)
        assert b"\n# TYPE vllm:request_success counter\n" in page and page.endswith(b"# EOF\n")
        assert "prometheus_client" not in log.read_text()

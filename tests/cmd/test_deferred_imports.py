"""numpy and jinja2 stay out of startup: ``vllm-frontend serve`` imports jinja2 with the first
chat request and numpy with the first request that needs arrays (tensors, beam search), not
before. Their imports are ~0.1 s and ~0.05 s, a seventh of the time to ``/health``.

The serve test runs the real command in front of the mock engine and looks for each module's
C extension (numpy's core, markupsafe's speedups, which jinja2 imports) among the frontend
process's mapped files (``/proc/PID/maps``): it is mapped exactly when the module is imported.
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


def test_importing_the_runner_leaves_numpy_and_jinja2_unimported() -> None:
    code = (
        "import sys, vllm_frontend.cmd.runner\n"
        "print('numpy' in sys.modules, 'jinja2' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]


def _post(port: int, path: str, body: dict[str, object]) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def _numpy_imported(pid: int) -> bool:
    return "_multiarray_umath" in pathlib.Path(f"/proc/{pid}/maps").read_text()


def _jinja2_imported(pid: int) -> bool:
    return "markupsafe/_speedups" in pathlib.Path(f"/proc/{pid}/maps").read_text()


def test_serve_imports_numpy_and_jinja2_only_for_requests_that_need_them(
    tiny_model: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    port, rpc = free_port(), free_port()
    model = str(tiny_model)
    engine = subprocess.Popen(
        [sys.executable, "-m", "vllm_frontend", "mock-engine",
         "--handshake-address", f"tcp://127.0.0.1:{rpc}", "--max-model-len", "256"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    log = tmp_path / "frontend.log"
    with log.open("w") as stderr:
        frontend = subprocess.Popen(
            [sys.executable, "-m", "vllm_frontend", "serve", model,
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
        completion = {"model": model, "prompt": "Hello there", "max_tokens": 3}
        chat = {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
        assert _post(port, "/v1/completions", completion)[0] == 200
        assert _post(port, "/v1/completions", {**completion, "stream": True})[0] == 200
        assert _post(port, "/v1/completions", {**completion, "logprobs": 2, "seed": 3})[0] == 200
        # Prompt logprobs come as arrays, which are read without numpy.
        status, body = _post(port, "/v1/completions", {**completion, "prompt_logprobs": 1})
        assert status == 200, body
        prompt_logprobs = json.loads(body)["choices"][0]["prompt_logprobs"]
        assert prompt_logprobs[0] is None and len(prompt_logprobs) > 1
        assert not _jinja2_imported(frontend.pid)
        assert not _numpy_imported(frontend.pid)

        # The chat template is compiled (or read from the code cache) with jinja2.
        assert _post(port, "/v1/chat/completions", chat)[0] == 200
        assert _post(port, "/v1/chat/completions", {**chat, "stream": True})[0] == 200
        assert _jinja2_imported(frontend.pid)
        assert not _numpy_imported(frontend.pid)

        # Beam search ranks its candidates with numpy: imported now, and the answer complete.
        beams = {**completion, "use_beam_search": True, "n": 2, "temperature": 0.0}
        status, body = _post(port, "/v1/completions", beams)
        assert status == 200, body
        assert len(json.loads(body)["choices"]) == 2
        assert _numpy_imported(frontend.pid)
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

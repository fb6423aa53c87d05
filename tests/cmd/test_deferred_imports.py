"""numpy and jinja2 stay out of startup: ``vllm-frontend serve`` imports jinja2 with the first
chat request and numpy with the first request that needs arrays (tensors, beam search), not
before. Their imports are ~0.1 s and ~0.05 s, a seventh of the time to ``/health``.

The serve test runs the real command in front of the mock engine and looks for each module's
C extension (numpy's core, markupsafe's speedups, which jinja2 imports) among the frontend
process's mapped files (``/proc/PID/maps``): it is mapped exactly when the module is imported.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

from tests.support.mock_serve import mock_serve


def test_importing_the_runner_leaves_numpy_and_jinja2_unimported() -> None:
    code = (
        "import sys, vllm_frontend.cmd.runner\n"
        "print('numpy' in sys.modules, 'jinja2' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]


def _numpy_imported(pid: int) -> bool:
    return "_multiarray_umath" in pathlib.Path(f"/proc/{pid}/maps").read_text()


def _jinja2_imported(pid: int) -> bool:
    return "markupsafe/_speedups" in pathlib.Path(f"/proc/{pid}/maps").read_text()


def test_serve_imports_numpy_and_jinja2_only_for_requests_that_need_them(
    tiny_model: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    model = str(tiny_model)
    with mock_serve(tiny_model, tmp_path / "frontend.log") as serve:
        pid = serve.process.pid

        def post(path: str, body: dict[str, object]) -> tuple[int, bytes]:
            return serve.request("POST", path, json.dumps(body))

        completion = {"model": model, "prompt": "Hello there", "max_tokens": 3}
        chat = {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
        assert post("/v1/completions", completion)[0] == 200
        assert post("/v1/completions", {**completion, "stream": True})[0] == 200
        assert post("/v1/completions", {**completion, "logprobs": 2, "seed": 3})[0] == 200
        # Prompt logprobs come as arrays, which are read without numpy.
        status, body = post("/v1/completions", {**completion, "prompt_logprobs": 1})
        assert status == 200, body
        prompt_logprobs = json.loads(body)["choices"][0]["prompt_logprobs"]
        assert prompt_logprobs[0] is None and len(prompt_logprobs) > 1
        assert not _jinja2_imported(pid)
        assert not _numpy_imported(pid)
        assert "openai_harmony" not in pathlib.Path(f"/proc/{pid}/maps").read_text()  # gpt-oss's

        # The chat template is compiled (or read from the code cache) with jinja2.
        assert post("/v1/chat/completions", chat)[0] == 200
        assert post("/v1/chat/completions", {**chat, "stream": True})[0] == 200
        assert _jinja2_imported(pid)
        assert not _numpy_imported(pid)

        # Beam search ranks its candidates with numpy: imported now, and the answer complete.
        beams = {**completion, "use_beam_search": True, "n": 2, "temperature": 0.0}
        status, body = post("/v1/completions", beams)
        assert status == 200, body
        assert len(json.loads(body)["choices"]) == 2
        assert _numpy_imported(pid)


def test_importing_the_runner_leaves_the_media_libraries_unimported() -> None:
    # The server carries the media policy from startup; loading media (aiohttp, Pillow, OpenCV,
    # soundfile, PyAV and the loader's own modules) waits for the first request with media.
    heavy = [
        "aiohttp", "PIL", "cv2", "soundfile", "av", "pybase64",
        "vllm_frontend.multimodal.media.loader", "vllm_frontend.multimodal.media.http",
    ]  # fmt: skip
    code = (
        "import sys, vllm_frontend.cmd.runner\n"
        "import vllm_frontend.multimodal.media.policy\n"
        f"print([m for m in {heavy!r} if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"

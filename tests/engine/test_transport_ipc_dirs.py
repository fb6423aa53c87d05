"""Private IPC directories: named after their process, and the ones killed frontends left behind
are removed by the next frontend that makes one."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import tempfile
import time

import pytest

from vllm_frontend.engine.transport import bind_stream_listeners


def _aged(path: pathlib.Path, seconds: float) -> pathlib.Path:
    path.mkdir()
    (path / "input").touch()
    then = time.time() - seconds
    os.utime(path, (then, then))
    return path


def test_directories_left_by_killed_frontends_are_removed(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    stale = _aged(tmp_path / f"vllm-fe-{gone.pid}-a1b2", 3600)
    fresh = _aged(tmp_path / f"vllm-fe-{gone.pid}-c3d4", 1)  # engines may still be connecting
    live = _aged(tmp_path / f"vllm-fe-{os.getpid()}-e5f6", 3600)
    unnamed = _aged(tmp_path / "vllm-fe-x7y8z9", 3600)  # no pid in the name: not ours to judge

    listeners = bind_stream_listeners(1, local=True, host="127.0.0.1")
    try:
        assert listeners.tmpdir is not None
        made = pathlib.Path(listeners.tmpdir)
        assert made.parent == tmp_path
        assert made.name.startswith(f"vllm-fe-{os.getpid()}-")
        assert not stale.exists()
        assert fresh.exists() and live.exists() and unnamed.exists()
    finally:
        listeners.cleanup()
    assert not made.exists()

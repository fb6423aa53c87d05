"""Private IPC directories: named after their process, and the ones killed frontends left behind
are removed by the next frontend that makes one."""

from __future__ import annotations

import os
import pathlib
import tempfile

import pytest
from tests.support.aged_dirs import aged_dir, exited_pid

from vllm_frontend.engine.transport import bind_stream_listeners


def test_directories_left_by_killed_frontends_are_removed(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = exited_pid()
    stale = aged_dir(tmp_path / f"vllm-fe-{gone}-a1b2", 3600)
    fresh = aged_dir(tmp_path / f"vllm-fe-{gone}-c3d4", 1)  # engines may still be connecting
    live = aged_dir(tmp_path / f"vllm-fe-{os.getpid()}-e5f6", 3600)
    unnamed = aged_dir(tmp_path / "vllm-fe-x7y8z9", 3600)  # no pid in the name: not ours to judge

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

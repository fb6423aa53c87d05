"""Private temporary directories carry their process's pid, and making one removes the stale
ones of the same kind: those whose process is gone, older than a minute, of this user."""

from __future__ import annotations

import os
import pathlib
import tempfile

import pytest

from tests.support.aged_dirs import aged_dir, exited_pid
from vllm_frontend.private_dirs import make_private_dir


def test_a_new_directory_sweeps_the_stale_ones_of_its_kind_only(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = exited_pid()
    stale = aged_dir(tmp_path / f"vllm-fe-metrics-{gone}-a1b2", 3600)
    fresh = aged_dir(tmp_path / f"vllm-fe-metrics-{gone}-c3d4", 1)
    live = aged_dir(tmp_path / f"vllm-fe-metrics-{os.getpid()}-e5f6", 3600)
    old_style = aged_dir(tmp_path / "vllm-fe-metrics-x7y8z9", 3600)  # no pid: not ours to judge
    other_kind = aged_dir(tmp_path / f"vllm-fe-{gone}-g7h8", 3600)  # an IPC directory

    made = pathlib.Path(make_private_dir("vllm-fe-metrics-"))

    assert made.parent == tmp_path and made.is_dir()
    assert made.name.startswith(f"vllm-fe-metrics-{os.getpid()}-")
    assert (made.stat().st_mode & 0o777) == 0o700
    assert not stale.exists()
    assert fresh.exists() and live.exists() and old_style.exists() and other_kind.exists()


def test_directories_of_other_users_are_left_alone(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    theirs = aged_dir(tmp_path / f"vllm-fe-metrics-{exited_pid()}-a1b2", 3600)
    monkeypatch.setattr(os, "getuid", lambda: os.geteuid() + 1)
    make_private_dir("vllm-fe-metrics-")
    assert theirs.exists()

"""Helpers for tests of the stale-directory sweep: a directory made to look old, and the pid of
a process that has exited."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time


def aged_dir(path: pathlib.Path, seconds: float) -> pathlib.Path:
    """Make directory ``path`` (with a file in it), last modified ``seconds`` ago."""
    path.mkdir()
    (path / "content").touch()
    then = time.time() - seconds
    os.utime(path, (then, then))
    return path


def exited_pid() -> int:
    """The pid of a child process that has run and exited (and been reaped)."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    return gone.pid

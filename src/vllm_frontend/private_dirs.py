"""Private temporary directories named after the process that made them, and the sweep of those
that killed processes left behind.

A process removes its directories when it shuts down cleanly, but SIGKILL (or a crash) gives it
no chance to, and they would pile up in the temporary directory. Each name carries the creator's
pid; making a new directory first removes the ones with the same prefix whose process is gone,
that belong to the current user, and that are older than a minute (so a directory that a process
which just started is about to use is never taken).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time

__all__ = ["make_private_dir"]

_STALE_AFTER_S = 60.0


def make_private_dir(prefix: str) -> str:
    """A new directory ``<tmp>/<prefix><pid>-XXXX`` (mode 0700) for this process, after removing
    the stale ones with the same ``prefix`` (see the module's docstring)."""
    remove_stale_dirs(prefix)
    return tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-")


def remove_stale_dirs(prefix: str, root: str | None = None) -> None:
    """Remove ``prefix<pid>-…`` directories under ``root`` (default: the temporary directory)
    whose process is gone, that the current user owns and that are older than a minute."""
    root = root if root is not None else tempfile.gettempdir()
    now = time.time()
    try:
        entries = list(os.scandir(root))
    except OSError:
        return
    for entry in entries:
        name = entry.name
        if not name.startswith(prefix):
            continue
        pid_text = name[len(prefix) :].partition("-")[0]
        if not pid_text.isdigit() or _alive(int(pid_text)):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
            if not entry.is_dir(follow_symlinks=False) or info.st_uid != os.getuid():
                continue
            if now - info.st_mtime < _STALE_AFTER_S:
                continue
        except OSError:
            continue
        shutil.rmtree(entry.path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # e.g. EPERM: it exists, as someone else's
        return True
    return True

"""The C allocator's setting for a serving process: large blocks go back to the OS when freed.

glibc serves a block of at least its mmap threshold (128 KiB at start) from a mapping of its own,
unmapped when freed; but each time such a block is freed it raises the threshold to that block's
size (up to 32 MiB), so later blocks of that size come from the heap and arenas, where what is
freed stays resident unless trimmed. fastokens' load frees many large blocks; with the threshold
held at 128 KiB the served process ends ~4 MB smaller and the load's transient peak ~50 MB lower
(Llama 3's tokenizer). Setting the threshold is what ``MALLOC_MMAP_THRESHOLD_=131072`` does: if
any of glibc's ``MALLOC_*`` tuning variables is set, the environment's settings are left alone.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Mapping

__all__ = ["MMAP_THRESHOLD", "fix_mmap_threshold"]

MMAP_THRESHOLD = 128 * 1024
"""Bytes from which a block gets a mapping of its own (glibc's initial value, then kept)."""

_M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)
_TUNING_VARS = (
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_TOP_PAD_",
    "MALLOC_MMAP_MAX_",
    "GLIBC_TUNABLES",
)


def fix_mmap_threshold(environ: Mapping[str, str] | None = None) -> bool:
    """Hold glibc's mmap threshold at :data:`MMAP_THRESHOLD` (no dynamic raising); False where
    the C library is not glibc or the environment tunes the allocator itself."""
    env = os.environ if environ is None else environ
    if any(name in env for name in _TUNING_VARS):
        return False
    with contextlib.suppress(OSError, AttributeError):
        return bool(ctypes.CDLL("libc.so.6").mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    return False

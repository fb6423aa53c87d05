"""One glibc malloc arena for a serving process.

glibc gives a thread that allocates while another holds the arena its own arena, up to eight
per core. A frontend process allocates on its event-loop thread; its other threads are
short-lived loaders and workers, foremost fastokens' load, whose ~50 MB of tables lands in
such an arena and keeps ~4 MB more of it resident than the same tables in the main arena
(partly used pages of the arena's own heaps, which ``malloc_trim`` cannot hand back).
With one arena every thread allocates from the main one (each keeps its own small-block
cache, so a thread's allocations stay lock-only when no other thread allocates at the time).
"""

from __future__ import annotations

import contextlib
import ctypes
import os

__all__ = ["ARENA_ENV", "share_one_malloc_arena"]

ARENA_ENV = "MALLOC_ARENA_MAX"
"""glibc's own setting of the arena count: when the environment sets it, it is left alone."""

_M_ARENA_MAX = -8  # glibc's mallopt parameter (malloc.h)


def share_one_malloc_arena() -> bool:
    """Limit glibc's malloc to its main arena (call before the process starts other threads);
    True when the limit was set. Nothing is done where the environment sets
    ``MALLOC_ARENA_MAX`` or the C library is not glibc."""
    if ARENA_ENV in os.environ:
        return False
    with contextlib.suppress(OSError, AttributeError):
        mallopt = ctypes.CDLL(None).mallopt
        mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
        mallopt.restype = ctypes.c_int
        return bool(mallopt(_M_ARENA_MAX, 1))
    return False

"""The served process's allocator setting (`vllm_frontend.cmd.heap`).

Each case runs in a fresh interpreter: the setting is process-wide and cannot be undone.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only"
)

# After a 1 MiB block is freed, glibc raises its mmap threshold to 1 MiB, unless it is held:
# then a 512 KiB block still gets a mapping of its own (mallinfo2's hblks counts them).
_PROBE = """
import ctypes, sys
from vllm_frontend.cmd.heap import fix_mmap_threshold

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
libc.mallinfo2.restype = MallInfo2
held = fix_mmap_threshold() if sys.argv[1:] != ["skip"] else None
libc.free(libc.malloc(1 << 20))
before = libc.mallinfo2().hblks
block = libc.malloc(512 << 10)
print(held, libc.mallinfo2().hblks - before)
libc.free(block)
"""


def _probe(*args: str) -> str:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    environ.pop("GLIBC_TUNABLES", None)
    src = os.path.join(os.path.dirname(__file__), "..", "..", "src")
    environ["PYTHONPATH"] = os.path.abspath(src)
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, *args],
        env=environ,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def test_threshold_held() -> None:
    assert _probe() == "True 1"


def test_dynamic_threshold_without_it() -> None:
    # The probe itself: glibc raises the threshold, the 512 KiB block comes from the heap.
    assert _probe("skip") == "None 0"


@pytest.mark.parametrize(
    "name",
    ["MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "GLIBC_TUNABLES"],
)
def test_environment_settings_win(name: str) -> None:
    from vllm_frontend.cmd.heap import fix_mmap_threshold

    assert fix_mmap_threshold({name: "65536"}) is False

"""A serving process keeps glibc's malloc to its main arena: another thread's allocations (such as
fastokens' load) land there instead of in an arena of their own; ``MALLOC_ARENA_MAX`` in the
environment is left to glibc. Each case runs in a fresh interpreter (the limit is per process and
set before any other thread starts); glibc's ``malloc_stats`` lists the arenas in use."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None,
    reason="glibc's malloc",
)

_CODE = """
import ctypes, sys, threading
from vllm_frontend.cmd.heap import share_one_malloc_arena
if sys.argv[1] == "limit":
    print(share_one_malloc_arena(), flush=True)
def allocate():
    global kept
    kept = [bytearray(1 << 20) for _ in range(8)]  # malloc'd (large) blocks
worker = threading.Thread(target=allocate)
worker.start()
worker.join()
ctypes.CDLL(None).malloc_stats()  # to stderr
"""


def _arenas(mode: str, env: dict[str, str] | None = None) -> tuple[str, int]:
    environ = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    environ.update(env or {})
    out = subprocess.run(
        [sys.executable, "-c", _CODE, mode],
        capture_output=True,
        text=True,
        timeout=60,
        env=environ,
        check=True,
    )
    return out.stdout.strip(), sum(line.startswith("Arena ") for line in out.stderr.splitlines())


def test_without_the_limit_a_thread_allocates_in_an_arena_of_its_own() -> None:
    # (the control: what the limit prevents)
    assert _arenas("none") == ("", 2)


def test_with_the_limit_every_thread_allocates_in_the_main_arena() -> None:
    assert _arenas("limit") == ("True", 1)


def test_the_environments_setting_is_left_to_glibc() -> None:
    assert _arenas("limit", {"MALLOC_ARENA_MAX": "4"}) == ("False", 2)


_ENTRY = """
import ctypes, sys, threading
from vllm_frontend.cli import main
rc = main(sys.argv[1:])
def allocate():
    global kept
    kept = [bytearray(1 << 20) for _ in range(8)]
worker = threading.Thread(target=allocate)
worker.start()
worker.join()
print(rc, flush=True)
ctypes.CDLL(None).malloc_stats()
"""


@pytest.mark.parametrize(
    "argv",
    [
        ["serve", "some-model", "-dpl", "0", "--lora-modules", "{"],
        ["render", "some-model", "--api-server-count", "2"],
        [
            "frontend",
            "--listen-fd",
            "0",
            "--input-listener-fd",
            "0",
            "--output-listener-fd",
            "0",
            "--args-json",
            "[]",
        ],
    ],
    ids=["serve", "render", "frontend"],
)
def test_every_serving_entry_point_takes_the_limit_first(argv: list[str]) -> None:
    # Each is refused after it starts (status 2), which leaves the process as it set it up.
    environ = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    out = subprocess.run(
        [sys.executable, "-c", _ENTRY, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env=environ,
        check=True,
    )
    assert out.stdout.split()[-1] == "2", out.stderr
    assert sum(line.startswith("Arena ") for line in out.stderr.splitlines()) == 1

"""Managed headless vLLM engines: launch ``vllm serve MODEL --headless …``, watch it, stop it."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import importlib.util
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

import msgspec

logger = logging.getLogger(__name__)


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def death_signal_setter() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGTERM when this process dies (even by
    SIGKILL), so no orphaned child (a frontend holding the port, engines holding memory)
    outlives it; None off Linux."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here, not after fork
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def set_death_signal() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the line above took effect
            os._exit(1)

    return set_death_signal


def default_python() -> str:
    """The interpreter that runs managed engines when ``--python`` is not given.

    ``$VLLM_FRONTEND_PYTHON`` wins; then this interpreter if vLLM is importable from it (checked
    without importing it); then ``python3`` on PATH.
    """
    env = os.environ.get("VLLM_FRONTEND_PYTHON")
    if env:
        return env
    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    return shutil.which("python3") or "python3"


class ManagedEngineSpec(msgspec.Struct):
    """How to launch the headless engines of one ``serve`` command."""

    python: str
    model: str
    handshake_host: str
    handshake_port: int
    data_parallel_size: int = 1
    data_parallel_size_local: int | None = None
    passthrough: list[str] = msgspec.field(default_factory=list)

    def command(self) -> list[str]:
        """The engine launcher's command line."""
        cmd = [
            self.python,
            "-m",
            "vllm.entrypoints.cli.main",
            "serve",
            self.model,
            "--headless",
            "--data-parallel-address",
            self.handshake_host,
            "--data-parallel-rpc-port",
            str(self.handshake_port),
            "--data-parallel-size",
            str(self.data_parallel_size),
        ]
        cmd += self.passthrough  # the engines' options, and those both sides need
        if self.data_parallel_size_local is not None:
            cmd += ["--data-parallel-size-local", str(self.data_parallel_size_local)]
        return cmd


class ManagedEngines:
    """The launcher process of the managed engines, in its own process group."""

    def __init__(self, spec: ManagedEngineSpec) -> None:
        self.spec = spec
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, extra_env: dict[str, str] | None = None) -> None:
        """Start the engines (returns at once; they register with the handshake later)."""
        cmd = self.spec.command()
        logger.info("starting managed engines: %s", " ".join(cmd))
        env = dict(os.environ)
        env.update(extra_env or {})
        try:
            # Own process group (stopped as a group), yet tied to us: if this process is
            # killed outright, the launcher still gets SIGTERM and takes its engines down.
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=env,
                preexec_fn=death_signal_setter(),
            )
        except OSError as e:
            raise RuntimeError(f"cannot start the engine interpreter {cmd[0]!r}: {e}") from None

    @property
    def pid(self) -> int | None:
        """The launcher's pid (also its process group id)."""
        return self._proc.pid if self._proc else None

    def returncode(self) -> int | None:
        """The launcher's exit status, or None while it runs."""
        return self._proc.poll() if self._proc else None

    async def wait(self) -> int:
        """Wait (without blocking the loop) until the launcher exits; return its status."""
        while True:
            rc = self.returncode()
            if rc is not None:
                return rc
            await asyncio.sleep(0.2)

    def stop(self, timeout: float = 0.0) -> None:
        """SIGTERM the engines' process group, wait ``max(timeout, 5)`` s, then SIGKILL it."""
        proc = self._proc
        if proc is None:
            return
        self._signal_group(signal.SIGTERM)
        deadline = time.monotonic() + max(timeout, 5.0)
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        self._signal_group(signal.SIGKILL)
        proc.wait()

    def _signal_group(self, sig: int) -> None:
        if self._proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, sig)


def split_passthrough(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split ``argv`` at a literal ``--`` into (ours, verbatim engine arguments)."""
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, []

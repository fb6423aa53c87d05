"""Real vLLM CPU engines for tests: headless EngineCore processes and vLLM's own full server.

Headless engines (`vllm serve MODEL --headless ...`) connect to a frontend's handshake address
and wait there; they become ready only once that frontend answers their handshake, so this module
starts them and watches them but cannot wait for readiness itself.

    with headless_engines(handshake_port, count=2) as engines:
        ...  # point the client at engines.handshake_address; engines.kill_engine(1) for death tests

    with vllm_server() as server:       # vLLM's own Python frontend, for differential tests
        openai.OpenAI(base_url=server.base_url + "/v1", api_key="x")

Every process is started in its own process group and with its output in a log file; stopping
sends SIGTERM to the group, then SIGKILL. Groups still alive when the interpreter exits are
killed, and a watchdog per group kills it if the test process itself is killed, so a crashed
or timed-out test run leaves nothing behind. `nice=` lowers a group's CPU priority (see
_lower_priority) so that busy engines do not starve the processes under test.
"""

from __future__ import annotations

import atexit
import contextlib
import http.client
import os
import pathlib
import random
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import psutil

from tests.support.tiny_model import cache_root, tiny_model_dir

# `vllm` console script of the interpreter running the tests (the project's venv).
VLLM_CLI = pathlib.Path(sys.executable).with_name("vllm")
# What start_vllm runs for `vllm ARGS`: the same CLI, its EngineCore processes forked rather than
# spawned (one interpreter fewer importing torch and vLLM per engine start; see the module).
VLLM_FORKING_CLI = (sys.executable, str(pathlib.Path(__file__).with_name("vllm_forking_cli.py")))

# Flags every engine here needs (see issue 2): eager mode, a small context, and a memory share
# that leaves room for several engines and the test processes on one NUMA node.
BASE_ENGINE_ARGS: tuple[str, ...] = (
    "--enforce-eager",
    "--max-model-len",
    "2048",
    "--gpu-memory-utilization",
    "0.5",
)

# A CPU engine binds its OpenMP threads to a whole NUMA node by default (one node per local
# engine, which a one-node box lacks for a second engine) and reserves cores; on 2 cores that
# starves everything else. One unbound thread per engine is plenty for the tiny model.
# VLLM_ENABLE_V1_MULTIPROCESSING=0 keeps a one-rank engine's worker inside its EngineCore process
# (vLLM's CPU platform otherwise forces the multiprocessing executor, vllm/platforms/cpu.py): one
# interpreter fewer importing torch and vLLM per engine start, a third of its CPU time. vLLM's
# API servers still run their engines in separate processes (AsyncLLM always does).
ENGINE_ENV: dict[str, str] = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_TARGET_DEVICE": "cpu",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "OMP_NUM_THREADS": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "PYTHONUNBUFFERED": "1",
}

_LIVE: set[subprocess.Popen[bytes]] = set()
_WATCHDOGS: dict[int, subprocess.Popen[bytes]] = {}  # process group -> its watchdog


class EngineProcessError(RuntimeError):
    """A vLLM process exited or misbehaved; the message carries the tail of its log."""


_PORTS = random.Random()  # its own generator: a test seeding `random` must not repeat ports


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, below the ephemeral range.

    A port from bind(("", 0)) is free again once the probe closes, and until its server binds
    it (30 s later for a vLLM server) the kernel may hand it to anyone asking for a port the
    same way (vLLM picks its internal ports so) or, once even ports run short, to an outgoing
    connection. Ports below the ephemeral range are never handed out like that.
    """
    try:
        text = pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
        ephemeral_low = int(text.split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768
    low = max(1024, ephemeral_low // 2)
    for _ in range(200):
        port = _PORTS.randrange(low, ephemeral_low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # a crowded range: any port
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def engine_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a vLLM CPU process: the caller's, plus ENGINE_ENV, plus `extra`."""
    env = dict(os.environ)
    env.update(ENGINE_ENV)
    env["PATH"] = f"{VLLM_CLI.parent}{os.pathsep}{env.get('PATH', '')}"
    if extra:
        env.update(extra)
    return env


def log_dir() -> pathlib.Path:
    """Where process logs go (`<test cache>/logs`); files older than a day are pruned."""
    directory = cache_root() / "logs"
    directory.mkdir(parents=True, exist_ok=True)
    cutoff = time.time() - 86400
    for old in directory.glob("*.log"):
        with contextlib.suppress(OSError):
            if old.stat().st_mtime < cutoff:
                old.unlink()
    return directory


@dataclass
class VllmProcess:
    """One `vllm serve` process (and its children) in its own process group, logging to a file."""

    name: str
    argv: list[str]
    log_path: pathlib.Path
    popen: subprocess.Popen[bytes]
    started_at: float = field(default_factory=time.monotonic)

    @property
    def pid(self) -> int:
        """The launcher's pid (also its process group id)."""
        return self.popen.pid

    def is_running(self) -> bool:
        """Whether the launcher process has not exited."""
        return self.popen.poll() is None

    def log_tail(self, lines: int = 60) -> str:
        """The last lines of the process's log."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def check_running(self) -> None:
        """Raise EngineProcessError (with the log tail) if the launcher has exited."""
        code = self.popen.poll()
        if code is not None:
            raise EngineProcessError(
                f"{self.name} exited with code {code}; log {self.log_path}:\n{self.log_tail()}"
            )

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM the process group, then SIGKILL whatever is left after `timeout` seconds."""
        _stop_groups([self.popen], timeout)


def start_vllm(
    name: str,
    args: Sequence[str],
    env: Mapping[str, str] | None = None,
    *,
    program: pathlib.Path | str = VLLM_CLI,
    nice: int = 0,
) -> VllmProcess:
    """Start `vllm <args>` (or another `program`) in a new process group, logging to a file.

    The environment is engine_env(env); the log lands in log_dir() under `name`. A positive
    `nice` lowers the CPU priority of the process and everything it starts. `vllm` itself runs
    as tests/support/vllm_forking_cli.py (its EngineCore processes forked, not spawned).
    """
    command = VLLM_FORKING_CLI if program == VLLM_CLI else (str(program),)
    argv = [*command, *args]
    log_path = log_dir() / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    with log_path.open("wb") as log:
        log.write(("$ " + " ".join(argv) + "\n").encode())
        log.flush()
        popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=engine_env(env),
            start_new_session=True,
        )
    _LIVE.add(popen)
    _start_watchdog(popen.pid)
    if nice:
        _lower_priority(popen.pid, nice)
    return VllmProcess(name=name, argv=argv, log_path=log_path, popen=popen)


def _lower_priority(pid: int, nice: int) -> None:
    # A busy CPU engine keeps both of its processes (EngineCore polling its worker, and the
    # worker) on a core each; on 2 cores that starved the test process, and the frontend serving
    # inside it, for up to a second at a time, so a 200-token stream could finish before its
    # client had read one chunk. Niceness alone does not help: the kernel's autogroup
    # scheduling shares CPU between sessions first, and the engine runs in a session of its own
    # (start_new_session), so the session's group gets the lower priority. Both are set, right
    # after the launch, before the launcher has started its children (which inherit both).
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, pid, nice)
    with contextlib.suppress(OSError), open(f"/proc/{pid}/autogroup", "w") as f:
        f.write(str(nice))


# --- headless engines -------------------------------------------------------------------------

_ENGINE_TITLE = re.compile(r"EngineCore(?:_DP(\d+))?")


@dataclass
class HeadlessEngines:
    """Headless EngineCore processes, started by one or more `vllm serve --headless` launchers."""

    handshake_address: str
    ranks: list[int]  # the data-parallel ranks of these engines
    launchers: list[tuple[int, VllmProcess]]  # (first data-parallel rank, launcher)

    def engine_pids(self, timeout: float = 300.0) -> dict[int, int]:
        """Data-parallel rank -> pid of that EngineCore process, waiting until all have started."""
        deadline = time.monotonic() + timeout
        while True:
            found: dict[int, int] = {}
            for first_rank, launcher in self.launchers:
                launcher.check_running()
                found.update(_engine_children(launcher.pid, first_rank))
            if set(self.ranks) <= set(found):
                return {rank: found[rank] for rank in self.ranks}
            if time.monotonic() > deadline:
                raise EngineProcessError(
                    f"engines {sorted(set(self.ranks) - set(found))} did not start within "
                    f"{timeout} s:\n{self.logs()}"
                )
            time.sleep(0.2)

    def kill_engine(self, rank: int = 0, sig: signal.Signals = signal.SIGKILL) -> int:
        """Send `sig` (default SIGKILL, as `kill -9`) to one EngineCore process; returns its pid.

        Only that engine dies abruptly, but its launcher then shuts down the other engines it
        started.
        """
        pid = self.engine_pids()[rank]
        os.kill(pid, sig)
        return pid

    def check_running(self) -> None:
        """Raise EngineProcessError (with log tails) if any launcher has exited."""
        for _, launcher in self.launchers:
            launcher.check_running()

    def log_paths(self) -> list[pathlib.Path]:
        """The launchers' log files."""
        return [launcher.log_path for _, launcher in self.launchers]

    def logs(self, lines: int = 60) -> str:
        """The tail of every launcher's log, for failure messages."""
        return "\n".join(
            f"--- {launcher.log_path}\n{launcher.log_tail(lines)}" for _, launcher in self.launchers
        )

    def stop(self, timeout: float = 15.0) -> None:
        """Stop every launcher and its engines (SIGTERM, then SIGKILL), all at once."""
        stop_processes([launcher for _, launcher in self.launchers], timeout)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Freeze every engine (SIGSTOP to its process group) for the ``with`` block.

        A frozen engine makes no progress and sends nothing, but its connections stay up: what
        happens meanwhile cannot be the engine's doing. SIGCONT on the way out.
        """
        for _, launcher in self.launchers:
            _signal_group(launcher.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            for _, launcher in self.launchers:
                _signal_group(launcher.pid, signal.SIGCONT)


def headless_engine_args(
    model: pathlib.Path | str,
    handshake_port: int,
    *,
    data_parallel_size: int,
    local_count: int,
    start_rank: int = 0,
    host: str = "127.0.0.1",
) -> list[str]:
    """The `vllm serve` arguments for `local_count` headless engines of a DP group."""
    args = [
        "serve",
        str(model),
        "--headless",
        "--data-parallel-address",
        host,
        "--data-parallel-rpc-port",
        str(handshake_port),
        "--data-parallel-size",
        str(data_parallel_size),
        "--data-parallel-size-local",
        str(local_count),
        *BASE_ENGINE_ARGS,
    ]
    if start_rank:
        args += ["--data-parallel-start-rank", str(start_rank)]
    return args


def external_engine_args(handshake_port: int, data_parallel_size: int = 1) -> list[str]:
    """`vllm serve` arguments for a frontend that owns the handshake and starts no engines."""
    return [
        "--data-parallel-size-local",
        "0",
        "--data-parallel-address",
        "127.0.0.1",
        "--data-parallel-rpc-port",
        str(handshake_port),
        "--data-parallel-size",
        str(data_parallel_size),
    ]


def start_headless_engines(
    handshake_port: int,
    count: int = 1,
    *,
    model: pathlib.Path | str | None = None,
    data_parallel_size: int | None = None,
    start_rank: int = 0,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    nice: int = 0,
) -> HeadlessEngines:
    """Start `count` headless engines (ranks start_rank..) that connect to 127.0.0.1:handshake_port.

    `data_parallel_size` defaults to `count`; give a larger one to start only part of a DP group
    (the rest started elsewhere); one launcher starts them all. A positive `nice` runs them at
    a lower CPU priority than the test process (see start_vllm).
    """
    model = model or tiny_model_dir()
    size = data_parallel_size or count
    if not (count > 0 and start_rank >= 0 and start_rank + count <= size):
        raise ValueError(f"ranks {start_rank}..{start_rank + count - 1} do not fit DP size {size}")
    groups = [(start_rank, count)]
    ranks = list(range(start_rank, start_rank + count))
    engines = HeadlessEngines(f"tcp://127.0.0.1:{handshake_port}", ranks, [])
    try:
        for first_rank, local in groups:
            args = headless_engine_args(
                model,
                handshake_port,
                data_parallel_size=size,
                local_count=local,
                start_rank=first_rank,
            )
            name = f"engine-dp{first_rank}" + (f"-{first_rank + local - 1}" if local > 1 else "")
            launcher = start_vllm(name, [*args, *extra_args], env, nice=nice)
            engines.launchers.append((first_rank, launcher))
    except BaseException:
        engines.stop()
        raise
    return engines


@contextlib.contextmanager
def headless_engines(
    handshake_port: int,
    count: int = 1,
    *,
    model: pathlib.Path | str | None = None,
    data_parallel_size: int | None = None,
    start_rank: int = 0,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    nice: int = 0,
) -> Iterator[HeadlessEngines]:
    """Headless engines for the duration of a `with` block (see start_headless_engines)."""
    engines = start_headless_engines(
        handshake_port,
        count,
        model=model,
        data_parallel_size=data_parallel_size,
        start_rank=start_rank,
        extra_args=extra_args,
        env=env,
        nice=nice,
    )
    try:
        yield engines
    finally:
        stop_all([engines])


def _engine_children(launcher_pid: int, first_rank: int) -> dict[int, int]:
    # EngineCore processes retitle themselves (setproctitle) to "VLLM::EngineCore" or, with data
    # parallelism, "VLLM::EngineCore_DP<rank>" once they run; before that they look like python.
    found: dict[int, int] = {}
    try:
        children = psutil.Process(launcher_pid).children()
    except psutil.NoSuchProcess:
        return found
    for child in children:
        try:
            title = " ".join(child.cmdline())
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        match = _ENGINE_TITLE.search(title)
        if match:
            found[int(match.group(1)) if match.group(1) else first_rank] = child.pid
    return found


# --- vLLM's own server ------------------------------------------------------------------------


@dataclass
class VllmServer:
    """vLLM's own OpenAI server (`vllm serve` with its Python frontend) on 127.0.0.1."""

    port: int
    process: VllmProcess

    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:<port>` (append `/v1` for the OpenAI SDK)."""
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 300.0) -> float:
        """Wait until GET /health answers 200; returns the seconds since the process started."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.process.check_running()
            if http_status(self.port, timeout=2) == 200:
                return time.monotonic() - self.process.started_at
            time.sleep(0.5)
        raise EngineProcessError(
            f"vLLM server not ready after {timeout} s; log {self.process.log_path}:\n"
            f"{self.process.log_tail()}"
        )

    def stop(self, timeout: float = 15.0) -> None:
        """Stop the server and its engines."""
        self.process.stop(timeout)


def start_vllm_server(
    *,
    model: pathlib.Path | str | None = None,
    port: int | None = None,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> VllmServer:
    """Start `vllm serve MODEL --port P` (not waiting for it; see VllmServer.wait_ready).

    `extra_args` go last, e.g. external_engine_args(handshake_port, n) for a frontend of
    headless engines started separately.
    """
    port = port or free_port()
    args = [
        "serve",
        str(model or tiny_model_dir()),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *BASE_ENGINE_ARGS,
        *extra_args,
    ]
    return VllmServer(port, start_vllm(f"vllm-server-{port}", args, env))


@contextlib.contextmanager
def vllm_server(
    *,
    model: pathlib.Path | str | None = None,
    port: int | None = None,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    ready_timeout: float = 300.0,
) -> Iterator[VllmServer]:
    """A ready vLLM server for the duration of a `with` block."""
    server = start_vllm_server(model=model, port=port, extra_args=extra_args, env=env)
    try:
        server.wait_ready(ready_timeout)
        yield server
    finally:
        stop_all([server])


def http_status(
    port: int, path: str = "/health", host: str = "127.0.0.1", timeout: float = 5.0
) -> int | None:
    """The status of ``GET path``; None when nothing answers (not up yet, or gone)."""
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        response.read()
        return response.status
    except OSError:
        return None
    finally:
        connection.close()


# --- stopping ---------------------------------------------------------------------------------


def stop_processes(processes: Sequence[VllmProcess], timeout: float = 15.0) -> None:
    """Stop several process groups at once: SIGTERM to all, then SIGKILL after `timeout`."""
    _stop_groups([process.popen for process in processes], timeout)


Stoppable = VllmProcess | VllmServer | HeadlessEngines | subprocess.Popen[Any]
"""Anything a fixture starts in a process group of its own."""


# A fixture's teardown needs its processes gone, not a clean exit: a headless launcher (`vllm
# serve --headless`) takes 5 s to exit after SIGTERM, vLLM's server 1-2 s; an engine whose
# launcher is killed before it kills the engine itself lingers until the SIGKILL at `timeout`.
TEARDOWN_GRACE = 2.0


def stop_all(
    stoppables: Sequence[Stoppable], timeout: float = 15.0, grace: float = TEARDOWN_GRACE
) -> None:
    """Stop the process groups of a whole stack at once, for a fixture's teardown: SIGTERM to
    all; SIGKILL, after ``grace`` seconds, to a group whose leader is still there (but not to
    its resource tracker, which then cleans up and exits) and to whatever is left after
    ``timeout``. One after another, and each waited for in full, a stack's teardown took the
    sum of its processes' slow exits."""
    popens: list[subprocess.Popen[Any]] = []
    for item in stoppables:
        if isinstance(item, VllmServer):
            popens.append(item.process.popen)
        elif isinstance(item, VllmProcess):
            popens.append(item.popen)
        elif isinstance(item, HeadlessEngines):
            popens += [launcher.popen for _, launcher in item.launchers]
        else:
            popens.append(item)
    _stop_groups(popens, timeout, grace)


def _stop_groups(
    popens: Sequence[subprocess.Popen[Any]], timeout: float, grace: float | None = None
) -> None:
    # start_new_session made each launcher the leader of its own process group: signalling the
    # group reaches the engines and their workers too, even after the launcher itself is gone.
    members: list[psutil.Process] = []
    for popen in popens:
        with contextlib.suppress(psutil.NoSuchProcess):
            members += psutil.Process(popen.pid).children(recursive=True)
    deadline = time.monotonic() + timeout
    leaders_by = deadline if grace is None else min(deadline, time.monotonic() + grace)
    for popen in popens:
        _signal_group(popen.pid, signal.SIGTERM)
    for popen in popens:
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(max(0.0, leaders_by - time.monotonic()))
    late = [popen for popen in popens if popen.poll() is None]
    for popen in late:
        # The leader and what it started, but not multiprocessing's resource tracker: left
        # alone, it removes the semaphores it tracks once the others are gone, and exits.
        with contextlib.suppress(psutil.NoSuchProcess):
            for child in psutil.Process(popen.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    if "resource_tracker" not in " ".join(child.cmdline()):
                        child.kill()
        popen.kill()
    for popen in popens:
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(max(0.0, deadline - time.monotonic()))
    _, alive = psutil.wait_procs(members, timeout=max(0.0, deadline - time.monotonic()))
    for popen in popens:
        _signal_group(popen.pid, signal.SIGKILL)
    for process in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    for popen in popens:
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(5)
        _LIVE.discard(popen)
        watchdog = _WATCHDOGS.pop(popen.pid, None)
        if watchdog is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                watchdog.wait(5)  # it exits by itself once the group is empty


def wait_frontend_healthy(
    url: str, proc: subprocess.Popen[bytes], engines: HeadlessEngines, timeout: float
) -> None:
    """Wait until the frontend at ``url`` answers /health 200; raise if it or an engine dies."""
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        engines.check_running()
        if proc.poll() is not None:
            raise RuntimeError(f"vllm-frontend exited with {proc.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        time.sleep(0.5)
    raise TimeoutError(f"{url} not healthy after {timeout} s")


def stop_group(popen: subprocess.Popen[Any], timeout: float = 15.0) -> int:
    """Stop one process started with ``start_new_session``: SIGTERM to its group, SIGKILL to the
    group after ``timeout``; returns the leader's exit status."""
    if popen.poll() is None:
        _signal_group(popen.pid, signal.SIGTERM)
    try:
        return popen.wait(timeout)
    except subprocess.TimeoutExpired:
        _signal_group(popen.pid, signal.SIGKILL)
        return popen.wait(5)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


# atexit does not run when the test process is killed (SIGKILL, or SIGTERM from `timeout`), and
# orphaned engines would then hold gigabytes until someone notices. A tiny watchdog per process
# group, outside that group, kills the group as soon as its owner (the test process) is gone.
_WATCHDOG = """
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
owner, group = int(sys.argv[1]), int(sys.argv[2])
while True:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        sys.exit(0)
    if os.getppid() != owner:
        try:
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            pass
        sys.exit(0)
    time.sleep(0.5)
"""


def _start_watchdog(group: int) -> None:
    _WATCHDOGS[group] = subprocess.Popen(
        [sys.executable, "-c", _WATCHDOG, str(os.getpid()), str(group)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


@atexit.register
def _kill_leftovers() -> None:
    for popen in list(_LIVE):
        _signal_group(popen.pid, signal.SIGKILL)
        _LIVE.discard(popen)

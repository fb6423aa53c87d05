"""``serve --api-server-count N``: N frontend processes behind one HTTP socket and one handshake.

As vLLM's ``run_multi_api_server``, this process (the supervisor) serves no HTTP itself. It
binds and listens on the HTTP socket, binds one input and one output stream listener per
frontend (Unix sockets in a private directory when every engine is local, else TCP on the
data-parallel address), starts the managed engines if any, spawns N ``vllm-frontend frontend``
children that inherit the HTTP socket and their listener pair (``--client-index k
--client-count N``), and owns the engines' handshake: INIT lists all N input and output
addresses, so every engine connects to every frontend and sends its registrations to them;
here the handshake completes on READY alone. The kernel spreads accepted HTTP connections over
the children waiting on the shared socket.

Then it supervises: a frontend exiting, the managed engine launcher exiting, or SIGTERM/SIGINT
stops everything (frontends get SIGTERM, then SIGKILL after the grace period; managed engines
are stopped as in the single-process path). Exit status 0 after a requested shutdown, 1 when
something died or startup failed, 2 for bad configuration.

``/metrics`` shows the whole server whichever frontend accepts the scrape, as vLLM's does with
prometheus_client's multiprocess mode (``setup_multiprocess_prometheus`` in
``run_multi_api_server``, vllm/entrypoints/cli/serve.py). That mode would put an mmap write on
every metric update of the hot path; instead each child keeps its in-memory series and serves
them to the others on a Unix socket in a private directory made here (named to the children in
``METRICS_DIR_ENV``), and the child that takes a scrape merges
(``vllm_frontend.server.sibling_metrics``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

from vllm_frontend.cmd.config import ConfigError, FrontendConfig, config_from_args
from vllm_frontend.cmd.managed_engine import (
    ManagedEngines,
    ManagedEngineSpec,
    death_signal_setter,
)
from vllm_frontend.cmd.process import METRICS_DIR_ENV, fail, run_event_loop
from vllm_frontend.cmd.serve_args import ServeArgs
from vllm_frontend.engine.handshake import HandshakeError
from vllm_frontend.engine.protocol import EngineZmqAddresses
from vllm_frontend.engine.transport import StreamListeners, bind_stream_listeners, own_handshake
from vllm_frontend.private_dirs import make_private_dir
from vllm_frontend.server.transport import LISTEN_BACKLOG, bind_tcp, bind_unix

__all__ = ["run_api_servers"]

logger = logging.getLogger("vllm_frontend")

_POLL_S = 0.2


class _Frontends:
    """The N frontend child processes (same process group as this one, so a group kill of the
    supervisor reaches them too)."""

    def __init__(self, metrics_dir: str) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self._preexec = death_signal_setter()
        self._env = {**os.environ, METRICS_DIR_ENV: metrics_dir}

    def spawn(
        self,
        index: int,
        count: int,
        http_sock: socket.socket,
        listeners: StreamListeners,
        engine_count: int,
        args_json: str,
    ) -> None:
        fds = (
            http_sock.fileno(),
            listeners.inputs[index].fileno(),
            listeners.outputs[index].fileno(),
        )
        cmd = [
            sys.executable, "-m", "vllm_frontend", "frontend",
            "--listen-fd", str(fds[0]),
            "--input-listener-fd", str(fds[1]),
            "--output-listener-fd", str(fds[2]),
            "--engine-start-index", "0",
            "--engine-count", str(engine_count),
            "--data-parallel-size", str(engine_count),
            "--client-index", str(index),
            "--client-count", str(count),
            "--args-json", args_json,
        ]  # fmt: skip
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, pass_fds=fds, preexec_fn=self._preexec, env=self._env
        )
        self.procs.append(proc)
        logger.info("started frontend %d/%d (pid %d)", index, count, proc.pid)

    def first_exit(self) -> str | None:
        """A description of the first frontend found exited, or None while all run."""
        for index, proc in enumerate(self.procs):
            rc = proc.poll()
            if rc is not None:
                return f"frontend {index} (pid {proc.pid}) exited with status {rc}"
        return None

    def stop(self, grace_s: float) -> None:
        """SIGTERM every frontend, wait up to ``grace_s``, then SIGKILL the rest."""
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.0, deadline - time.monotonic()))
        for proc in self.procs:
            if proc.poll() is None:
                logger.warning(
                    "frontend pid %d did not stop in %.0f s; killing it", proc.pid, grace_s
                )
                proc.kill()
                proc.wait()


def _child_args_json(serve: ServeArgs) -> str:
    args = serve.frontend_args()
    args.pop("api_server_count", None)  # each child is one server
    return json.dumps(args, sort_keys=True)


def _http_socket(config: FrontendConfig) -> socket.socket:
    sock = bind_unix(config.uds) if config.uds else bind_tcp(config.host, config.port)
    # Listening before the children start: connections wait in the backlog, none is refused.
    sock.listen(LISTEN_BACKLOG)
    return sock


def run_api_servers(serve: ServeArgs, spec: ManagedEngineSpec) -> int:
    """Run ``serve`` with ``--api-server-count`` > 1; returns the exit status."""
    ns = serve.ns
    count: int = ns.api_server_count
    try:
        config = config_from_args(serve.frontend_args())
        args_json = _child_args_json(serve)
    except (ConfigError, TypeError, ValueError) as e:
        return fail(str(e), 2)
    external = ns.data_parallel_size_local == 0
    local = not external and ns.data_parallel_size_local in (None, ns.data_parallel_size)
    try:
        http_sock = _http_socket(config)
    except OSError as e:
        return fail(f"cannot bind the HTTP socket: {e}", 1)
    try:
        listeners = bind_stream_listeners(count, local=local, host=spec.handshake_host)
    except (OSError, ValueError) as e:
        http_sock.close()
        return fail(f"cannot bind the engine listeners: {e}", 1)
    engines = None if external else ManagedEngines(spec)
    metrics_dir = make_private_dir("vllm-fe-metrics-")
    frontends = _Frontends(metrics_dir)
    try:
        return run_event_loop(
            _supervise(serve, spec, config, http_sock, listeners, engines, frontends, args_json)
        )
    finally:
        grace = max(config.shutdown_timeout, 0.0) + 5.0
        frontends.stop(grace)
        if engines is not None:
            engines.stop(config.shutdown_timeout)
        listeners.cleanup()
        http_sock.close()
        shutil.rmtree(metrics_dir, ignore_errors=True)


async def _supervise(
    serve: ServeArgs,
    spec: ManagedEngineSpec,
    config: FrontendConfig,
    http_sock: socket.socket,
    listeners: StreamListeners,
    engines: ManagedEngines | None,
    frontends: _Frontends,
    args_json: str,
) -> int:
    ns = serve.ns
    count: int = ns.api_server_count
    engine_count: int = ns.data_parallel_size
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    async def something_died() -> str:
        while True:
            # A frontend that exits because the user's Ctrl-C reached it too is not a failure.
            if not stop.is_set():
                gone = frontends.first_exit()
                if gone is not None:
                    return gone
                rc = engines.returncode() if engines is not None else None
                if rc is not None:
                    return f"the managed engine launcher exited with status {rc}"
            await asyncio.sleep(_POLL_S)

    inputs, outputs = listeners.addresses()
    try:
        if engines is not None:
            engines.start()
        for k in range(count):
            frontends.spawn(k, count, http_sock, listeners, engine_count, args_json)
    except (OSError, RuntimeError) as e:
        logger.error("startup failed: %s", e)
        return 1
    # The children own the listeners now; ours would keep a dead child's connections alive.
    listeners.close_sockets()
    http_sock.close()
    if engines is None:
        logger.info(
            "waiting for %d external engine(s) at tcp://%s:%d",
            engine_count,
            spec.handshake_host,
            spec.handshake_port,
        )
    handshake = asyncio.ensure_future(
        own_handshake(
            f"tcp://{_bracket(spec.handshake_host)}:{spec.handshake_port}",
            range(engine_count),
            EngineZmqAddresses(inputs=inputs, outputs=outputs),
            timeout_s=config.engine_ready_timeout_secs,
            abort=something_died,
        )
    )
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({handshake, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if not handshake.done():
        handshake.cancel()
        with contextlib.suppress(BaseException):
            await handshake
        logger.info("startup cancelled by a signal")
        return 0
    try:
        handshake.result()
    except (HandshakeError, OSError, ValueError) as e:
        stopping.cancel()
        logger.error("startup failed: %s", e)
        return 1
    logger.info("engines ready; %d frontend processes serving", count)
    died = asyncio.ensure_future(something_died())
    await asyncio.wait({died, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if died.done():
        stopping.cancel()
        logger.error("shutting down: %s", died.result())
        return 1
    died.cancel()
    logger.info("shutting down (pid %d)", os.getpid())
    return 0


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host

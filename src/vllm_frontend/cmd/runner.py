"""Run the ``frontend`` and ``serve`` subcommands: connect the engines, serve HTTP, shut down.

Exit codes: 0 after a requested shutdown, 1 when the engines die or startup fails, 2 for bad
command-line input (the supervisor of ``vllm serve`` tears everything down on non-zero).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import logging
import os
import signal
import socket
import ssl
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING

import zmq

from vllm_frontend.cmd.assemble import (
    ModelResources,
    build_frontend_app,
    load_lora_modules,
    load_model_resources,
    vocab_bound,
)
from vllm_frontend.cmd.config import ConfigError, FrontendConfig, config_from_args
from vllm_frontend.cmd.heap import share_one_malloc_arena
from vllm_frontend.cmd.managed_engine import ManagedEngines, ManagedEngineSpec, default_python
from vllm_frontend.cmd.process import METRICS_DIR_ENV, fail, run_event_loop
from vllm_frontend.cmd.serve_args import HTTP_LIMIT_KEYS, ServeArgs
from vllm_frontend.engine.client import EngineCoreClient
from vllm_frontend.engine.transport import bind_handshake
from vllm_frontend.llm.admission import SharedRequestCounts
from vllm_frontend.server.app import make_server
from vllm_frontend.server.transport import (
    CertificateRefresher,
    bind_tcp,
    bind_unix,
    server_ssl_context,
    socket_from_fd,
)
from vllm_frontend.text.detokenizer import prefill
from vllm_frontend.text.tokenizer import release_freed_heap

if TYPE_CHECKING:
    from vllm_frontend.server.sibling_metrics import SiblingMetrics

logger = logging.getLogger("vllm_frontend")

_STARTED = time.monotonic()


class StartupError(Exception):
    """Startup cannot continue; the message says why (printed without a traceback)."""


def start_process() -> None:
    """What every serving entry point does first: one malloc arena (before any other thread
    starts), then vLLM-style logging."""
    share_one_malloc_arena()
    setup_logging()


def setup_logging() -> None:
    """vLLM-style log lines on stderr; level from ``VLLM_LOGGING_LEVEL`` (default INFO)."""
    level = os.environ.get("VLLM_LOGGING_LEVEL", "INFO").upper()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter(
            f"(vllm-frontend pid={os.getpid()}) %(levelname)s %(asctime)s "
            "[%(filename)s:%(lineno)d] %(message)s",
            datefmt="%m-%d %H:%M:%S",
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level if level in logging.getLevelNamesMapping() else "INFO")


def _load(config: FrontendConfig) -> ModelResources:
    try:
        return load_model_resources(config)
    except Exception as e:
        raise StartupError(f"cannot load model {config.model!r}: {e}") from e


# -- frontend (Mode B: launched by `vllm serve`) ---------------------------------------------


def run_frontend(args: argparse.Namespace) -> int:
    """``vllm-frontend frontend …``: serve behind engines launched by ``vllm serve``."""
    start_process()
    if not 0 <= args.client_index < args.client_count:
        return fail(f"--client-index must be in 0..{args.client_count - 1}", 2)
    try:
        raw = json.loads(args.args_json)
        if not isinstance(raw, dict):
            raise ConfigError("--args-json must be a JSON object")
        for key in HTTP_LIMIT_KEYS:
            if (value := getattr(args, key, None)) is not None:
                raw[key] = value
        config = config_from_args(raw)
        tls = tls_context(config)
        model = _load(config)
        http_sock = socket_from_fd(args.listen_fd)
    except (ConfigError, json.JSONDecodeError) as e:
        return fail(str(e), 2)
    except (StartupError, OSError) as e:
        return fail(str(e), 1)

    async def connect() -> EngineCoreClient:
        return await EngineCoreClient.adopt(
            input_listener_fd=args.input_listener_fd,
            output_listener_fd=args.output_listener_fd,
            engine_start_index=args.engine_start_index,
            engine_count=args.engine_count,
            coordinator_address=args.coordinator_address,
            ready_timeout_s=config.engine_ready_timeout_secs,
            vocab_size=vocab_bound(model),
            max_logprobs=config.max_logprobs,
            client_index=args.client_index,
            client_count=args.client_count,
            sampling_prechecked=True,  # text lowering checks them (text.sampling)
        )

    siblings = None
    counts = None
    metrics_dir = os.environ.get(METRICS_DIR_ENV)
    if args.client_count > 1:
        if metrics_dir:
            from vllm_frontend.server.sibling_metrics import SiblingMetrics  # only with siblings

            siblings = SiblingMetrics(metrics_dir, args.client_index, args.client_count)
            if config.max_num_queued_reqs is not None:  # counted over all siblings, as in vLLM
                counts = SharedRequestCounts(
                    os.path.join(metrics_dir, "admission-counts"),
                    args.client_index,
                    args.client_count,
                )
        else:
            logger.warning(
                "%s is not set: /metrics and --max-num-queued-reqs see this process only",
                METRICS_DIR_ENV,
            )
    # Under `vllm serve` a non-zero exit makes the supervisor tear everything down (§3.2.4).
    return run_event_loop(
        _serve(
            config,
            model,
            connect,
            [http_sock],
            exit_on_engine_death=True,
            siblings=siblings,
            sibling_counts=counts,
            tls=tls,
        )
    )


# -- serve (Mode A: we own the handshake) --------------------------------------------------


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def _http_socket(config: FrontendConfig) -> socket.socket:
    if config.uds:
        return bind_unix(config.uds)
    return bind_tcp(config.host, config.port)


def run_serve(serve: ServeArgs) -> int:
    """``vllm-frontend serve MODEL …``: managed engines, or external ones with ``-dpl 0``."""
    start_process()
    ns = serve.ns
    host = ns.data_parallel_address
    port = ns.data_parallel_rpc_port or _free_port(host)
    spec = ManagedEngineSpec(
        python=ns.python or default_python(),
        model=ns.model_tag,
        handshake_host=host,
        handshake_port=port,
        data_parallel_size=ns.data_parallel_size,
        data_parallel_size_local=ns.data_parallel_size_local,
        passthrough=serve.engine_args,
    )
    if ns.headless:
        engines = ManagedEngines(spec)
        engines.start()
        try:
            return run_event_loop(engines.wait())
        except KeyboardInterrupt:
            return 0
        finally:
            engines.stop()
    if ns.api_server_count > 1:
        from vllm_frontend.cmd.api_servers import run_api_servers

        return run_api_servers(serve, spec)
    external = ns.data_parallel_size_local == 0
    local = not external and ns.data_parallel_size_local in (None, ns.data_parallel_size)
    address = f"tcp://{host}:{port}"
    try:
        config = config_from_args(serve.frontend_args())
        tls = tls_context(config)
        http_sock = _http_socket(config)
    except ConfigError as e:
        return fail(str(e), 2)
    except (StartupError, OSError) as e:
        return fail(str(e), 1)
    try:
        # Bound before the model loads: engines that are already waiting connect meanwhile
        # (libzmq queues their HELLO), instead of retrying every 100 ms until we listen.
        handshake = bind_handshake(address, range(ns.data_parallel_size), local=local)
    except (ValueError, zmq.ZMQError) as e:
        http_sock.close()
        return fail(f"cannot listen for the engines' handshake at {address}: {e}", 1)
    try:
        model = _load(config)
    except StartupError as e:
        handshake.close()
        http_sock.close()
        return fail(str(e), 1)
    engines_proc = None if external else ManagedEngines(spec)

    async def watch() -> str:
        assert engines_proc is not None
        rc = await engines_proc.wait()
        return f"the managed engine launcher exited with status {rc}"

    async def connect() -> EngineCoreClient:
        if engines_proc is not None:
            engines_proc.start(engine_environment(config))
        else:
            logger.info("waiting for %d external engine(s) at %s", ns.data_parallel_size, address)
        return await EngineCoreClient.connect(
            handshake,
            ready_timeout_s=config.engine_ready_timeout_secs,
            vocab_size=vocab_bound(model),
            max_logprobs=config.max_logprobs,
            process_watcher=watch if engines_proc is not None else None,
            sampling_prechecked=True,  # text lowering checks them (text.sampling)
        )

    try:
        # Managed engines die with us; external ones keep us up and unhealthy until stopped.
        return run_event_loop(
            _serve(config, model, connect, [http_sock], exit_on_engine_death=not external, tls=tls)
        )
    finally:
        handshake.close()  # in case the engines' handshake never ran (a signal came first)
        if engines_proc is not None:
            engines_proc.stop(config.shutdown_timeout)


def engine_environment(config: FrontendConfig) -> dict[str, str]:
    """What the managed engines' environment gets besides ours: as vLLM's single API server
    exports ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` before it starts its engines (which then
    export their own spans), with ``--otlp-traces-endpoint``."""
    if config.otlp_traces_endpoint is None:
        return {}
    return {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": config.otlp_traces_endpoint}


# -- the serving loop shared by both -------------------------------------------------------


async def _serve(
    config: FrontendConfig,
    model: ModelResources,
    connect: Callable[[], Awaitable[EngineCoreClient]],
    sockets: list[socket.socket],
    exit_on_engine_death: bool,
    siblings: SiblingMetrics | None = None,
    sibling_counts: SharedRequestCounts | None = None,
    tls: ssl.SSLContext | None = None,
) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    connecting = asyncio.ensure_future(connect())
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({connecting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if not connecting.done():
        connecting.cancel()
        with contextlib.suppress(BaseException):
            await connecting
        logger.info("startup cancelled by a signal")
        return 0
    stopping.cancel()
    try:
        client = connecting.result()
    except Exception as e:
        logger.error("could not connect to the engines: %s", e)
        return 1
    try:
        adapters = await load_lora_modules(config, client)
        app = build_frontend_app(
            config, model, client, sibling_counts=sibling_counts, adapters=adapters
        )
        if siblings is None:
            http = make_server(app)
        else:
            await siblings.start(
                app, lambda: {str(i): t for i, t in client.scheduler_stats_times().items()}
            )
            http = make_server(app, siblings.wrap)
        for sock in sockets:
            await http.start(sock, tls)
    except Exception as e:
        logger.error("could not start the HTTP server: %s", e)
        if siblings is not None:
            await siblings.close()
        await client.close()
        return 1
    refresher = None
    if tls is not None and config.enable_ssl_refresh:
        refresher = CertificateRefresher(tls, config.tls)
        refresher.start()
    set_serving_gc()
    release_freed_heap()
    # fastokens' load holds the GIL for ~0.1 s at its start: not while /health is first polled.
    loop.call_later(_FAST_ENCODER_DELAY_S, model.tokenizer.start_fast_encoder)
    _run_in_slices(loop, prefill(model.tokenizer))
    logger.info(
        "serving %s on %s (%d engine(s), max_model_len %s); ready %.2f s after start",
        ", ".join(config.served_model_names),
        ", ".join(_describe(s, tls is not None) for s in sockets),
        client.engine_count,
        client.max_model_len,
        time.monotonic() - _STARTED,
    )
    code = 0
    reported = False
    while not stop.is_set():
        if client.is_dead and not reported:
            logger.error("engine failure: %s", client.dead_error)
            reported = True
            if exit_on_engine_death:
                code = 1
                break
            # External engines are not ours to restart: stay up answering /health 503 and
            # failing requests with a clear error, so whoever runs the engines can see it.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.5)
    logger.info("shutting down")
    if refresher is not None:
        await refresher.stop()
    # What --shutdown-timeout did not see finish ends as vLLM's API server ends it when it shuts
    # its engine client down: the dead-engine 500, or the SSE error event and [DONE].
    await http.shutdown(
        config.shutdown_timeout, lambda: client.end_in_flight("the API server is shutting down")
    )
    await app.aclose()
    if siblings is not None:
        await siblings.close()
    await client.close()
    return code


_FAST_ENCODER_DELAY_S = 0.5
"""Seconds from serving to starting the prompt encoder's (fastokens') load."""

_GC_YOUNG_THRESHOLD = 10_000
"""Container allocations (net of frees) between collections of the GC's youngest generation
once serving (Python's default: 700)."""


def set_serving_gc() -> None:
    """The cyclic GC as a serving process runs it once started: what was allocated so far frozen,
    the youngest generation collected every :data:`_GC_YOUNG_THRESHOLD` net allocations."""
    # Everything allocated so far lives as long as the process: keep the GC from rescanning it.
    gc.collect()
    gc.freeze()
    # A served request leaves no reference cycles (tests/server/test_no_reference_cycles.py):
    # what it made dies by reference counting. The youngest generation's default threshold
    # (700 net container allocations) only tracks the transient peak of the requests in flight
    # and ran every few requests, finding nothing. (At 10000 with the cycles that were left, a
    # closed connection's last request body among them, image requests' bodies piled up.)
    gc.set_threshold(_GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


def _run_in_slices(loop: asyncio.AbstractEventLoop, steps: Iterator[None]) -> None:
    """Run ``steps`` one ``next()`` per event loop iteration, between whatever else is due
    (the detokenizer tables fill within ~0.3 s of /health turning ready, a few ms at a time)."""

    def step() -> None:
        try:
            next(steps)
        except StopIteration:
            return
        except Exception:  # a warm-up is an optimisation: never worth a crash
            logger.exception("background warm-up failed")
            return
        loop.call_soon(step)

    loop.call_soon(step)


def _describe(sock: socket.socket, tls: bool) -> str:
    addr = sock.getsockname()
    if sock.family == socket.AF_UNIX:
        return f"unix:{addr}" + (" (TLS)" if tls else "")
    host, port = addr[0], addr[1]
    scheme = "https" if tls else "http"
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


def tls_context(config: FrontendConfig) -> ssl.SSLContext | None:
    """The HTTP server's TLS context from ``--ssl-*`` (None without TLS); StartupError names
    the file that cannot be loaded."""
    settings = config.tls
    if not settings.enabled:
        return None
    try:
        return server_ssl_context(settings)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    except (OSError, ssl.SSLError) as e:
        raise StartupError(f"cannot load the TLS files: {e}") from None

"""``vllm-frontend render MODEL``: an engine-free render server, as ``vllm launch render``.

It loads the model's tokenizer, configuration and chat template and serves the render routes
(with ``/health``, ``/ping``, ``/version``, ``/v1/models``, ``/tokenize``, ``/detokenize``,
``/metrics``); it starts no engine and waits for none. It takes ``serve``'s options: the
frontend's are read, the engines' have nothing to configure (logged and left unused).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import socket
import ssl
import time

from vllm_frontend.cmd.assemble import build_render_app, load_model_resources
from vllm_frontend.cmd.config import ConfigError, FrontendConfig, config_from_args
from vllm_frontend.cmd.process import fail, run_event_loop
from vllm_frontend.cmd.runner import start_process, tls_context
from vllm_frontend.cmd.serve_args import ServeArgs
from vllm_frontend.server.app import App, make_server
from vllm_frontend.server.transport import bind_tcp, bind_unix

__all__ = ["run_render"]

logger = logging.getLogger("vllm_frontend")

_STARTED = time.monotonic()


def run_render(serve: ServeArgs) -> int:
    """Serve the render routes for ``serve``'s model until SIGINT / SIGTERM."""
    start_process()
    if serve.ns.api_server_count != 1:
        return fail("render runs one API-server process (--api-server-count 1)", 2)
    if serve.engine_args:
        logger.debug("render has no engines: options for them unused: %s", serve.engine_args)
    try:
        config = config_from_args(serve.frontend_args())
        tls = tls_context(config)
        sock = bind_unix(config.uds) if config.uds else bind_tcp(config.host, config.port)
    except ConfigError as e:
        return fail(str(e), 2)
    except OSError as e:
        return fail(str(e), 1)
    try:
        model = load_model_resources(config)
        app = build_render_app(config, model)
    except ConfigError as e:
        sock.close()
        return fail(str(e), 2)
    except Exception as e:
        sock.close()
        return fail(f"cannot load model {config.model!r}: {e}", 1)
    return run_event_loop(_serve(config, app, model.tokenizer, sock, tls))


async def _serve(
    config: FrontendConfig,
    app: App,
    tokenizer: object,
    sock: socket.socket,
    tls: ssl.SSLContext | None,
) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    http = make_server(app)
    await http.start(sock, tls)
    gc.collect()
    gc.freeze()
    start_fast_encoder = getattr(tokenizer, "start_fast_encoder", None)
    if start_fast_encoder is not None:
        loop.call_later(0.5, start_fast_encoder)
    logger.info(
        "render server for %s on %s; ready %.2f s after start",
        ", ".join(config.served_model_names),
        sock.getsockname(),
        time.monotonic() - _STARTED,
    )
    await stop.wait()
    logger.info("shutting down")
    with contextlib.suppress(Exception):
        await http.shutdown(config.shutdown_timeout)
    return 0

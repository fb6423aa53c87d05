"""Our frontend served in-process (on a background event loop) in front of headless engines.

It runs the CLI's own assembly (``vllm_frontend.cmd.assemble``) over an engine client in
handshake-owner mode (Mode A), with the HTTP server on a free port, so the tests can also watch
the engine client.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import socket
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from vllm_frontend.cmd.assemble import (
    build_frontend_app,
    load_lora_modules,
    load_model_resources,
    vocab_bound,
)
from vllm_frontend.cmd.config import config_from_args
from vllm_frontend.engine.client import EngineCoreClient
from vllm_frontend.server.app import make_server
from vllm_frontend.server.transport import HttpServer


@dataclass
class OurServer:
    """Our frontend on 127.0.0.1:``port``."""

    port: int
    loop: asyncio.AbstractEventLoop
    thread: threading.Thread
    client: EngineCoreClient
    http: HttpServer

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        """Shut the HTTP server and the engine client down and stop the loop."""

        async def close() -> None:
            await self.http.shutdown()
            await self.client.close()

        asyncio.run_coroutine_threadsafe(close(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@contextlib.contextmanager
def _environment(env: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


async def _build(
    model_dir: pathlib.Path,
    handshake_address: str,
    port: int,
    args: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
) -> tuple[Any, Any]:
    # The same assembly the CLI runs (vllm_frontend.cmd), with vLLM's default options.
    config = config_from_args({"model_tag": str(model_dir), **(args or {})})
    model = load_model_resources(config)
    client = await EngineCoreClient.connect(
        handshake_address,
        vocab_size=vocab_bound(model),
        max_logprobs=config.max_logprobs,
        sampling_prechecked=True,  # as the CLI connects (text lowering checks them)
    )
    adapters = await load_lora_modules(config, client)
    with _environment(env or {}):  # what the app reads from the environment as it is built
        http = make_server(build_frontend_app(config, model, client, adapters=adapters))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    await http.start(sock)
    model.tokenizer.start_fast_encoder()  # as the CLI does once it serves
    return client, http


def start_our_server(
    model_dir: pathlib.Path,
    handshake_address: str,
    port: int,
    timeout: float = 600.0,
    args: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    loop_factory: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop,
) -> OurServer:
    """Run our frontend on a background loop; returns once the engines are connected.
    ``args``: options over vLLM's defaults (``config_from_args`` keys); ``loop_factory``: the
    loop to run it on (the CLI's is uvloop's)."""
    loop = loop_factory()
    thread = threading.Thread(target=loop.run_forever, name="our-frontend", daemon=True)
    thread.start()
    fut: Future[tuple[Any, Any]] = asyncio.run_coroutine_threadsafe(
        _build(model_dir, handshake_address, port, args, env), loop
    )
    try:
        client, http = fut.result(timeout)
    except BaseException:
        loop.call_soon_threadsafe(loop.stop)
        raise
    return OurServer(port, loop, thread, client, http)

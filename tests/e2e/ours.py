"""Our frontend served in-process (on a background event loop) in front of headless engines.

Until the CLI builds the whole app, this wires the pieces the way the server will: engine client
(handshake owner, Mode A), tokenizer, chat renderer, request metrics, serving context, the
completion and chat routes on the server's route table, and the HTTP server on a free port.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import socket
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry

from vllm_frontend.chat import ChatRenderer, ModelChatTemplates, special_tokens_map
from vllm_frontend.engine.client import EngineCoreClient
from vllm_frontend.engine.protocol import EngineCoreRequest
from vllm_frontend.llm import LLM, EngineGauges, FrontendMetrics
from vllm_frontend.server.app import ServerSettings
from vllm_frontend.server.chat import ChatHandler
from vllm_frontend.server.completions import CompletionsHandler
from vllm_frontend.server.generation import ServingContext
from vllm_frontend.server.http import HttpServer
from vllm_frontend.server.protocol import parse_chat_request, parse_completion_request
from vllm_frontend.server.routes import Services, build_app
from vllm_frontend.text.model_files import load_model_files
from vllm_frontend.text.sampling import ModelSamplingInfo
from vllm_frontend.text.tokenizer import Tokenizer


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


async def _build(model_dir: pathlib.Path, handshake_address: str, port: int) -> tuple[Any, Any]:
    cfg = json.loads((model_dir / "tokenizer_config.json").read_text())
    tokenizer = Tokenizer.from_dir(model_dir)
    client = await EngineCoreClient.connect(
        handshake_address, vocab_size=tokenizer.vocab_size, max_logprobs=20
    )
    max_model_len = client.max_model_len
    assert max_model_len is not None
    served = [str(model_dir)]
    files = load_model_files(str(model_dir))
    sampling = ModelSamplingInfo(
        max_model_len=max_model_len,
        eos_token_id=tokenizer.eos_token_id,
        generation_eos_token_ids=files.generation_eos_token_ids,
        sampling_defaults=dict(files.sampling_defaults),
        limits=client.limits,
    )
    renderer = ChatRenderer(
        ModelChatTemplates.from_model_dir(model_dir, cfg), special_tokens_map(cfg)
    )
    registry = CollectorRegistry()
    metrics = FrontendMetrics(served[0], max_model_len, client.engine_indices, registry)
    registry.register(EngineGauges(served[0], client.engine_indices, client.scheduler_stats))
    llm = LLM(client, EngineCoreRequest, metrics)
    ctx = ServingContext(
        llm=llm,
        tokenizer=tokenizer,
        served_model_names=served,
        max_model_len=max_model_len,
        sampling=sampling,
        chat_renderer=renderer,
    )
    completions = CompletionsHandler(ctx, parse_completion_request)
    chat = ChatHandler(ctx, parse_chat_request)
    services = Services(
        engine=client,
        tokenizer=tokenizer,
        model_root=str(model_dir),
        metrics_registry=registry,
    )
    app = build_app(
        ServerSettings(served_model_names=served, max_model_len=max_model_len),
        services,
        {("POST", "/v1/completions"): completions, ("POST", "/v1/chat/completions"): chat},
    )
    http = HttpServer(app)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    await http.start(sock)
    return client, http


def start_our_server(
    model_dir: pathlib.Path, handshake_address: str, port: int, timeout: float = 600.0
) -> OurServer:
    """Run our frontend on a background loop; returns once the engines are connected."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="our-frontend", daemon=True)
    thread.start()
    fut: Future[tuple[Any, Any]] = asyncio.run_coroutine_threadsafe(
        _build(model_dir, handshake_address, port), loop
    )
    try:
        client, http = fut.result(timeout)
    except BaseException:
        loop.call_soon_threadsafe(loop.stop)
        raise
    return OurServer(port, loop, thread, client, http)

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
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry

from vllm_frontend.chat import ChatRenderer, ModelChatTemplates, special_tokens_map
from vllm_frontend.engine.client import EngineCoreClient
from vllm_frontend.engine.protocol import EngineCoreRequest
from vllm_frontend.llm import LLM, FrontendMetrics
from vllm_frontend.server.app import ServerSettings
from vllm_frontend.server.chat import ChatHandler
from vllm_frontend.server.completions import CompletionsHandler
from vllm_frontend.server.generation import (
    SamplingDefaults,
    ServingContext,
    lower_sampling_params,
)
from vllm_frontend.server.http import HttpServer
from vllm_frontend.server.protocol import parse_chat_request, parse_completion_request
from vllm_frontend.server.routes import Services, build_app
from vllm_frontend.text.tokenizer import Tokenizer

_SAMPLING_KEYS = (
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "temperature",
    "top_k",
    "top_p",
    "min_p",
)


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
    gen_path = model_dir / "generation_config.json"
    gen = json.loads(gen_path.read_text()) if gen_path.is_file() else {}
    tokenizer = Tokenizer.from_dir(model_dir)
    client = await EngineCoreClient.connect(
        handshake_address, vocab_size=tokenizer.vocab_size, max_logprobs=20
    )
    max_model_len = client.max_model_len
    assert max_model_len is not None
    served = [str(model_dir)]
    eos_ids = gen.get("eos_token_id")
    model = SamplingDefaults(
        defaults={k: gen[k] for k in _SAMPLING_KEYS if gen.get(k) is not None},
        eos_token_id=tokenizer.eos_token_id,
        generation_eos_ids=[eos_ids] if isinstance(eos_ids, int) else list(eos_ids or []),
        tokenizer=tokenizer,
    )

    def lower(chat: bool) -> Callable[..., Any]:
        def call(req: Any, *, max_tokens: int, prompt_len: int) -> Any:
            return lower_sampling_params(
                req, max_tokens=max_tokens, prompt_len=prompt_len, chat=chat, model=model
            )

        return call

    renderer = ChatRenderer(
        ModelChatTemplates.from_model_dir(model_dir, cfg), special_tokens_map(cfg)
    )
    registry = CollectorRegistry()
    metrics = FrontendMetrics(served[0], max_model_len, client.engine_indices, registry)
    llm = LLM(client, EngineCoreRequest, metrics)
    common = dict(
        llm=llm,
        tokenizer=tokenizer,
        served_model_names=served,
        max_model_len=max_model_len,
        default_max_tokens=gen.get("max_new_tokens"),
        chat_renderer=renderer,
    )
    completions = CompletionsHandler(
        ServingContext(lower_sampling=lower(False), **common),
        parse_completion_request,
    )
    chat = ChatHandler(
        ServingContext(lower_sampling=lower(True), **common),
        parse_chat_request,
    )
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

"""What the tests that no request leaves cyclic garbage share: ours served in this process (on
uvloop, as the CLI serves) in front of a mock engine, a request posted on a connection of its
own, and what the cyclic GC finds after a few of them."""

from __future__ import annotations

import gc
import json
import pathlib
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pytest
import uvloop

from tests.e2e.ours import OurServer, start_our_server
from tests.server.support import raw_exchange
from tests.support.engines import free_port


@contextmanager
def ours_on_mock_engine(
    model: pathlib.Path,
    *,
    max_model_len: int,
    args: dict[str, Any],
    env: Mapping[str, str] | None = None,
) -> Iterator[OurServer]:
    """Ours in this process, with CLI ``args`` and ``env`` set while it starts, in front of a
    fresh mock engine (1 ms steps); both stopped on exit."""
    rpc = free_port()
    engine = subprocess.Popen(
        [sys.executable, "-m", "vllm_frontend", "mock-engine",
         "--handshake-address", f"tcp://127.0.0.1:{rpc}", "--max-model-len", str(max_model_len)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        with pytest.MonkeyPatch.context() as patch:
            # fastokens' load, on a thread, frees a ctypes handle (cyclic) whenever it ends.
            patch.setenv("VLLM_USE_FASTOKENS", "0")
            for name, value in (env or {}).items():
                patch.setenv(name, value)
            ours = start_our_server(
                model,
                f"tcp://127.0.0.1:{rpc}",
                free_port(),
                timeout=120,
                args=args,
                loop_factory=uvloop.new_event_loop,
            )
        try:
            yield ours
        finally:
            ours.stop()
    finally:
        engine.terminate()
        engine.wait(30)


def post(server: OurServer, path: str, body: dict[str, Any]) -> bytes:
    """The whole raw answer to ``POST path`` with ``body``, on a connection closed after it."""
    data = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
    )
    return raw_exchange(server.port, head.encode() + data)


def type_name(garbage: object) -> str | None:
    """``module.QualifiedName`` of an object's type."""
    return f"{type(garbage).__module__}.{type(garbage).__qualname__}"


def cyclic_garbage(
    send: Callable[[], object], describe: Callable[[object], str | None] = type_name
) -> list[str]:
    """What the cyclic GC finds after ``send()`` three times (described, those described as None
    left out), sorted."""
    # A tokenizer another module of this worker made may still be loading fastokens on its
    # thread: that load frees a ctypes handle (cyclic) when it ends, which must not land here.
    for thread in threading.enumerate():
        if thread.name == "fastokens-load":
            thread.join(60)
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(3):
            send()
        # The server's loop closes the connection after the client has read to the end.
        time.sleep(0.2)
        gc.collect()
        return sorted(filter(None, map(describe, gc.garbage)))
    finally:
        gc.set_debug(0)
        gc.garbage.clear()

"""Engine stacks shared by test modules of different packages, and their lifetime.

A stack (our ``vllm-frontend serve`` and vLLM's ``vllm serve``, each in front of a fresh CPU
engine with the same arguments) takes one to two minutes to start on two cores, several times
that on a loaded CI machine. Modules whose tests need the same configuration share one: the
modules that use a shared fixture are collected next to each other (:func:`group_users`), and the
stack stops right after the last test that uses it (:func:`stop_after`), not at the session's end,
so it never runs beside the stacks of later packages.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import pytest

if TYPE_CHECKING:
    import anthropic
    import openai

from tests.support.engines import (
    engine_env,
    free_port,
    log_dir,
    start_headless_engines,
    start_vllm_server,
    stop_all,
    wait_frontend_healthy,
)
from tests.support.sdk_clients import anthropic_clients, openai_clients

T = TypeVar("T")

# The session fixtures whose users are grouped and which stop after their last user.
SHARED_FIXTURES = (
    "tool_servers",
    "mock_clients_stack",
    "mock_vllm_stacks",
    "recorded_idefics3_qwen2_audio",
    "recorded_qwen_vl",
)

TOOL_FLAGS = ("--enable-auto-tool-choice", "--tool-call-parser", "llama3_json")
# Without whitespace in the grammar the gibberish model cannot pad its JSON until max_tokens
# (the engines compile the grammars; the frontends get the same option).
SO_CONFIG = (
    "--structured-outputs-config",
    '{"backend": "xgrammar", "disable_any_whitespace": true}',
)
TOOL_ENGINE_ARGS = ("--max-model-len", "1024", "--gpu-memory-utilization", "0.1", *SO_CONFIG)
# Both frontends: the Responses store (previous_response_id, background mode), and forced tool
# calls constrained with the tools' JSON schema rather than llama3_json's structural tag (which
# the engine would compile the same way; tests/chat/test_tool_structural_tags.py compares the
# tags themselves).
TOOL_ENV = {"VLLM_ENABLE_RESPONSES_API_STORE": "1", "VLLM_ENFORCE_STRICT_TOOL_CALLING": "0"}
# A busy 2-core machine can take more than the default 600 s to start an engine.
READY_TIMEOUT = 1500


@dataclass(frozen=True)
class ToolServers:
    """Base URLs of our server and vLLM's, both with the ``llama3_json`` tool parser."""

    ours: str
    vllm: str

    def items(self) -> list[tuple[str, str]]:
        """``[("ours", url), ("vllm", url)]``."""
        return [("ours", self.ours), ("vllm", self.vllm)]

    def served_model(self) -> str:
        """The served model's name (vLLM's ``/v1/models``; both serve the same)."""
        import httpx

        return str(httpx.get(self.vllm + "/v1/models").json()["data"][0]["id"])

    def openai_clients(
        self, timeout: float = 300
    ) -> AbstractContextManager[dict[str, openai.OpenAI]]:
        """``openai`` SDK clients of both servers, by name, closed on exit."""
        return openai_clients(self.items(), timeout)

    def anthropic_clients(
        self, timeout: float = 300
    ) -> AbstractContextManager[dict[str, anthropic.Anthropic]]:
        """``anthropic`` SDK clients of both servers, by name, closed on exit."""
        return anthropic_clients(self.items(), timeout)


def tool_servers(model: pathlib.Path) -> Iterator[ToolServers]:
    """Start both servers (engines concurrently), yield their URLs, stop everything after."""
    handshake = free_port()
    engines = start_headless_engines(
        handshake, 1, model=model, extra_args=TOOL_ENGINE_ARGS, nice=10
    )
    reference = start_vllm_server(
        model=model,
        extra_args=(*TOOL_ENGINE_ARGS, *TOOL_FLAGS),
        env=engine_env(TOOL_ENV),
    )
    port = free_port()
    exe = pathlib.Path(sys.executable).with_name("vllm-frontend")
    argv = [str(exe), "serve", str(model), "--host", "127.0.0.1", "--port", str(port),
            "--data-parallel-size-local", "0", "--data-parallel-address", "127.0.0.1",
            "--data-parallel-rpc-port", str(handshake), *TOOL_FLAGS, *SO_CONFIG]  # fmt: skip
    log = (log_dir() / f"ours-tools-{port}.log").open("wb")
    env = {**os.environ, **TOOL_ENV, "VLLM_ENGINE_READY_TIMEOUT_S": str(READY_TIMEOUT)}
    ours = subprocess.Popen(
        argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env
    )
    try:
        wait_frontend_healthy(f"http://127.0.0.1:{port}", ours, engines, READY_TIMEOUT)
        reference.wait_ready(READY_TIMEOUT)
        yield ToolServers(f"http://127.0.0.1:{port}", reference.base_url)
    finally:
        stop_all([ours, reference, engines])
        log.close()


def _module_of(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def group_users(items: list[pytest.Item]) -> dict[str, str]:
    """Move the modules that use each shared fixture next to the first of them (whole modules,
    in their order); return each used fixture's last user's node id."""
    last: dict[str, str] = {}
    for name in SHARED_FIXTURES:
        modules = {_module_of(i) for i in items if name in getattr(i, "fixturenames", ())}
        if not modules:
            continue
        first = next(n for n, i in enumerate(items) if _module_of(i) in modules)
        moved = [i for i in items if _module_of(i) in modules]
        rest = [i for i in items if _module_of(i) not in modules]
        items[:] = [*rest[:first], *moved, *rest[first:]]
        last[name] = next(
            i.nodeid for i in reversed(items) if name in getattr(i, "fixturenames", ())
        )
    return last


class EarlyStops:
    """Stops registered by shared fixtures, run after their last user's teardown."""

    def __init__(self) -> None:
        self.last_user: dict[str, str] = {}
        self._stops: dict[str, Callable[[], None]] = {}

    def register(self, name: str, stop: Callable[[], None]) -> None:
        """Run ``stop`` once the last test using fixture ``name`` has been torn down."""
        self._stops[name] = stop

    def after_teardown(self, item: pytest.Item) -> None:
        """Run the stops whose last user is ``item``."""
        for name, nodeid in self.last_user.items():
            if nodeid == item.nodeid and name in self._stops:
                self._stops.pop(name)()


def stop_after(early: EarlyStops, name: str, stack: Iterator[T]) -> T:
    """Start ``stack`` (a generator) and have ``early`` close it after fixture ``name``'s last
    user; the session's end closes it too if that never came."""
    value = next(stack)
    early.register(name, stack.close)
    return value

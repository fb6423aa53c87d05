"""Fixtures shared by the render / derender oracle modules: vLLM's ``vllm launch render`` app
and ours over the tiny Llama 3, built once per session (vLLM's takes seconds to build)."""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from vllm_frontend.cmd.assemble import build_render_app, load_model_resources
from vllm_frontend.cmd.config import config_from_args

from .support import RunningServer

RENDER_MODEL_NAME = "tiny-llama"


@pytest.fixture(scope="session")
def vllm_render_client(tiny_model: pathlib.Path) -> Iterator[Any]:
    """vLLM's own render app, built as ``vllm launch render`` builds it (``build_app(args,
    ("render",))`` + ``init_render_app_state``), behind Starlette's test client."""
    yield from vllm_render_app(tiny_model)


def vllm_render_app(tiny_model: pathlib.Path, *extra: str) -> Iterator[Any]:
    """vLLM's render app for the tiny model with ``extra`` command-line options."""
    from starlette.testclient import TestClient
    from vllm import AsyncEngineArgs
    from vllm.config import VllmConfig
    from vllm.entrypoints.launchers.app import build_app
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.entrypoints.launchers.render.app_state import init_render_app_state
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser())
    args = parser.parse_args(
        ["--model", str(tiny_model), "--served-model-name", RENDER_MODEL_NAME, *extra]
    )
    engine_args = AsyncEngineArgs.from_cli_args(args)
    vllm_config = VllmConfig(
        model_config=engine_args.create_model_config(),
        structured_outputs_config=engine_args.create_structured_outputs_config(),
    )
    app = build_app(args, ("render",))
    asyncio.run(init_render_app_state(vllm_config, app.state, args))
    with TestClient(app) as client:
        yield client


@pytest.fixture(scope="session")
def ours_render_client(tiny_model: pathlib.Path) -> Iterator[httpx.Client]:
    """Our ``build_render_app`` for the same model behind the real HTTP server."""
    yield from ours_render_app(tiny_model)


def ours_render_app(tiny_model: pathlib.Path, **options: Any) -> Iterator[httpx.Client]:
    """Our render app for the tiny model with ``options`` (``config_from_args`` keys)."""
    config = config_from_args(
        {"model_tag": str(tiny_model), "served_model_name": [RENDER_MODEL_NAME], **options}
    )
    app = build_render_app(config, load_model_resources(config))
    server = RunningServer(app)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            yield client
    finally:
        server.stop()

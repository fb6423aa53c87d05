"""The test bed's engines work: headless vLLM engines serve a real frontend and stop with it."""

from __future__ import annotations

import pathlib

import psutil
import pytest

from tests.support.engines import (
    external_engine_args,
    free_port,
    headless_engines,
    vllm_server,
)
from tests.support.reference import declare_reference

pytestmark = pytest.mark.engine

HELLO_WORLD = [128000, 9906, 1917]  # <|begin_of_text|>Hello world
HELLO_REFERENCE = declare_reference([HELLO_WORLD], {"temperature": 0, "max_tokens": 12})


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_headless_engine_behind_vllms_frontend_generates_like_the_offline_reference(
    tiny_model: pathlib.Path,
) -> None:
    openai = pytest.importorskip("openai")
    [expected] = HELLO_REFERENCE.results()
    handshake_port = free_port()
    with (
        headless_engines(handshake_port, count=1) as engines,
        vllm_server(extra_args=external_engine_args(handshake_port, 1)) as server,
    ):
        client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused")
        completion = client.completions.create(
            model=str(tiny_model),
            prompt=HELLO_WORLD,
            max_tokens=12,
            temperature=0,
            extra_body={"return_token_ids": True},
        )
        choice = completion.choices[0]
        assert choice.model_extra["token_ids"] == expected.token_ids
        assert choice.text == expected.outputs[0].text
        engine_pid = engines.engine_pids()[0]
        launcher_pid = engines.launchers[0][1].pid
    assert _gone(engine_pid)
    assert _gone(launcher_pid)

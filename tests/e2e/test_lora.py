"""LoRA end to end on the real CPU engine: the tiny adapter (tests/support/tiny_lora.py), loaded
at startup by both frontends (``--lora-modules``, tests/e2e/conftest.py), changes the greedy
output, and our frontend gives the same tokens and text as vLLM's for the same requests through
completions, chat, Messages and Responses; ``/v1/models`` lists the adapters alike; loading and
unloading at run time (``VLLM_ALLOW_RUNTIME_LORA_UPDATING``) answers alike, the engines' own
refusals included (no adapter at the path, a rank over ``--max-lora-rank``).
"""

from __future__ import annotations

import json
import pathlib
import shutil
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.conftest import LORA_NAME, Frontends
from tests.e2e.test_differential import IGNORED, chat, compare, completion
from tests.support.tiny_lora import RANK, build_tiny_lora, tiny_lora_dir

pytestmark = pytest.mark.engine


def _post(frontends: Frontends, path: str, body: dict[str, Any]) -> tuple[Any, Any]:
    """``body`` to our server, then vLLM's: each (status, JSON or text body)."""
    out = []
    for url in (frontends.ours, frontends.vllm):
        response = httpx.post(url + path, json=body, timeout=120)
        try:
            content: Any = response.json()
        except ValueError:
            content = response.text
        out.append((response.status_code, content))
    return out[0], out[1]


def _masked(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: "*" if k in IGNORED or k in ("created_at", "signature") else _masked(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_masked(v) for v in value]
    return value


def test_the_adapter_changes_greedy_output_and_both_frontends_agree(
    sdk: dict[str, openai.OpenAI], frontends: Frontends
) -> None:
    kw: dict[str, Any] = {"prompt": "The capital of France is", "max_tokens": 24,
                          "temperature": 0.0, "return_token_ids": True}  # fmt: skip
    adapted = compare(sdk, completion(LORA_NAME, **kw))
    base = compare(sdk, completion(frontends.model, **kw))
    assert adapted["model"] == LORA_NAME and base["model"] == frontends.model
    assert adapted["choices"][0]["token_ids"] != base["choices"][0]["token_ids"]
    assert adapted["choices"][0]["text"] != base["choices"][0]["text"]


@pytest.mark.parametrize("stream", [False, True])
def test_chat_with_the_adapter_matches(
    sdk: dict[str, openai.OpenAI], frontends: Frontends, stream: bool
) -> None:
    kw: dict[str, Any] = {"max_tokens": 16, "temperature": 0.0, "logprobs": True,
                          "top_logprobs": 2}  # fmt: skip
    if stream:
        kw.update(stream=True, stream_options={"include_usage": True})
    compare(sdk, chat(LORA_NAME, **kw))


def test_messages_and_responses_with_the_adapter_match(frontends: Frontends) -> None:
    messages = {"model": LORA_NAME, "max_tokens": 12, "temperature": 0.0,
                "messages": [{"role": "user", "content": "Hi there"}]}  # fmt: skip
    ours, theirs = _post(frontends, "/v1/messages", messages)
    assert theirs[0] == 200 and theirs[1]["model"] == LORA_NAME
    assert (ours[0], _masked(ours[1])) == (theirs[0], _masked(theirs[1]))
    responses = {"model": LORA_NAME, "input": "Hi there", "max_output_tokens": 12,
                 "temperature": 0.0}  # fmt: skip
    ours, theirs = _post(frontends, "/v1/responses", responses)
    assert theirs[0] == 200 and theirs[1]["model"] == LORA_NAME
    assert ours[0] == 200 and ours[1]["model"] == LORA_NAME
    assert _masked(ours[1]["output"]) == _masked(theirs[1]["output"])
    for key in ("input_tokens", "output_tokens"):
        assert ours[1]["usage"][key] == theirs[1]["usage"][key]


def _models(frontends: Frontends) -> tuple[Any, Any]:
    def get(url: str) -> Any:
        body = httpx.get(url + "/v1/models", timeout=30).json()
        for card in body["data"]:
            card["created"] = "*"
            for permission in card["permission"]:
                permission["id"] = permission["created"] = "*"
        return body

    return get(frontends.ours), get(frontends.vllm)


def test_models_list_the_adapter_with_its_parent(frontends: Frontends) -> None:
    ours, theirs = _models(frontends)
    cards = {card["id"]: card for card in theirs["data"]}
    assert cards[LORA_NAME]["parent"] == frontends.model
    assert cards[LORA_NAME]["root"] == str(tiny_lora_dir())
    assert ours == theirs


def test_adapters_load_and_unload_at_run_time_as_in_vllm(
    sdk: dict[str, openai.OpenAI], frontends: Frontends, tmp_path: pathlib.Path
) -> None:
    path = str(tiny_lora_dir())
    too_big = tmp_path / "rank-too-big"
    build_tiny_lora(too_big, RANK * 2)
    no_config = tmp_path / "no-config"
    shutil.copytree(path, no_config)
    (no_config / "adapter_config.json").unlink()

    def same(route: str, body: dict[str, Any], status: int) -> None:
        ours, theirs = _post(frontends, route, body)
        assert theirs[0] == status, theirs
        assert ours == theirs

    load, unload = "/v1/load_lora_adapter", "/v1/unload_lora_adapter"
    same(load, {"lora_name": "dyn", "lora_path": path}, 200)
    same(load, {"lora_name": "dyn", "lora_path": path}, 400)  # loaded already
    same(load, {"lora_name": frontends.model, "lora_path": path}, 400)  # the base model's name
    same(load, {"lora_name": "nowhere", "lora_path": str(tmp_path / "nowhere")}, 404)
    same(load, {"lora_name": "no-config", "lora_path": str(no_config)}, 404)
    same(load, {"lora_name": "too-big", "lora_path": str(too_big)}, 500)
    same(load, {"lora_name": "dyn", "lora_path": path, "load_inplace": True}, 200)
    ours, theirs = _models(frontends)
    assert ours == theirs and [c["id"] for c in theirs["data"]][-1] == "dyn"
    kw: dict[str, Any] = {"prompt": "Hello world", "max_tokens": 12, "temperature": 0.0}
    static = compare(sdk, completion(LORA_NAME, **kw))
    dynamic = compare(sdk, completion("dyn", **kw))
    assert dynamic["choices"][0]["text"] == static["choices"][0]["text"]  # the same weights
    same(unload, {"lora_name": "dyn"}, 200)
    same(unload, {"lora_name": "dyn"}, 404)
    same("/v1/completions", {"model": "dyn", **kw}, 404)
    ours, theirs = _models(frontends)
    assert ours == theirs and "dyn" not in json.dumps(theirs)

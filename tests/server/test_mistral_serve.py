"""``vllm-frontend serve`` on a Mistral-format directory (consolidated weights beside a
``tekken.json``, so ``--tokenizer-mode auto`` picks mistral as vLLM 0.32 does), in front of the
mock engine: ``/tokenize`` and ``/detokenize`` answer with vLLM's ``MistralTokenizer`` ids and
text, chat prompts are mistral_common's, and completions, chat completions and ``/v1/models``
are served; a request chat template answers vLLM's 400."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.mock_serve import MockServe, mock_serve
from tests.support.tiny_mistral import tiny_mistral_dir

pytestmark = pytest.mark.oracle

pytest.importorskip("mistral_common")


@pytest.fixture(scope="module")
def model() -> pathlib.Path:
    return tiny_mistral_dir("v13", consolidated=True)


@pytest.fixture(scope="module")
def server(model: pathlib.Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MockServe]:
    log = tmp_path_factory.mktemp("mistral-serve") / "serve.log"
    with mock_serve(model, log) as serve:
        yield serve


@pytest.fixture(scope="module")
def theirs(model: pathlib.Path) -> Any:
    from vllm.tokenizers.mistral import MistralTokenizer

    return MistralTokenizer.from_pretrained(str(model))


def _post(server: MockServe, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    status, data = server.request("POST", path, json.dumps(body))
    return status, json.loads(data)


MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Bonjour, ça va ? 😀"},
]


def test_tokenize_and_detokenize_use_mistral_common(server: MockServe, theirs: Any) -> None:
    status, body = _post(server, "/tokenize", {"prompt": "Hello [INST] world"})
    assert status == 200, body
    assert body["tokens"] == theirs.encode("Hello [INST] world")
    status, body = _post(server, "/tokenize", {"messages": MESSAGES})
    assert status == 200, body
    assert body["tokens"] == theirs.apply_chat_template(MESSAGES, add_generation_prompt=True)
    ids = body["tokens"]
    status, body = _post(server, "/detokenize", {"tokens": ids})
    assert status == 200, body
    assert body["prompt"] == theirs.decode(ids)


def test_generation_routes_are_served(server: MockServe) -> None:
    status, _ = server.request("GET", "/v1/models")
    assert status == 200
    status, body = _post(server, "/v1/completions", {"prompt": "Hello", "max_tokens": 4})
    assert status == 200, body
    assert body["usage"]["completion_tokens"] == 4
    status, body = _post(server, "/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 4})
    assert status == 200, body
    assert body["choices"][0]["message"]["role"] == "assistant"
    assert "Traceback" not in server.log.read_text()


def test_request_template_is_refused_as_vllm_refuses_it(server: MockServe) -> None:
    status, body = _post(
        server,
        "/v1/chat/completions",
        {"messages": MESSAGES, "chat_template_kwargs": {"enable_thinking": True}},
    )
    assert status == 400
    from vllm.exceptions import VLLMValidationError

    expected = VLLMValidationError(
        "chat_template is not supported for Mistral tokenizers.", parameter="chat_template"
    )
    assert body["error"]["message"] == str(expected)

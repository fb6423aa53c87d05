"""Bad requests get the status, error JSON and headers vLLM's own Python frontend gives.

The peer is vLLM 0.32's real FastAPI app (``build_app``) driven in-process with Starlette's
TestClient and no engine: routing, middleware (API key, CORS, X-Request-Id) and pydantic body
validation all happen before a handler needs the engine. When a body is valid, vLLM's handler
then fails with a 500 about missing app state; our test handlers answer ``{"reached": true}``
instead, and that pair counts as "both accepted the body".

To be re-verified by the differential tests that run both frontends against real engines
(handler-level errors such as an unknown model are only reachable there).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import cache
from typing import Any

import httpx
import pytest

from vllm_frontend.server.app import ServerSettings
from vllm_frontend.server.protocol import (
    parse_chat_request,
    parse_completion_request,
    parse_tokenize_request,
)
from vllm_frontend.server.routes import Services, build_app
from vllm_frontend.server.transport import Request, Response, json_response

from .support import HTTP, RunningServer

pytestmark = pytest.mark.oracle  # imports vLLM or transformers as the reference

pytest.importorskip("vllm")

M = [{"role": "user", "content": "hi"}]
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
JSON = {"content-type": "application/json"}
ROLES = ["user", "system", "developer", "assistant", "tool", "function", "weird"]
TOOL_CALLS = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]


@cache
def vllm_client(*cli: str) -> Any:
    """vLLM's FastAPI app for these CLI flags, behind a Starlette TestClient."""
    import warnings

    from starlette.testclient import TestClient
    from vllm.entrypoints.launchers.app import build_app as vllm_build_app
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    args = make_arg_parser(FlexibleArgumentParser()).parse_args(["--model", "m", *cli])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        app = vllm_build_app(args, supported_tasks=("generate",))
    return TestClient(app, raise_server_exceptions=False)


class FakeTokenizer:
    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, token_ids: Any, skip_special_tokens: bool = False) -> str:
        return "".join(chr(i) for i in token_ids)

    def convert_ids_to_tokens(self, token_ids: Any) -> list[str | None]:
        return [chr(i) for i in token_ids]

    async def ensure_backend(self) -> None:
        return None


def our_server(settings: ServerSettings) -> RunningServer:
    async def completions(request: Request) -> Response:
        parse_completion_request(request.body)
        return json_response({"reached": True})

    async def chat(request: Request) -> Response:
        parse_chat_request(request.body)
        return json_response({"reached": True})

    app = build_app(
        settings,
        Services(tokenizer=FakeTokenizer()),
        {("POST", "/v1/completions"): completions, ("POST", "/v1/chat/completions"): chat},
    )
    return RunningServer(app)


@pytest.fixture(scope="module")
def ours() -> Iterator[RunningServer]:
    srv = our_server(ServerSettings(served_model_names=["m"]))
    yield srv
    srv.stop()


def exchange(
    srv: RunningServer, vllm: Any, method: str, path: str, body: Any, headers: dict[str, str]
) -> tuple[httpx.Response, Any]:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    theirs = vllm.request(method, path, content=content, headers=headers, follow_redirects=False)
    mine = HTTP.request(method, srv.url + path, content=content, headers=headers)
    return mine, theirs


def assert_same_outcome(mine: httpx.Response, theirs: Any) -> None:
    if theirs.status_code == 500 and "object has no attribute" in theirs.text:
        # vLLM accepted the request and its handler hit the missing engine state
        assert mine.status_code == 200, mine.text
        return
    assert mine.status_code == theirs.status_code, (mine.text, theirs.text)
    assert mine.json() == theirs.json()
    assert mine.headers.get("content-type") == theirs.headers.get("content-type")


def case(body: Any, *, ctype: dict[str, str] | None = None, xfail: str | None = None) -> Any:
    marks = [pytest.mark.xfail(reason=xfail, strict=True)] if xfail else []
    return pytest.param(body, JSON if ctype is None else ctype, marks=marks)


COMPLETION_CASES = [
    case(b"{not json"),
    case(b""),
    case(b'{"prompt": "a",}'),
    case(b"[1"),
    case(b"\xff\xfe"),
    case(b"null"),  # FastAPI takes a JSON null body for a missing one
    case(b" null "),
    # bodies Python's json module cannot read at all: FastAPI's HTTPException(400)
    case(b"[" * 100_000 + b"]" * 100_000),
    case(b'{"prompt": ' + b"[" * 5000 + b"]" * 5000 + b"}"),
    case(b'{"prompt": "\xff\xfe"}'),
    case(b'{"prompt": "a", "max_tokens": 1' + b"0" * 5000 + b"}"),
    case(b'{"prompt": "a", "max_tokens": 1e999}'),
    case([1, 2]),
    case("just a string"),
    case({"prompt": "a"}, ctype={}),
    case({"prompt": "a"}, ctype={"content-type": "text/plain"}),
    case({"prompt": "a"}, ctype={"content-type": "application/json; charset=utf-8"}),
    case({"prompt": "a", "max_tokens": "abc"}),
    case({"prompt": "a", "max_tokens": 1.5, "n": "x", "stop": 3}),
    case({"prompt": "a", "stop": ["a", "b", "c", "d", "e"]}),
    case({"prompt": "a", "seed": 2**70}),
    case({"prompt": [1, -2]}),
    case({"prompt": {"a": 1}}),
    case({"prompt": [[1, 2], ["x"]]}),
    case({"prompt": "a", "temperature": "hot"}),
    case({"prompt": "a", "echo": "maybe", "stream": 2}),
    case({"prompt": "a", "stream": True, "stream_options": {"include_usage": "x"}}),
    case({"prompt": "a", "stream": True, "stream_options": 5}),
    case({"max_tokens": 3}),
    case({"prompt": "", "stream_options": {"include_usage": True}, "logprobs": -5}),
    case({"prompt": "a", "stream_options": {"include_usage": True}}),
    case({"prompt": "a", "logprobs": -5}),
    case({"prompt": "a", "logprobs": "x"}),
    case({"prompt": "a", "prompt_logprobs": 2, "stream": True}),
    case({"prompt": "a", "prompt_logprobs": -3}),
    case({"prompt": "a", "logprob_token_ids": [1]}),
    case({"prompt": "a", "cache_salt": ""}),
    case({"prompt": "a", "cache_salt": "a/b"}),
    case({"prompt": "a", "thinking_token_budget": -3, "max_tokens": "x"}),
    case({"prompt": "a", "thinking_token_budget": 2.5}),
    case({"prompt": "a", "response_format": {"type": "json_schema"}}),
    case({"prompt": "a", "response_format": {"type": "bogus"}}),
    case({"prompt": "a", "structured_outputs": {"json": {}, "regex": "a"}}),
    case({"prompt": "a", "structured_outputs": {}}),
    case({"prompt": "a", "structured_outputs": {"grammar": "g", "json_object": True}}),
    case({"prompt": "a", "structured_outputs": {"regex": 5, "json_object": True}}),
    case({"prompt": "a", "structured_outputs": {"regex": "a+"}, "guided_json": {}}),
    case({"prompt": "a", "response_format": {"type": "json_object"}}),
    case({"prompt": "a", "truncate_prompt_tokens": -2}),
    case({"prompt": "a", "truncation_side": "middle"}),
    case({"prompt": "a", "logit_bias": {"1": "x"}}),
    case({"prompt": "a", "stream_interval": 0}),
    case({"prompt": "a", "min_tokens": None}),
    case({"prompt": "a", "n": None}),
    case({"prompt": "a", "user": 5}),
    case({"prompt": "a", "mm_payload": "all"}),
    case({"prompt": ["a"] * 1025}),
    case({"prompt": "a", "unknown_field": {"x": 1}, "max_tokens": None}),
    case({"prompt": [1, 2, 3], "max_tokens": "5", "temperature": "0.5", "echo": "true"}),
    case({"prompt": ["a", "b"], "stop": "x", "stop_token_ids": [1], "seed": -1}),
    case({"prompt": [[1], [2, 3]], "logprobs": 2, "echo": True, "max_tokens": 0}),
    case({"prompt": "a", "max_tokens": True}),  # pydantic takes a boolean as an int
]


@pytest.mark.parametrize(("body", "headers"), COMPLETION_CASES)
def test_completions_body_errors_match_vllm(
    ours: RunningServer, body: Any, headers: dict[str, str]
) -> None:
    assert_same_outcome(*exchange(ours, vllm_client(), "POST", "/v1/completions", body, headers))


CHAT_CASES = [
    case({}),
    case(b'{"messages": ' + b"{" * 50_000),
    case(b'{"messages": [{"role": "user", "content": "\xc3"}]}'),
    case({"messages": "x"}),
    case({"messages": M, "tools": [], "stream_options": {"include_usage": True}}),
    case({"messages": M, "reasoning_effort": "huge"}),
    case({"messages": M, "top_logprobs": None, "logprobs": None, "n": None}),
    case({"messages": M, "cache_salt": ""}),
    case({"messages": M, "top_logprobs": 3}),
    case({"messages": M, "logprobs": True, "top_logprobs": -2}),
    case({"messages": M, "tool_choice": "auto"}),
    case({"messages": M, "tools": TOOLS, "tool_choice": "bogus"}),
    case({"messages": M, "tools": TOOLS, "tool_choice": {"type": "function"}}),
    case({"messages": M, "tools": TOOLS, "tool_choice": {"function": {}}}),
    case({"messages": M, "tools": TOOLS, "tool_choice": {"function": {"name": ""}}}),
    case({"messages": M, "tools": TOOLS, "tool_choice": {"function": {"name": "g"}}}),
    case({"messages": M, "tools": TOOLS, "tool_choice": {"function": {"name": "f"}}}),
    case({"messages": M, "tools": TOOLS}),
    case({"messages": M, "tools": [{"type": "function", "function": {"description": "x"}}]}),
    case({"messages": M, "continue_final_message": True, "add_generation_prompt": True}),
    case({"messages": M, "structured_outputs": {"json": {}, "choice": ["a"]}}),
    case({"messages": M, "structured_outputs": {"disable_any_whitespace": True}}),
    case({"messages": M, "structured_outputs": {"choice": ["a"], "structural_tag": "{}"}}),
    case({"messages": M, "structured_outputs": {"choice": ["a"]}, "guided_regex": "a"}),
    case({"messages": M, "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}),
    case({"messages": M, "max_completion_tokens": "x", "stop": [1]}),
    case({"messages": M, "response_format": {"type": "json_schema"}}),
    case({"messages": M, "response_format": {"type": "json_schema", "json_schema": {}}}),
    case({"messages": M, "thinking_token_budget": 1.5}),
    case({"messages": M, "stream": True, "stream_options": {"include_usage": True}}),
    case({"messages": M, "chat_template_kwargs": [1]}),
    case({"messages": M, "documents": [{"a": 1}]}),
    case({"messages": M, "max_tokens": None, "frobnicate": True}),
    case({"messages": [3]}),
    # each message against vLLM's message union: a null content only from the assistant
    *[case({"messages": [{"role": role, "content": None}]}) for role in ROLES],
    case({"messages": [{"role": "tool", "content": None, "tool_call_id": "c1"}]}),
    case({"messages": [{"role": "assistant", "content": None, "tool_calls": TOOL_CALLS}]}),
    case({"messages": [{"role": "user", "content": None, "name": 5}]}),
    case({"messages": [*M, {"role": "user", "content": 3}]}),
    case({"messages": [{"role": "assistant", "content": 3.5, "refusal": 1}]}),
    case({"messages": [{"role": "user", "content": {"text": "x"}}]}),
    case({"messages": [{"role": "user"}, {"content": "x"}]}),
    case({"messages": [{"role": 7, "content": "x"}]}),
    case({"messages": [{"role": "weird", "content": None, "tool_calls": [{"id": 1}]}]}),
    case({"messages": [{"role": "weird", "content": [3], "tool_calls": None, "task": "t"}]}),
    case({"messages": [{"role": "assistant", "function_call": {}, "audio": {"id": 1}}]}),
    case({"messages": [{"role": "function", "content": None, "name": "f"}]}),
    case({"messages": [{"role": "x", "author": {"role": "user"}, "content": "y"}]}),
    case({"messages": [{"role": "user", "content": "x", "name": 5}]}),
    case({"messages": [{"role": "user", "name": 5}]}),
    case({"messages": [{"role": "user", "content": "x", "name": "n", "tool_calls": TOOL_CALLS}]}),
    case({"messages": [{"role": "assistant", "content": None, "tool_calls": None}]}),
    case({"messages": [{"role": "assistant", "content": "x", "tool_calls": None}]}),
    case({"messages": [{"role": "weird", "content": "x", "tool_calls": [{"id": 1}]}]}),
    case({"messages": [{"role": "weird", "content": "x", "name": "n"}]}),
    case({"messages": [{"role": "tool", "content": "x", "tool_call_id": 5}]}),
    case({"messages": [{"role": "tool", "content": "x"}]}),
    case({"messages": [{"role": "system", "content": [{"type": "text", "text": "s"}]}]}),
]


@pytest.mark.parametrize(("body", "headers"), CHAT_CASES)
def test_chat_body_errors_match_vllm(
    ours: RunningServer, body: Any, headers: dict[str, str]
) -> None:
    client = vllm_client()
    assert_same_outcome(*exchange(ours, client, "POST", "/v1/chat/completions", body, headers))


TOKENIZE_CASES = [
    ("/tokenize", {"prompt": 3}),
    ("/tokenize", {}),
    ("/tokenize", [1]),
    ("/tokenize", {"prompt": "a", "add_special_tokens": "perhaps"}),
    ("/tokenize", {"messages": M, "continue_final_message": True, "add_generation_prompt": True}),
    ("/tokenize", {"prompt": "ab", "return_token_strs": True}),
    ("/tokenize", None),
    ("/tokenize", {"messages": [{"role": "system", "content": None}]}),
    ("/tokenize", {"prompt": "a", "messages": [{"role": "user", "content": None}]}),
    ("/detokenize", {"tokens": "a"}),
    ("/detokenize", {}),
    ("/detokenize", {"tokens": [-1]}),
    ("/detokenize", {"tokens": [104, 105]}),
]


@pytest.mark.parametrize(("path", "body"), TOKENIZE_CASES)
def test_tokenize_body_errors_match_vllm(ours: RunningServer, path: str, body: Any) -> None:
    assert_same_outcome(*exchange(ours, vllm_client(), "POST", path, body, JSON))


def assert_same_routing(mine: httpx.Response, theirs: Any, headers: tuple[str, ...] = ()) -> None:
    assert mine.status_code == theirs.status_code, (mine.text, theirs.text)
    assert mine.content == theirs.content
    for name in headers:
        assert mine.headers.get(name) == theirs.headers.get(name), name


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/nope"),
        ("GET", "/v1/nope"),
        ("POST", "/health"),
        ("GET", "/v1/completions"),
        ("DELETE", "/v1/chat/completions"),
        ("PUT", "/v1/models"),
        ("GET", "/tokenize"),
        ("OPTIONS", "/v1/completions"),
        # GET and POST /ping are two routes: Starlette's 405 names the first one's method
        ("PUT", "/ping"),
        ("HEAD", "/ping"),
        # Starlette redirects a path that a route takes with its trailing slash toggled
        ("GET", "/health/"),
        ("GET", "/health//"),
        ("POST", "/v1/completions/"),
        ("GET", "/v1/models/?a=b%20c&d"),
        ("GET", "/nope/"),
        ("GET", "/"),
    ],
)
def test_unknown_routes_and_wrong_methods_answer_like_fastapi(
    ours: RunningServer, method: str, path: str
) -> None:
    mine, theirs = exchange(ours, vllm_client(), method, path, b"", {"host": "example.com:81"})
    assert_same_routing(mine, theirs, ("allow", "content-type", "vary", "location"))


@pytest.mark.parametrize(
    "body",
    [
        {"prompt": "a", "messages": M},
        {"messages": M, "prompt": "a", "add_special_tokens": False},
        {"prompt": "a", "messages": []},
        {"prompt": "a", "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]},
        {"prompt": "a", "messages": "x"},
        {"prompt": "a", "messages": [{"role": "user", "content": None}]},
        {"prompt": "a", "messages": [{"role": "assistant", "content": None}]},
        {"prompt": "a", "messages": [{"role": "user", "content": "x", "name": 5}]},
        {"prompt": "a", "messages": [{"role": "user"}]},
        # a field only the messages form has tips the count, even null (found by
        # tests/mock/test_fuzz_match_vllm.py); the shared ones tie
        {"prompt": "a", "messages": [], "tools": None},
        {"prompt": "a", "messages": [], "tools": [{"type": "function", "function": {"name": "f"}}]},
        {"prompt": "a", "messages": [], "chat_template_kwargs": {}},
        {"prompt": "a", "messages": [], "add_generation_prompt": True},
        {"prompt": "a", "messages": [], "add_special_tokens": True, "return_token_strs": None},
    ],
)
def test_tokenize_picks_the_union_member_pydantic_picks(body: dict[str, Any]) -> None:
    from pydantic import TypeAdapter
    from vllm.entrypoints.serve.tokenize.protocol import TokenizeRequest

    theirs = TypeAdapter(TokenizeRequest).validate_python(body)
    mine = parse_tokenize_request(json.dumps(body).encode())
    assert type(mine).__name__ == type(theirs).__name__


def test_version_matches_vllm(ours: RunningServer) -> None:
    mine, theirs = exchange(ours, vllm_client(), "GET", "/version", b"", {})
    assert_same_routing(mine, theirs, ("content-type", "vary"))


@pytest.fixture(scope="module")
def guarded() -> Iterator[RunningServer]:
    srv = our_server(ServerSettings(served_model_names=["m"], api_key=["k1", "k2"]))
    yield srv
    srv.stop()


@pytest.mark.parametrize(
    ("method", "path", "auth"),
    [
        ("POST", "/v1/completions", None),
        ("POST", "/v1/completions", "Bearer nope"),
        ("POST", "/v1/completions", "Basic k1"),
        ("POST", "/v1/completions", "Bearer k2"),
        ("POST", "/v1/completions", "bearer k1"),
        ("GET", "/v1/models", "Bearer"),
        ("GET", "/v1", None),
        ("GET", "/v2/rerank", None),
        ("POST", "/inference/v1/generate", None),
        ("GET", "/version", None),
        ("OPTIONS", "/v1/completions", None),
    ],
)
def test_api_key_is_enforced_like_vllm(
    guarded: RunningServer, method: str, path: str, auth: str | None
) -> None:
    headers = dict(JSON)
    if auth is not None:
        headers["authorization"] = auth
    mine, theirs = exchange(
        guarded, vllm_client("--api-key", "k1", "k2"), method, path, b"{", headers
    )
    assert_same_routing(mine, theirs, ("content-type", "allow"))


CORS_FLAGS = (
    "--allowed-origins",
    '["https://a.example"]',
    "--allowed-methods",
    '["GET", "POST"]',
    "--allowed-headers",
    '["x-custom"]',
    "--allow-credentials",
)


@pytest.fixture(scope="module")
def cors() -> Iterator[RunningServer]:
    srv = our_server(
        ServerSettings(
            served_model_names=["m"],
            allowed_origins=["https://a.example"],
            allowed_methods=["GET", "POST"],
            allowed_headers=["x-custom"],
            allow_credentials=True,
        )
    )
    yield srv
    srv.stop()


CORS_HEADERS = (
    "access-control-allow-origin",
    "access-control-allow-methods",
    "access-control-allow-headers",
    "access-control-allow-credentials",
    "access-control-max-age",
    "vary",
    "content-type",
)


@pytest.mark.parametrize(
    ("method", "path", "headers"),
    [
        (
            "OPTIONS",
            "/v1/completions",
            {"origin": "https://a.example", "access-control-request-method": "POST"},
        ),
        (
            "OPTIONS",
            "/v1/completions",
            {
                "origin": "https://a.example",
                "access-control-request-method": "POST",
                "access-control-request-headers": "X-Custom, content-type",
            },
        ),
        (
            "OPTIONS",
            "/v1/completions",
            {
                "origin": "https://evil.example",
                "access-control-request-method": "PUT",
                "access-control-request-headers": "x-other",
            },
        ),
        ("GET", "/version", {"origin": "https://a.example"}),
        ("GET", "/version", {"origin": "https://evil.example"}),
        ("GET", "/version", {}),
        ("GET", "/nope", {"origin": "https://a.example"}),
    ],
)
def test_cors_matches_vllm(
    cors: RunningServer, method: str, path: str, headers: dict[str, str]
) -> None:
    mine, theirs = exchange(cors, vllm_client(*CORS_FLAGS), method, path, b"", headers)
    assert_same_routing(mine, theirs, CORS_HEADERS)


@pytest.fixture(scope="module")
def allow_all_cors() -> Iterator[RunningServer]:
    srv = our_server(ServerSettings(served_model_names=["m"], allowed_origins=["*"]))
    yield srv
    srv.stop()


@pytest.mark.parametrize(
    ("method", "headers"),
    [
        ("OPTIONS", {"origin": "https://x.example", "access-control-request-method": "DELETE"}),
        ("GET", {"origin": "https://x.example"}),
    ],
)
def test_cors_allow_all_matches_vllm(
    allow_all_cors: RunningServer, method: str, headers: dict[str, str]
) -> None:
    client = vllm_client("--allowed-origins", '["*"]')
    mine, theirs = exchange(allow_all_cors, client, method, "/version", b"", headers)
    assert_same_routing(mine, theirs, CORS_HEADERS)


def test_request_id_header_is_echoed_or_generated_like_vllm() -> None:
    srv = our_server(ServerSettings(served_model_names=["m"], enable_request_id_headers=True))
    try:
        client = vllm_client("--enable-request-id-headers")
        mine, theirs = exchange(srv, client, "GET", "/version", b"", {"x-request-id": "abc-1"})
        assert mine.headers["x-request-id"] == theirs.headers["x-request-id"] == "abc-1"
        # an empty header is echoed, empty (Starlette's headers.get finds it)
        mine, theirs = exchange(srv, client, "GET", "/version", b"", {"x-request-id": ""})
        assert mine.headers["x-request-id"] == theirs.headers["x-request-id"] == ""
        mine, theirs = exchange(srv, client, "GET", "/nope", b"", {})
        for r in (mine, theirs):
            rid = r.headers["x-request-id"]
            assert len(rid) == 32 and int(rid, 16) >= 0
    finally:
        srv.stop()


def test_request_id_header_is_absent_by_default(ours: RunningServer) -> None:
    mine, theirs = exchange(ours, vllm_client(), "GET", "/version", b"", {"x-request-id": "a"})
    assert "x-request-id" not in mine.headers and "x-request-id" not in theirs.headers

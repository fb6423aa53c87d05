"""Any malformed or hostile JSON body to the generation routes is a 400 in vLLM's shape, never a
5xx: truncated, deeply nested, invalid UTF-8, huge numbers, the wrong top-level type, noise.
(Which 400 body each gets is pinned against vLLM's own app in test_errors_match_vllm.py.)"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vllm_frontend.server.app import ServerSettings
from vllm_frontend.server.protocol import parse_chat_request, parse_completion_request
from vllm_frontend.server.routes import Services, build_app
from vllm_frontend.server.transport import Request, Response, json_response

from .support import HTTP, RunningServer

ROUTES = ["/v1/completions", "/v1/chat/completions"]
VALID = {
    "/v1/completions": {"model": "m", "prompt": "hi", "max_tokens": 3},
    "/v1/chat/completions": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
}


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    async def completions(request: Request) -> Response:
        parse_completion_request(request.body)
        return json_response({"reached": True})

    async def chat(request: Request) -> Response:
        parse_chat_request(request.body)
        return json_response({"reached": True})

    app = build_app(
        ServerSettings(served_model_names=["m"]),
        Services(),
        {("POST", ROUTES[0]): completions, ("POST", ROUTES[1]): chat},
    )
    srv = RunningServer(app)
    yield srv
    srv.stop()


def _valid(route: str) -> bytes:
    return json.dumps(VALID[route]).encode()


@st.composite
def broken_json(draw: st.DrawFn, route: str) -> bytes:
    """A body that is not valid JSON (or not UTF-8), in one of several hostile shapes."""
    valid = _valid(route)
    shape = draw(st.sampled_from(["truncated", "nested", "utf8", "noise", "unclosed"]))
    if shape == "truncated":
        return valid[: draw(st.integers(1, len(valid) - 1))]
    if shape == "nested":
        depth = draw(st.integers(1, 200_000))
        opener = draw(st.sampled_from([b"[", b'{"a":']))
        return opener * depth  # never closed
    if shape == "utf8":
        at = draw(st.integers(1, len(valid) - 2))
        # (not an encoded surrogate: Python's json, thus vLLM, takes those)
        bad = draw(st.sampled_from([b"\xff", b"\xc3", b"\xc0\xaf", b"\xf8\x88\x80\x80\x80"]))
        return valid[:at] + bad + valid[at:]
    if shape == "unclosed":
        return valid[:-1] + b',"x": "' + draw(st.binary(max_size=20))
    noise = draw(st.binary(min_size=1, max_size=200))
    try:
        json.loads(noise)
    except ValueError:
        return noise
    return noise + b"}"


@st.composite
def hostile_json(draw: st.DrawFn, route: str) -> bytes:
    """Valid JSON that is hostile in size or shape."""
    valid = VALID[route]
    shape = draw(st.sampled_from(["deep", "number", "top level", "field"]))
    if shape == "deep":
        depth = draw(st.integers(500, 100_000))
        return b'{"prompt": ' + b"[" * depth + b"]" * depth + b"}"
    if shape == "number":
        digits = draw(st.integers(1, 10_000))
        number = draw(st.sampled_from([b"1" + b"0" * digits, b"1e" + b"9" * min(digits, 50),
                                       b"-0." + b"0" * digits + b"1"]))  # fmt: skip
        field = draw(st.sampled_from([b"max_tokens", b"temperature", b"seed", b"n", b"top_p"]))
        return _valid(route)[:-1] + b', "' + field + b'": ' + number + b"}"
    if shape == "top level":
        value = draw(st.sampled_from([[], [valid], "x", 1, None, True, 1.5]))
        return json.dumps(value).encode()
    field = draw(st.sampled_from([*sorted(valid), "stream", "stop", "logprobs", "tools"]))
    value = draw(
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
            lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
            max_leaves=8,
        )
    )
    return json.dumps({**valid, field: value}).encode()


def _post(server: RunningServer, route: str, body: bytes) -> tuple[int, object]:
    r = HTTP.post(server.url + route, content=body, headers={"content-type": "application/json"})
    return r.status_code, r.json()


SETTINGS = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.mark.parametrize("route", ROUTES)
@SETTINGS
@given(data=st.data())
def test_broken_json_is_a_400(server: RunningServer, route: str, data: st.DataObject) -> None:
    body = data.draw(broken_json(route))
    status, payload = _post(server, route, body)
    assert status == 400, (body[:100], payload)
    assert isinstance(payload, dict) and ("error" in payload or "detail" in payload)


@pytest.mark.parametrize("route", ROUTES)
@SETTINGS
@given(data=st.data())
def test_hostile_json_is_never_a_5xx(
    server: RunningServer, route: str, data: st.DataObject
) -> None:
    body = data.draw(hostile_json(route))
    status, payload = _post(server, route, body)
    assert status < 500, (body[:100], payload)
    assert status in (200, 400, 422, 501) and isinstance(payload, dict), (status, payload)

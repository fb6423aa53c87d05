"""``/v1/chat/completions/derender`` and ``/v1/completions/derender`` of ``vllm-frontend
render`` answer what vLLM 0.32's render app answers (its ``ServingDerender`` over the tiny
Llama 3's tokenizer, built in this process): whole answers and stream chunks threaded through
their carried ``stream_state`` (multi-byte characters split across tokens and chunks, special
tokens, integer-id logprobs resolved to strings), and the errors (status and body).

Fields that are random or clock-dependent on both sides (``created``, an answer's default
``request_id``) are compared by shape only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from .conftest import ours_render_app, vllm_render_app

pytestmark = pytest.mark.oracle

CHAT = "/v1/chat/completions/derender"
COMPLETIONS = "/v1/completions/derender"
TEXT = "Héllo wörld 😀 — 中文 ∑x² ok"
MESSAGES = [{"role": "user", "content": "hi"}]


def _normal(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: 0 if k == "created" else _normal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normal(v) for v in value]
    return value


def _both(ours: httpx.Client, vllm: Any, path: str, body: Any) -> tuple[Any, Any]:
    mine = ours.post(path, json=body)
    theirs = vllm.post(path, json=body)
    assert mine.status_code == theirs.status_code, (mine.text, theirs.text)
    a, b = mine.json(), theirs.json()
    assert _normal(a) == _normal(b)
    if isinstance(a, dict):
        assert list(a) == list(b)  # key order
    return a, b


@pytest.fixture(scope="module")
def ids(vllm_render_client: Any) -> list[int]:
    got = vllm_render_client.post("/tokenize", json={"prompt": TEXT, "add_special_tokens": False})
    return list(got.json()["tokens"])


def _logprobs(ids: list[int]) -> dict[str, Any]:
    return {
        "content": [
            {
                "token_id": t,
                "logprob": -0.25 * i,
                "rank": i % 3 or None,
                "top_logprobs": [
                    {"token_id": t, "logprob": -0.25 * i, "rank": 1},
                    {"token_id": ids[(i + 1) % len(ids)], "logprob": -3.5, "rank": 2},
                ],
            }
            for i, t in enumerate(ids)
        ]
    }


def _answer(ids: list[int], **extra: Any) -> dict[str, Any]:
    return {
        "request_id": "gen-1",
        "prompt_token_ids": [128000, 9906],
        "choices": [
            {"index": 0, "token_ids": ids, "finish_reason": "length", "logprobs": _logprobs(ids)},
            {"index": 1, "token_ids": [*ids[:3], 128009], "stop_reason": 128009},
        ],
        **extra,
    }


FULL_CASES: dict[str, dict[str, Any]] = {
    "plain": {},
    "prompt ids and usage": {"prompt_token_ids": [1, 2, 3, 4, 5, 6, 7, 8], "prompt_tokens": 8},
    "model": {"model": "tiny-llama"},
    "special tokens kept": {
        "chat_request": {"messages": MESSAGES, "skip_special_tokens": False},
    },
    "return_token_ids": {"chat_request": {"messages": MESSAGES, "return_token_ids": True}},
}


@pytest.mark.parametrize("case", FULL_CASES)
def test_full_chat_derender_is_vllms(
    ours_render_client: httpx.Client, vllm_render_client: Any, ids: list[int], case: str
) -> None:
    extra = {"kv_transfer_params": {"k": [1]}, "metrics": {"queue_time_ms": 2}}
    body = {"generate_response": _answer(ids, **extra), **FULL_CASES[case]}
    _both(ours_render_client, vllm_render_client, CHAT, body)


@pytest.mark.parametrize("case", FULL_CASES)
def test_full_completion_derender_is_vllms(
    ours_render_client: httpx.Client, vllm_render_client: Any, ids: list[int], case: str
) -> None:
    body = dict(FULL_CASES[case])
    chat = body.pop("chat_request", None)
    if chat is not None:
        chat.pop("messages")
        body["completion_request"] = {"prompt": "x", **chat}
    prompt_ids = body.pop("prompt_token_ids", None)
    prompt_tokens = body.pop("prompt_tokens", None)
    second = _answer(ids[::-1], prompt_logprobs=[None, {"9906": {"logprob": -1, "rank": 2}}])
    body["generate_responses"] = [_answer(ids), second]
    if prompt_ids is not None:
        body["prompt_token_ids"] = [prompt_ids, None]
        body["prompt_tokens"] = [prompt_tokens, 3]
    _both(ours_render_client, vllm_render_client, COMPLETIONS, body)


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
@pytest.mark.parametrize("sizes", [(1,), (2, 3), (5,)])
def test_streamed_derender_is_vllms(
    ours_render_client: httpx.Client,
    vllm_render_client: Any,
    ids: list[int],
    path: str,
    sizes: tuple[int, ...],
) -> None:
    # one call per generate chunk, each side threading its own stream_state
    chunks: list[list[int]] = []
    i = 0
    while i < len(ids):
        size = sizes[len(chunks) % len(sizes)]
        chunks.append(ids[i : i + size])
        i += size
    states: list[Any] = [None, None]
    lp = _logprobs(ids)["content"]
    offset = 0
    for n, chunk in enumerate(chunks):
        last = n == len(chunks) - 1
        choice = {
            "index": 0,
            "token_ids": chunk,
            "finish_reason": "stop" if last else None,
            "logprobs": {"content": lp[offset : offset + len(chunk)]},
        }
        offset += len(chunk)
        generate_chunk = {"request_id": "gen-2", "choices": [choice]}
        if last:
            generate_chunk["usage"] = {"prompt_tokens": 4, "completion_tokens": len(ids)}
        replies = []
        for side, client in enumerate((ours_render_client, vllm_render_client)):
            body = {
                "stream": True,
                "generate_chunk": generate_chunk,
                "stream_state": states[side],
                "prompt_token_ids": [128000, 9906, 11],
                "prompt_tokens": 3 if last else None,
            }
            reply = client.post(path, json=body)
            assert reply.status_code == 200, reply.text
            replies.append(reply.json())
            states[side] = replies[-1]["stream_state"]
        assert _normal(replies[0]) == _normal(replies[1])


ERROR_CASES: dict[str, tuple[str, Any]] = {
    "empty body": (CHAT, {}),
    "stream only": (CHAT, {"stream": True}),
    "not an object": (CHAT, [1]),
    "answer not an object": (CHAT, {"generate_response": "x"}),
    "negative id": (CHAT, {"generate_response": {"choices": [{"index": 0, "token_ids": [-1]}]}}),
    "empty ids": (CHAT, {"generate_response": {"choices": [{"index": 0, "token_ids": []}]}}),
    "too many ids": (
        CHAT,
        {"generate_response": {"choices": [{"index": 0, "token_ids": [1] * 3000}]}},
    ),
    "prompt too long": (
        CHAT,
        {
            "generate_response": {"choices": [{"index": 0, "token_ids": [1]}]},
            "prompt_token_ids": [1] * 3000,
        },
    ),
    "too many top logprobs": (
        CHAT,
        {
            "generate_response": {
                "choices": [
                    {
                        "index": 0,
                        "token_ids": [1],
                        "logprobs": {
                            "content": [
                                {
                                    "token_id": 1,
                                    "logprob": 0,
                                    "top_logprobs": [{"token_id": 1, "logprob": 0}] * 21,
                                }
                            ]
                        },
                    }
                ]
            }
        },
    ),
    "unknown model": (
        CHAT,
        {"model": "nope", "generate_response": {"choices": [{"index": 0, "token_ids": [1]}]}},
    ),
    "bad chat_request": (
        CHAT,
        {
            "generate_response": {"choices": [{"index": 0, "token_ids": [1]}]},
            "chat_request": {"messages": "x"},
        },
    ),
    "two choices in a chunk": (
        CHAT,
        {"stream": True, "generate_chunk": {"choices": [{"index": 0}, {"index": 1}]}},
    ),
    "chunk over the context": (
        CHAT,
        {
            "stream": True,
            "generate_chunk": {"choices": [{"index": 0, "token_ids": [1]}]},
            "prompt_token_ids": [1] * 2048,
        },
    ),
    "chunk lens do not add up": (
        CHAT,
        {
            "stream": True,
            "generate_chunk": {"choices": []},
            "stream_state": {"output_token_ids": [1], "output_chunk_lens": []},
        },
    ),
    "state window too large": (
        CHAT,
        {
            "stream": True,
            "generate_chunk": {"choices": []},
            "stream_state": {"prev_tokens": ["a"] * 1025},
        },
    ),
    "no answers": (COMPLETIONS, {"generate_responses": []}),
    "completion body empty": (COMPLETIONS, {}),
    "lengths differ": (
        COMPLETIONS,
        {
            "generate_responses": [{"choices": [{"index": 0, "token_ids": [1]}]}],
            "prompt_tokens": [1, 2],
        },
    ),
    "completion chunk with two choices": (
        COMPLETIONS,
        {"stream": True, "generate_chunk": {"choices": [{"index": 0}, {"index": 1}]}},
    ),
    "completion chunk prompt too long": (
        COMPLETIONS,
        {"stream": True, "generate_chunk": {"choices": []}, "prompt_token_ids": [1] * 3000},
    ),
}


@pytest.mark.parametrize("case", ERROR_CASES)
def test_derender_errors_are_vllms(
    ours_render_client: httpx.Client, vllm_render_client: Any, case: str
) -> None:
    path, body = ERROR_CASES[case]
    mine = ours_render_client.post(path, json=body)
    theirs = vllm_render_client.post(path, json=body)
    assert (mine.status_code, mine.json()) == (theirs.status_code, theirs.json())


def test_default_ids_are_vllms_shape(ours_render_client: httpx.Client) -> None:
    body = {"generate_response": {"choices": [{"index": 0, "token_ids": [9906]}]}}
    got = ours_render_client.post(CHAT, json=body).json()
    assert len(got["id"]) == 16 and int(got["id"], 16) >= 0


# -- with a tool parser (llama3_json, which the tiny Llama 3's vocabulary supports) ----------

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
TOOL_CHOICES: dict[str, Any] = {
    "default": {},
    "none": {"tool_choice": "none"},
    "required": {"tool_choice": "required"},
    "named": {"tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
    "no parallel calls": {"parallel_tool_calls": False},
}
OUTPUTS = {
    "call": '{"name": "get_weather", "parameters": {"city": "Paris"}}',
    "text": "Just text here.",
    "tagged call": '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Oslo"}}',
}


@pytest.fixture(scope="module")
def tool_apps(tiny_model: Any) -> Iterator[tuple[httpx.Client, Any]]:
    theirs = vllm_render_app(tiny_model, "--tool-call-parser", "llama3_json",
                             "--enable-auto-tool-choice")  # fmt: skip
    ours = ours_render_app(tiny_model, tool_call_parser="llama3_json", enable_auto_tool_choice=True)
    vllm_client, ours_client = next(theirs), next(ours)
    yield ours_client, vllm_client
    for gen in (theirs, ours):
        with contextlib.suppress(StopIteration):
            next(gen)


def _masked(value: Any) -> Any:
    # tool-call ids are random on both sides
    if isinstance(value, dict):
        return {
            k: "<id>" if k in ("id", "last_tool_call_ids") else _masked(v)
            for k, v in _normal(value).items()
        }
    if isinstance(value, list):
        return [_masked(v) for v in value]
    return value


@pytest.mark.parametrize("output", OUTPUTS)
@pytest.mark.parametrize("choice", TOOL_CHOICES)
def test_parsed_derender_is_vllms(
    tool_apps: tuple[httpx.Client, Any], output: str, choice: str
) -> None:
    ours, vllm = tool_apps
    ids = vllm.post(
        "/tokenize", json={"prompt": OUTPUTS[output], "add_special_tokens": False}
    ).json()["tokens"]
    chat = {"messages": MESSAGES, "tools": TOOLS, **TOOL_CHOICES[choice]}
    answer = {"request_id": "g", "choices": [{"index": 0, "token_ids": ids}]}
    for body in ({"generate_response": answer, "chat_request": chat},
                 {"generate_response": answer}):  # fmt: skip
        mine, theirs = ours.post(CHAT, json=body), vllm.post(CHAT, json=body)
        assert mine.status_code == theirs.status_code
        assert _masked(mine.json()) == _masked(theirs.json())
    for size in (1, 4):
        states: list[Any] = [None, None]
        for i in range(0, len(ids), size):
            last = i + size >= len(ids)
            generate_chunk = {
                "request_id": "g",
                "choices": [{"index": 0, "token_ids": ids[i : i + size],
                             "finish_reason": "stop" if last else None}],
            }  # fmt: skip
            replies = []
            for side, client in enumerate((ours, vllm)):
                body = {"stream": True, "generate_chunk": generate_chunk,
                        "stream_state": states[side], "prompt_token_ids": [128000, 9906],
                        "chat_request": chat}  # fmt: skip
                reply = client.post(CHAT, json=body)
                assert reply.status_code == 200, reply.text
                replies.append(reply.json())
                states[side] = replies[-1]["stream_state"]
            assert _masked(replies[0]) == _masked(replies[1])
    if choice == "default" and output != "text":
        assert replies[0]["chunk"]["choices"][0]["finish_reason"] == "tool_calls"


def test_parsed_stream_needs_prompt_ids(tool_apps: tuple[httpx.Client, Any]) -> None:
    ours, vllm = tool_apps
    body = {"stream": True, "generate_chunk": {"choices": []},
            "chat_request": {"messages": MESSAGES}}  # fmt: skip
    mine, theirs = ours.post(CHAT, json=body), vllm.post(CHAT, json=body)
    assert (mine.status_code, mine.json()) == (theirs.status_code, theirs.json())


# -- with the hf parsers (the tiny model dressed with Qwen3's response template) -----------------

HF_TOOLS = [*TOOLS, {"type": "function", "function": {"name": "get_time", "parameters": {}}}]
_HF_CALLS = (
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nZürich\n</parameter>\n</function>\n"
    "</tool_call>\n<tool_call>\n<function=get_time>\n</function>\n</tool_call>"
)
HF_OUTPUTS = {
    "reasoning, content and calls": f"<think>\nlook it up\n</think>\n\nChecking.\n\n{_HF_CALLS}",
    "content only": "Just text — ünïcode.",
    "cut in a call": "<think>\nhm</think>Sure <tool_call>\n<function=get_weather>\n<param",
}
HF_PROMPTS: dict[str, dict[str, Any]] = {"default": {}, "thinking": {"enable_thinking": True}}


@pytest.fixture(scope="module")
def hf_apps(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx.Client, Any]]:
    from tests.support.tiny_hf_template import hf_template_model

    model = hf_template_model(tmp_path_factory.mktemp("hf") / "tiny-qwen-template")
    flags = ("--tool-call-parser", "hf", "--reasoning-parser", "hf", "--enable-auto-tool-choice")
    theirs = vllm_render_app(model, *flags)
    ours = ours_render_app(model, tool_call_parser="hf", reasoning_parser="hf",
                           enable_auto_tool_choice=True)  # fmt: skip
    vllm_client, ours_client = next(theirs), next(ours)
    yield ours_client, vllm_client
    for gen in (theirs, ours):
        with contextlib.suppress(StopIteration):
            next(gen)


@pytest.mark.parametrize("prompt", HF_PROMPTS)
@pytest.mark.parametrize("output", HF_OUTPUTS)
@pytest.mark.parametrize("choice", ["default", "none"])
def test_hf_parsed_derender_is_vllms(
    hf_apps: tuple[httpx.Client, Any], output: str, prompt: str, choice: str
) -> None:
    ours, vllm = hf_apps
    chat = {"messages": MESSAGES, "tools": HF_TOOLS, "chat_template_kwargs": HF_PROMPTS[prompt],
            **TOOL_CHOICES[choice]}  # fmt: skip
    prompt_ids = vllm.post("/tokenize", json={k: v for k, v in chat.items()
                                              if k != "tool_choice"}).json()["tokens"]  # fmt: skip
    ids = vllm.post(
        "/tokenize", json={"prompt": HF_OUTPUTS[output], "add_special_tokens": False}
    ).json()["tokens"]
    answer = {"request_id": "g", "prompt_token_ids": prompt_ids,
              "choices": [{"index": 0, "token_ids": ids}]}  # fmt: skip
    whole = {"generate_response": answer, "chat_request": chat}
    mine, theirs = ours.post(CHAT, json=whole), vllm.post(CHAT, json=whole)
    assert mine.status_code == theirs.status_code == 200, (mine.text, theirs.text)
    assert _masked(mine.json()) == _masked(theirs.json())
    if output == "reasoning, content and calls" and choice == "default":
        calls = theirs.json()["choices"][0]["message"]["tool_calls"]  # really parsed
        assert [c["function"]["name"] for c in calls] == ["get_weather", "get_time"]
    for size in (1, 3):
        states: list[Any] = [None, None]
        for i in range(0, len(ids), size):
            last = i + size >= len(ids)
            generate_chunk = {
                "request_id": "g",
                "choices": [{"index": 0, "token_ids": ids[i : i + size],
                             "finish_reason": "stop" if last else None}],
            }  # fmt: skip
            replies = []
            for side, client in enumerate((ours, vllm)):
                body = {"stream": True, "generate_chunk": generate_chunk,
                        "stream_state": states[side], "prompt_token_ids": prompt_ids,
                        "chat_request": chat}  # fmt: skip
                reply = client.post(CHAT, json=body)
                assert reply.status_code == 200, reply.text
                replies.append(reply.json())
                states[side] = replies[-1]["stream_state"]
            assert _masked(replies[0]) == _masked(replies[1])

"""``/v1/chat/completions/derender`` and ``/v1/completions/derender`` of ``vllm-frontend
render`` answer what vLLM 0.32's render app answers (its ``ServingDerender`` over the tiny
Llama 3's tokenizer, built in this process): whole answers and stream chunks threaded through
their carried ``stream_state`` (multi-byte characters split across tokens and chunks, special
tokens, integer-id logprobs resolved to strings), and the errors (status and body).

Fields that are random or clock-dependent on both sides (``created``, an answer's default
``request_id``) are compared by shape only.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

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

"""The routes' requests in the text and chat layers' terms: each field of ``SamplingRequest``,
``TextRequest`` and ``ChatRequest`` comes from the request field it maps (the routes build them
positionally, so a field out of order would hand one field's value to another).

The request is a namespace of distinct sentinel objects (struct construction does not convert
values), so each field's value names the request field it came from.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from vllm_frontend.server.chat import chat_request
from vllm_frontend.server.completions import text_request
from vllm_frontend.server.generation import sampling_request
from vllm_frontend.server.transport.messages import Request


class _Value:
    """A distinct truthy value that says which request field it is."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name}>"


# SamplingRequest fields taken unchanged from the request field of the same name
_SAMPLING_SAME = (
    "n", "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
    "repetition_penalty", "seed", "stop", "stop_token_ids", "include_stop_str_in_output",
    "ignore_eos", "min_tokens", "skip_special_tokens", "spaces_between_special_tokens",
    "logit_bias", "allowed_token_ids", "bad_words", "stream_interval", "watermarking",
    "thinking_token_budget",
)  # fmt: skip

_REQUEST_FIELDS = (
    *_SAMPLING_SAME, "logprobs", "top_logprobs", "prompt_logprobs", "echo", "prompt", "model",
    "max_tokens", "max_completion_tokens", "add_special_tokens", "truncate_prompt_tokens",
    "truncation_side", "suffix", "prompt_embeds", "mm_processor_kwargs", "media_io_kwargs",
    "structured_outputs", "response_format", "repetition_detection", "length_penalty",
    "priority", "cache_salt", "messages", "tools", "tool_choice", "documents",
    "chat_template", "chat_template_kwargs", "reasoning_effort", "include_reasoning",
    "parallel_tool_calls",
)  # fmt: skip


def _request(**changes: Any) -> SimpleNamespace:
    values: dict[str, Any] = {name: _Value(name) for name in _REQUEST_FIELDS}
    values.update(
        logprob_token_ids=None,
        vllm_xargs=None,
        kv_transfer_params=None,
        ec_transfer_params=None,
        stream=1,
        use_beam_search=0,
        add_generation_prompt=None,
        continue_final_message=False,
    )
    values.update(changes)
    return SimpleNamespace(**values)


def _http(rank: bytes = b"3") -> Request:
    return Request("POST", "/v1/x", b"", {b"x-data-parallel-rank": rank}, b"")


def _fields(struct: Any) -> dict[str, Any]:
    return {name: getattr(struct, name) for name in struct.__struct_fields__}


def test_sampling_request_fields_come_from_their_request_fields() -> None:
    req = _request(vllm_xargs={"a": 1}, kv_transfer_params={"k": 2})
    got = _fields(sampling_request(req, chat=False))
    for name in _SAMPLING_SAME:
        assert got[name] is getattr(req, name), name
    assert got["logprobs"] is req.logprobs
    assert got["prompt_logprobs"] is req.prompt_logprobs
    assert got["logprob_token_ids"] is None
    assert got["extra_args"] == {"a": 1, "kv_transfer_params": {"k": 2}}
    assert got["stream"] is True


def test_chat_sampling_request_logprobs_are_top_logprobs() -> None:
    got = sampling_request(_request(), chat=True)
    assert got.logprobs is not None and got.logprobs.name == "top_logprobs"  # type: ignore[attr-defined]
    ids = _Value("logprob_token_ids")
    got = sampling_request(_request(logprob_token_ids=ids), chat=True)
    assert got.logprobs is None
    assert got.logprob_token_ids is ids


def test_text_request_fields_come_from_their_request_fields() -> None:
    req = _request()
    got = _fields(text_request(req, _http(), "cmpl-1"))
    assert got.pop("sampling") == sampling_request(req, chat=False)
    same = (
        "prompt", "max_tokens", "add_special_tokens", "truncate_prompt_tokens",
        "truncation_side", "suffix", "prompt_embeds", "mm_processor_kwargs", "media_io_kwargs",
        "structured_outputs", "response_format", "repetition_detection", "length_penalty",
        "priority", "cache_salt", "model",
    )  # fmt: skip
    for name in same:
        assert got.pop(name) is getattr(req, name), name
    assert got == {
        "request_id": "cmpl-1",
        "max_tokens_param": "max_tokens",
        "echo": True,
        "use_beam_search": False,
        "numbered": True,
        "data_parallel_rank": 3,
        "reasoning_ended": None,
        "reasoning_parser_kwargs": None,
        "trace_headers": None,
        "render": False,
        "defer_engine_checks": True,
    }


def test_chat_request_fields_come_from_their_request_fields() -> None:
    req = _request()
    chat = chat_request(req, _http(), "chatcmpl-1")
    text = _fields(chat.text)
    assert text.pop("sampling") == sampling_request(req, chat=True)
    same = (
        "truncate_prompt_tokens", "truncation_side", "structured_outputs", "response_format",
        "repetition_detection", "length_penalty", "priority", "cache_salt", "model",
    )  # fmt: skip
    for name in same:
        assert text.pop(name) is getattr(req, name), name
    assert text.pop("max_tokens") is req.max_completion_tokens
    assert text == {
        "request_id": "chatcmpl-1",
        "prompt": None,
        "max_tokens_param": "max_completion_tokens",
        "add_special_tokens": True,
        "suffix": None,
        "echo": False,
        "prompt_embeds": None,
        "mm_processor_kwargs": None,
        "media_io_kwargs": None,
        "use_beam_search": False,
        "numbered": False,
        "data_parallel_rank": 3,
        "reasoning_ended": None,
        "reasoning_parser_kwargs": None,
        "trace_headers": None,
        "render": False,
        "defer_engine_checks": True,
    }
    assert chat.messages is req.messages
    for name in ("tools", "tool_choice", "documents", "chat_template", "chat_template_kwargs",
                 "reasoning_effort", "parallel_tool_calls", "mm_processor_kwargs",
                 "media_io_kwargs"):  # fmt: skip
        assert getattr(chat, name) is getattr(req, name), name
    assert (chat.include_reasoning, chat.echo, chat.logprobs) == (True, True, True)


def test_chat_request_max_tokens_without_max_completion_tokens() -> None:
    req = _request(max_completion_tokens=None)
    text = chat_request(req, _http(b"x"), "chatcmpl-2").text
    assert (text.max_tokens, text.max_tokens_param) == (req.max_tokens, "max_tokens")
    assert text.data_parallel_rank is None

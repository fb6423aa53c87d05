"""A chat message's content parts that OpenAI's message branch reads lazily are refused with
pydantic's report, as vLLM 0.32 reports them when it renders the message.

The reference is vLLM's own ``ChatCompletionRequest``: a message whose content it keeps as a
lazy ``ValidatorIterator`` fails when its parts are read (vLLM answers 400 with the report).
"""

from __future__ import annotations

from typing import Any

import pytest

from vllm_frontend.server.message_schema import unread_parts_error

pytestmark = pytest.mark.oracle  # imports vLLM as the reference


def vllm_report(messages: list[Any]) -> str | None:
    """What vLLM reports as it reads the messages' parts (None: nothing)."""
    from pydantic import ValidationError
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    request = ChatCompletionRequest.model_validate({"messages": messages})
    for message in request.messages:
        content = message.get("content") if isinstance(message, dict) else None
        if content is not None and not isinstance(content, str | list):
            try:
                list(content)
            except ValidationError as exc:
                return str(exc)
    return None


TC = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]

REFUSED = [
    [{"role": "user", "content": [{"type": "bogus"}]}],
    [{"role": "user", "content": [{"type": "bogus", "text": "x"}]}],
    [{"role": "user", "content": [{"type": "input_text", "text": "x"}]}],
    [{"role": "user", "content": [{"text": "x"}]}],
    [{"role": "user", "content": ["x"]}],
    [{"role": "user", "content": [3, {"type": "text", "text": "x"}]}],
    [{"role": "user", "content": [{"type": "text", "text": "x"}, 3]}],
    [{"role": "user", "content": [{"type": "video_url", "video_url": {"url": "v"}}, 3]}],
    [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "i"}, "uuid": "u"},
                                  {"type": "image_url", "image_url": {"detail": "max"}}, None]}],
    [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "d",
                                   "format": "wav"}}, {"type": "file", "file": {}}, [3]]}],
    [{"role": "user", "content": [None]}],
    [{"role": "user", "content": [{"type": 5}], "name": "n"}],
    [{"role": "user", "content": [{"type": "bogus", "xx": "a" * 80}]}],
    [{"role": "user", "content": [{"type": "b", "input_audio": {"data": 1}, "file": {"id": 3}}]}],
    [{"role": "user", "content": [{"type": "b", "input_audio": {"data": "d", "format": "ogg"}}]}],
    [{"role": "system", "content": [{"type": "bogus"}]}],
    [{"role": "developer", "content": [[1, 2]]}],
    [{"role": "assistant", "content": [{"type": "bogus", "refusal": 5}]}],
    [{"role": "tool", "content": [{"type": "x"}], "tool_call_id": "c1"}],
    [{"role": "user", "content": "hi"}, {"role": "user", "content": [{"type": "ü", "é": "ß"}]}],
    # Typed media parts no member of vLLM's part union takes with a field set: alone in their
    # message, OpenAI's branch reads them.
    [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "d",
                                                                          "format": "flac"}}]}],
    [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "d"}}]}],
    [{"role": "user", "content": [{"type": "input_audio", "input_audio": "d"}]}],
    [{"role": "user", "content": [{"type": "text", "text": 5}]}],
    [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}],
    [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "i",
                                                                      "detail": "max"}}]}],
    [{"role": "user", "content": [{"type": "video_url", "video_url": {}}]}],
    [{"role": "user", "content": [{"type": "audio_url", "audio_url": {"url": 3}}]}],
    [{"role": "user", "content": [{"image_url": {"url": "i"}}]}],
    [{"role": "user", "content": [{"type": "input_image", "detail": "low", "file_id": 3}]}],
]  # fmt: skip
TAKEN = [
    [{"role": "user", "content": [{"type": "text", "text": "x"}]}],
    [{"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "bogus"}]}],
    [{"role": "user", "content": [{"type": "bogus", "uuid": "u"}]}],
    [{"role": "user", "content": [{"type": "video_url", "video_url": {"url": "x"}}]}],
    [{"role": "user", "content": []}],
    [{"role": "weird", "content": [{"type": "bogus"}]}],
    [{"role": "tool", "content": [{"type": "x"}]}],
    [{"role": "assistant", "content": [{"type": "bogus"}], "tool_calls": TC}],
    [{"role": "user", "content": [{"type": "bogus"}], "reasoning": "r"}],
    [{"role": "user", "content": [{"name": "tool"}]}],
    # Beside a part that sets fields (or with a uuid), the custom-role branch takes them.
    [{"role": "user", "content": [{"type": "text", "text": "x"},
                                  {"type": "input_audio", "input_audio": {"data": "d",
                                                                          "format": "flac"}}]}],
    [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "d",
                                                                          "format": "flac"},
                                   "uuid": "u"}]}],
    [{"role": "user", "content": [{"type": "image_url", "image_url": "i", "uuid": "u"}]}],
    [{"role": "user", "content": [{"type": "input_image", "image_url": "i", "detail": "low"}]}],
    [{"role": "user", "content": [{"image_url": "i"}]}],
]  # fmt: skip


def vllm_parser_report(messages: list[Any]) -> str | None:
    """pydantic's report of the first part vLLM's chat parser refuses, reading the messages
    its request model took with their parts in a list (None: none)."""
    from pydantic import ValidationError
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.renderers.chat_utils import _parse_chat_message_content_mm_part

    request = ChatCompletionRequest.model_validate({"messages": messages})
    for message in request.messages:
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else []:
            if isinstance(part, dict):
                try:
                    _parse_chat_message_content_mm_part(part)
                except ValidationError as exc:
                    return str(exc)
                except Exception:  # vLLM's own refusals: judged by the chat layer
                    continue
    return None


# Typed URL parts (and Responses' input_image) vLLM's chat parser validates, in messages the
# custom-role branch takes (a field set by some part).
PARSER_REFUSED = [
    [{"role": "user", "content": [{"type": "image_url", "image_url": "data:image/png;base64,"
                                   + "A" * 80}]}],
    [{"role": "user", "content": [{"type": "text", "text": "x"},
                                  {"type": "image_url", "image_url": {}}]}],
    [{"role": "user", "content": [{"type": "text", "text": "x"},
                                  {"type": "image_url", "image_url": {"url": "i", "detail": 1}}]}],
    [{"role": "user", "content": [{"type": "video_url", "video_url": "v"}]}],
    [{"role": "user", "content": [{"type": "text", "text": "x"},
                                  {"type": "video_url", "video_url": {"url": None}}]}],
    [{"role": "user", "content": [{"type": "audio_url", "audio_url": "a"}]}],
    [{"role": "user", "content": [{"type": "input_image", "image_url": "i"}]}],
    [{"role": "user", "content": [{"type": "input_image", "image_url": "i" * 60, "detail": "x"}]}],
    [{"role": "weird", "content": [{"type": "image_url", "image_url": "i"}]}],
    [{"role": "user", "content": "hi"},
     {"role": "user", "content": [{"type": "text", "text": "x"},
                                  {"type": "audio_url", "audio_url": {}}]}],
]  # fmt: skip


@pytest.mark.parametrize("messages", PARSER_REFUSED)
def test_parts_vllms_parser_refuses_are_reported_as_it_reports_them(
    messages: list[Any],
) -> None:
    assert vllm_report(messages) is None
    theirs = vllm_parser_report(messages)
    assert theirs is not None
    assert unread_parts_error(messages) == theirs


@pytest.mark.parametrize("messages", REFUSED)
def test_parts_no_part_type_reads_are_reported_as_vllm_reports_them(messages: list[Any]) -> None:
    theirs = vllm_report(messages)
    assert theirs is not None
    assert unread_parts_error(messages) == theirs


@pytest.mark.parametrize("messages", TAKEN)
def test_parts_vllm_takes_are_not_reported(messages: list[Any]) -> None:
    assert vllm_report(messages) is None
    assert vllm_parser_report(messages) is None
    assert unread_parts_error(messages) is None

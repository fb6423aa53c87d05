"""Media in a Responses request's input, pinned against vLLM 0.32: the message items with
``input_image`` / ``input_file`` parts become the chat messages vLLM's own
``construct_input_messages`` builds from its validated ``ResponsesRequest`` (``detail``
defaulted as its validator does), the part shapes its request model refuses are refused with
its status and ``param``, and what its chat parser then refuses (``input_file``) gets its
message."""

from __future__ import annotations

import json
from typing import Any

import pytest

from vllm_frontend.chat.errors import ChatError
from vllm_frontend.chat.messages import normalize_messages
from vllm_frontend.multimodal.parts import MediaParts
from vllm_frontend.server.errors import RequestValidationFailed
from vllm_frontend.server.responses_input import input_messages
from vllm_frontend.server.responses_protocol import parse_responses_request

pytestmark = pytest.mark.oracle

URL = "http://127.0.0.1:9/cat.png"
DATA_URL = "data:image/png;base64,iVBORw0KGgo="


def _image(**extra: Any) -> dict[str, Any]:
    return {"type": "input_image", **extra}


def _user(*parts: Any, **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": list(parts), **extra}


TEXT = {"type": "input_text", "text": "What is it?"}

ACCEPTED: dict[str, list[Any]] = {
    "url": [_user(TEXT, _image(image_url=URL))],
    "data url, detail low": [_user(_image(image_url=DATA_URL, detail="low"), TEXT)],
    "detail original": [_user(_image(image_url=URL, detail="original"))],
    "file id only": [_user(_image(file_id="file-1"))],
    "null url with uuid": [_user(_image(image_url=None, uuid="img-1"))],
    "typed message": [{**_user(TEXT, _image(image_url=URL)), "type": "message"}],
    "system and developer images": [
        {"role": "system", "content": [_image(image_url=URL)]},
        {"role": "developer", "content": [TEXT, _image(image_url=DATA_URL)]},
        _user(TEXT),
    ],
    "assistant image": [_user(TEXT), {"role": "assistant", "content": [_image(image_url=URL)]}],
    "input file": [_user(TEXT, {"type": "input_file", "file_url": "http://x/a.pdf"})],
    "two images, extra field": [
        _user(_image(image_url=URL, cache_control={"type": "ephemeral"}), _image(image_url=URL))
    ],
}

REFUSED: dict[str, Any] = {
    "chat image_url part": _user({"type": "image_url", "image_url": {"url": URL}}),
    "chat text part": _user({"type": "text", "text": "hi"}),
    "image url as an object": _user(_image(image_url={"url": URL})),
    "unknown detail": _user(_image(image_url=URL, detail="weird")),
    "null detail": _user(_image(image_url=URL, detail=None)),
    "input_audio part": _user(
        {"type": "input_audio", "input_audio": {"data": "AA", "format": "wav"}}
    ),
    "video_url part": _user({"type": "video_url", "video_url": {"url": URL}}),
    "string part": _user("plain"),
    "input_file null url": _user({"type": "input_file", "file_url": None}),
}


def _media() -> MediaParts:
    return MediaParts({"image": 2}, {"image": None}, {"image": "<image>"})


def _vllm_messages(request_input: list[Any]) -> Any:
    from vllm.entrypoints.openai.responses.protocol import ResponsesRequest as VllmRequest
    from vllm.entrypoints.openai.responses.utils import construct_input_messages

    validated = VllmRequest.model_validate({"input": json.loads(json.dumps(request_input))})
    return construct_input_messages(request_input=validated.input)


@pytest.mark.parametrize("case", list(ACCEPTED))
def test_media_messages_are_vllms(case: str) -> None:
    request_input = ACCEPTED[case]
    raw = json.dumps({"model": "m", "input": request_input}).encode()
    ours = input_messages(None, parse_responses_request(raw).input)
    assert json.loads(json.dumps(ours)) == json.loads(json.dumps(_vllm_messages(request_input)))


@pytest.mark.parametrize("case", list(REFUSED))
def test_part_shapes_vllm_refuses_are_refused(case: str) -> None:
    from pydantic import ValidationError

    request_input = [REFUSED[case]]
    with pytest.raises(ValidationError):
        _vllm_messages(request_input)
    raw = json.dumps({"model": "m", "input": request_input}).encode()
    with pytest.raises(RequestValidationFailed) as caught:
        input_messages(None, parse_responses_request(raw).input)
    error = caught.value  # vLLM's: 400 "Bad Request" on body.input
    assert (error.status, error.err_type, error.param) == (400, "Bad Request", "body.input")
    assert error.message.startswith("2 validation errors:")


def test_an_input_file_gets_vllms_unsupported_part_error() -> None:
    from vllm.exceptions import VLLMValidationError
    from vllm.renderers.chat_utils import _parse_chat_message_content_part

    part = {"type": "input_file", "file_data": "JVBERi0=", "filename": "a.pdf"}
    raw = json.dumps({"input": [_user(TEXT, part)]}).encode()
    messages = input_messages(None, parse_responses_request(raw).input)
    with pytest.raises(VLLMValidationError) as theirs:
        _parse_chat_message_content_part(
            messages[0]["content"][1], None, wrap_dicts=True, interleave_strings=False
        )  # type: ignore[arg-type]
    with pytest.raises(ChatError) as ours:
        normalize_messages(messages, "openai", _media())
    assert str(ours.value) == str(theirs.value)
    assert ours.value.param == theirs.value.parameter == "type"


def test_an_input_image_is_an_image_part_with_its_detail() -> None:
    """In the "openai" content format the template sees ``{"type": "image", "detail": ...}``
    (vLLM passes a part's fields it does not know on to the template) and the image's URL goes
    to the media list."""
    raw = json.dumps({"input": [_user(TEXT, _image(image_url=DATA_URL))]}).encode()
    media = _media()
    conversation = normalize_messages(
        input_messages(None, parse_responses_request(raw).input), "openai", media
    )
    assert conversation[0]["content"] == [
        {"type": "text", "text": "What is it?"},
        {"type": "image", "detail": "auto"},
    ]
    assert [(p.modality, p.url) for p in media.items] == [("image", DATA_URL)]

"""Engine-request differential: vLLM 0.32's Python frontend and ours, each in front of a mock
engine that records every ADD request, get the same image chat requests; the engine requests
must be equal (prompt ids, placeholder ranges, hashes and identifiers, field factories, tensor
dtypes, shapes and values). Bad input gets vLLM's status and error body.

Both frontends mirror the engine's multimodal cache: an item the engine already holds goes as
``data=None`` from both, on the same requests.

Both run with ``--enable-mm-embeds``: ``image_embeds`` / ``video_embeds`` parts (Qwen2-VL's
dictionaries of embeddings and grid) are compared too, and the requests vLLM refuses.

Both run with ``--enable-scale-out`` too: ``/inference/v1/generate`` with ``content_parts``
(media expanded into a token prompt), ``/v1/chat/completions/render`` with media (also from our
engine-free ``vllm-frontend render`` app) and the generate requests a render answers, and parts
naming an item by its ``uuid`` alone.
"""

from __future__ import annotations

import base64
import io
import json
import re
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import httpx
import numpy as np
import pytest
from PIL import Image

from tests.multimodal.media.videos import make_video
from tests.multimodal.recorded import Side, compare_requests, recorded_sides
from tests.support.tiny_vlm import VLM_PYTHONPATH, tiny_vlm_dir

pytestmark = pytest.mark.engine


LIMITS = '{"image": 3, "video": 2}'


def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Side]]:
    """This module's recorded stack, its directory and model made now (started by the
    session's ``recorded_qwen_vl`` beside test_qwen_vl_requests')."""
    tmp = tmp_path_factory.mktemp("records")
    args = ["--limit-mm-per-prompt", LIMITS, "--enable-mm-embeds", "--enable-scale-out",
            "--trust-request-chat-template", "--interleave-mm-strings"]  # fmt: skip
    return recorded_sides(tiny_vlm_dir(), tmp, args, {"PYTHONPATH": VLM_PYTHONPATH})


@pytest.fixture(scope="module")
def sides(recorded_qwen_vl: dict[str, Future[dict[str, Side]]]) -> dict[str, Side]:
    return recorded_qwen_vl["qwen2_vl"].result()


def _png(width: int, height: int, seed: int, mode: str = "RGB") -> str:
    rng = np.random.default_rng(seed)
    image = Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))
    buf = io.BytesIO()
    image.convert(mode).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _jpeg(width: int, height: int, seed: int) -> str:
    rng = np.random.default_rng(seed)
    image = Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))
    buf = io.BytesIO()
    image.save(buf, "JPEG", quality=90)
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode()


def _video(frames: int, fps: float, size: tuple[int, int], fourcc: str = "mp4v") -> dict:
    data = make_video(frames, fps, size, fourcc)
    url = "data:video/mp4;base64," + base64.b64encode(data).decode()
    return {"type": "video_url", "video_url": {"url": url}}


def _jpeg_frames(count: int, seed: int) -> dict:
    frames = [_jpeg(56, 84, seed + i).split(",", 1)[1] for i in range(count)]
    return {"type": "video_url", "video_url": {"url": "data:video/jpeg;base64," + ",".join(frames)}}


def _truncated_png() -> str:
    data = base64.b64decode(_png(64, 48, 1).split(",", 1)[1])
    return "data:image/png;base64," + base64.b64encode(data[: len(data) // 2]).decode()


def _image(url: str, **extra: Any) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}, **extra}


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _post(side: Side, messages: list[Any], **extra: Any) -> httpx.Response:
    body = {"messages": messages, "max_tokens": 3, **extra}
    return httpx.post(side.url + "/v1/chat/completions", json=body, timeout=120)


REQUESTS = {
    "one image": [{"role": "user", "content": [_image(_png(64, 48, 1)), _text("What is it?")]}],
    "sizes and interleaved text": [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                _text("First:"),
                _image(_png(300, 200, 2)),
                _text("then"),
                _image(_jpeg(97, 431, 3)),
                _text("and"),
                _image(_png(20, 20, 4, "L")),
            ],
        },
    ],
    "repeated image": [
        {"role": "user", "content": [_image(_png(64, 48, 1)), _image(_png(64, 48, 1))]},
        {"role": "assistant", "content": "Two."},
        {"role": "user", "content": [_text("Again"), _image(_png(300, 200, 2))]},
    ],
    "uuid": [{"role": "user", "content": [_image(_png(50, 90, 5), uuid="my-image")]}],
    "transparent": [{"role": "user", "content": [_image(_png(70, 30, 6, "RGBA"))]}],
    "string content": [{"role": "user", "content": "No image here."}],
    "video": [{"role": "user", "content": [_video(24, 8.0, (96, 64)), _text("What happens?")]}],
    "videos and images": [
        {
            "role": "user",
            "content": [
                _image(_png(64, 48, 1)),
                _video(10, 5.0, (160, 90), "MJPG"),
                _text("and"),
                _video(7, 30.0, (50, 70)),
                _image(_jpeg(97, 431, 3)),
            ],
        }
    ],
    "jpeg frames": [{"role": "user", "content": [_jpeg_frames(5, 40), _text("Frames.")]}],
    "video uuid": [
        {"role": "user", "content": [{**_video(12, 6.0, (64, 64)), "uuid": "my-video"}]}
    ],
}


# What vLLM sent for each item hash (its later requests send data=None for them).
_SENT: dict[str, Any] = {}


@pytest.mark.parametrize("name", list(REQUESTS))
def test_engine_requests_equal(sides: dict[str, Side], name: str) -> None:
    cached = _SENT
    for _ in range(2):  # the second time, vLLM's sender cache has the items
        responses = {k: _post(side, REQUESTS[name]) for k, side in sides.items()}
        assert responses["ours"].status_code == responses["vllm"].status_code == 200
        [vllm] = sides["vllm"].new_requests()
        [ours] = sides["ours"].new_requests()
        compare_requests(vllm, ours, cached)


def test_reset_mm_cache_clears_the_mirror_as_vllm(sides: dict[str, Side]) -> None:
    # After /reset_mm_cache (VLLM_SERVER_DEV_MODE), both frontends send held items with their
    # data again: vLLM clears its sender cache before the engine's.
    messages = [{"role": "user", "content": [_image(_png(40, 30, 77)), _video(6, 3.0, (48, 40))]}]
    for reset in (False, True):
        if reset:
            for side in sides.values():
                response = httpx.post(side.url + "/reset_mm_cache", timeout=60)
                assert response.status_code == 200, response.text
        for _ in range(2):
            responses = {k: _post(side, messages) for k, side in sides.items()}
            assert responses["ours"].status_code == responses["vllm"].status_code == 200
        vllm = sides["vllm"].new_requests()
        ours = sides["ours"].new_requests()
        assert len(vllm) == len(ours) == 2
        for theirs, mine in zip(vllm, ours, strict=True):
            compare_requests(theirs, mine, _SENT)
        # The first of the two carries every item's data, the second none.
        assert all(f.data is not None for f in ours[0].mm_features)
        assert all(f.data is None for f in ours[1].mm_features)


# A request's template that reads each message's content as a string: vLLM's "string" content
# format, where each media part stands as its placeholder text in its place
# (--interleave-mm-strings; without it, in front of the message's text).
STRING_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
STRING_FORMAT = {
    "interleaved": [
        {
            "role": "user",
            "content": [
                _text("a"),
                _image(_png(40, 30, 500)),
                _text("b"),
                _video(4, 2.0, (32, 32)),
            ],
        },
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [_text(""), _image(_png(41, 30, 501)), _text("")]},
    ],
    "the marker typed in a text": [
        {"role": "user", "content": [_text("see <##IMAGE##> here"), _image(_png(42, 30, 502))]}
    ],
    "a lone marker takes an item's place": [
        {"role": "user", "content": [_text("<##IMAGE##>"), _image(_png(43, 30, 503))]}
    ],
    "a placeholder typed in a text": [
        {
            "role": "user",
            "content": [
                _text("x <|vision_start|><|image_pad|><|vision_end|>"),
                _image(_png(44, 30, 504)),
            ],
        }
    ],
}


@pytest.mark.parametrize("name", list(STRING_FORMAT))
def test_string_format_requests_equal(sides: dict[str, Side], name: str) -> None:
    messages = STRING_FORMAT[name]
    responses = {
        k: _post(side, messages, chat_template=STRING_TEMPLATE) for k, side in sides.items()
    }
    assert responses["ours"].status_code == responses["vllm"].status_code
    if responses["vllm"].status_code != 200:
        assert responses["ours"].json() == responses["vllm"].json()
        return
    [vllm] = sides["vllm"].new_requests()
    [ours] = sides["ours"].new_requests()
    compare_requests(vllm, ours, _SENT)


@pytest.mark.parametrize("key", ["mm_processor_kwargs", "media_io_kwargs"])
def test_request_mm_kwargs_refused_as_vllm(sides: dict[str, Side], key: str) -> None:
    # Without --trust-request-mm-kwargs (not taken by this frontend yet).
    value = {"max_pixels": 20000} if key == "mm_processor_kwargs" else {"image": {"x": 1}}
    messages = REQUESTS["one image"]
    responses = {k: _post(side, messages, **{key: value}) for k, side in sides.items()}
    assert responses["ours"].status_code == responses["vllm"].status_code == 400
    assert responses["ours"].json() == responses["vllm"].json()


BAD = {
    "truncated png": [{"role": "user", "content": [_image(_truncated_png())]}],
    "bad base64": [{"role": "user", "content": [_image("data:image/png;base64,aGVsbG8gd29ybGQ")]}],
    "not an image": [
        {"role": "user", "content": [_image("data:image/png;base64," + "aGVsbG8gd29ybGQ=")]}
    ],
    "too many images": [{"role": "user", "content": [_image(_png(8 + i, 8, i)) for i in range(4)]}],
    "video": [{"role": "user", "content": [{"type": "video_url", "video_url": {"url": "x"}}]}],
    "too many videos": [
        {"role": "user", "content": [_video(4, 4.0, (32, 32 + 2 * i)) for i in range(3)]}
    ],
    # Untrusted media: an empty URL (no media, no uuid), an aspect ratio transformers'
    # processor refuses (alone and beside a good image), an SVG, the urlsafe base64 alphabet.
    "empty url": [{"role": "user", "content": [_image("")]}],
    "4000x1": [{"role": "user", "content": [_image(_png(4000, 1, 7))]}],
    "1x4000 after a good image": [
        {"role": "user", "content": [_image(_png(30, 20, 8, "RGBA")), _image(_png(1, 4000, 9))]}
    ],
    "svg": [{"role": "user", "content": [_image("data:image/svg+xml;base64,PHN2Zy8+")]}],
    "urlsafe base64": [
        {"role": "user", "content": [_image(_png(40, 40, 10).replace("+", "-").replace("/", "_"))]}
    ],
    # Audio to a model without audio.
    "input_audio": [
        {"role": "user", "content": [{"type": "input_audio",
                                      "input_audio": {"data": "AAAA", "format": "wav"}}]}
    ],
    "audio_url": [
        {"role": "user", "content": [{"type": "audio_url",
                                      "audio_url": {"url": "data:audio/wav;base64,AAAA"}}]}
    ],
    # Part shapes vLLM's request model or chat parser refuses (pydantic's reports): alone in
    # their message (OpenAI's message branch reads the parts) or beside text (the custom-role
    # branch does, and vLLM's parser validates the typed URL parts).
    "image_url as a string": [
        {"role": "user", "content": [{"type": "image_url", "image_url": _png(9, 9, 20)}]}
    ],
    "image_url without url": [
        {"role": "user", "content": [{"type": "image_url", "image_url": {}}]}
    ],
    "image_url without url, beside text": [
        {"role": "user", "content": [_text("Hi"), {"type": "image_url", "image_url": {}}]}
    ],
    "video_url as a string": [
        {"role": "user", "content": [{"type": "video_url", "video_url": "x"}]}
    ],
    "video_url without url": [
        {"role": "user", "content": [{"type": "video_url", "video_url": {}}]}
    ],
    "input_image without detail": [
        {"role": "user", "content": [_text("Hi"),
                                     {"type": "input_image", "image_url": _png(9, 9, 21)}]}
    ],
    "input_image with a bad detail": [
        {"role": "user", "content": [{"type": "input_image", "image_url": _png(9, 9, 22),
                                      "detail": "x"}]}
    ],
    "no type, image_url an object": [{"role": "user", "content": [{"image_url": {"url": "x"}}]}],
    "text not a string": [{"role": "user", "content": [{"type": "text", "text": 5}]}],
}  # fmt: skip


def _junk_image() -> dict[str, Any]:
    return _image("data:image/png;base64," + base64.b64encode(b"not an image").decode())


def _junk_video() -> dict[str, Any]:
    url = "data:video/mp4;base64," + base64.b64encode(b"not a video").decode()
    return {"type": "video_url", "video_url": {"url": url}}


def _slowly_failing_png() -> dict[str, Any]:
    # A large PNG cut in half: it fails only once half of it is decoded (tens of ms).
    data = base64.b64decode(_png(1600, 1200, 23).split(",", 1)[1])
    return _image("data:image/png;base64," + base64.b64encode(data[: len(data) // 2]).decode())


# Several parts that cannot be loaded, or one beside a part that names nothing: vLLM loads every
# item, then raises the error of the first failed one in its tracker's order (items grouped by
# modality, groups in the order of their first item), whichever failed first; only then does it
# refuse a part with neither data nor uuid.
BAD_LOADS = {
    "a slowly failing image, then one failing at once": [
        {"role": "user", "content": [_slowly_failing_png(), _junk_image()]}
    ],
    "an image, a bad video, a bad image": [
        {"role": "user", "content": [_image(_png(30, 20, 24)), _junk_video(), _junk_image()]}
    ],
    "an empty url, then a bad image": [
        {"role": "user", "content": [_image(""), _text("and"), _junk_image()]}
    ],
}


@pytest.mark.parametrize("name", list(BAD_LOADS))
def test_the_first_failed_load_in_vllms_order_is_the_answer(
    sides: dict[str, Side], name: str
) -> None:
    responses = {k: _post(side, BAD_LOADS[name]) for k, side in sides.items()}
    assert responses["ours"].status_code == responses["vllm"].status_code == 400
    assert responses["ours"].json() == responses["vllm"].json()
    for side in sides.values():
        assert side.new_requests() == []


RAISING_TEMPLATE = "{{ raise_exception('no template for you') }}"


@pytest.mark.parametrize("route", ["/v1/chat/completions", "/tokenize"])
@pytest.mark.parametrize("image", ["bad", "good"])
def test_media_is_loaded_before_the_template_fails_as_vllm(
    sides: dict[str, Side], route: str, image: str
) -> None:
    # vLLM loads a chat request's media before it applies the chat template: a part that
    # cannot be loaded is the answer, not the template's error (the answer when all load).
    part = _junk_image() if image == "bad" else _image(_png(30, 20, 25))
    body = {
        "messages": [{"role": "user", "content": [part, _text("Hi")]}],
        "chat_template": RAISING_TEMPLATE,
    }
    responses = {
        k: httpx.post(side.url + route, json=body, timeout=120) for k, side in sides.items()
    }
    assert responses["ours"].status_code == responses["vllm"].status_code == 400
    assert responses["ours"].json() == responses["vllm"].json()
    message = responses["vllm"].json()["error"]["message"]
    assert message.startswith("Failed to load image") == (image == "bad"), message
    for side in sides.values():
        assert side.new_requests() == []


@pytest.mark.parametrize("name", list(BAD))
def test_bad_input_answers_as_vllm(sides: dict[str, Side], name: str) -> None:
    responses = {k: _post(side, BAD[name]) for k, side in sides.items()}
    assert responses["ours"].status_code == responses["vllm"].status_code
    assert responses["ours"].json() == responses["vllm"].json()
    for side in sides.values():
        assert side.new_requests() == []


@pytest.mark.parametrize("detail", ["bogus", None, 3])
def test_an_unknown_image_detail_is_refused_as_vllm_refuses_it(
    sides: dict[str, Side], detail: Any
) -> None:
    # Alone in its message, OpenAI's message branch reads the part (pydantic's report over
    # its part types); beside text, vLLM's chat parser validates it (its one-error report).
    part = {"type": "image_url", "image_url": {"url": _png(20, 20, 13), "detail": detail}}
    for content in ([part], [_text("Hi"), part]):
        messages = [{"role": "user", "content": content}]
        responses = {k: _post(side, messages) for k, side in sides.items()}
        assert responses["ours"].status_code == responses["vllm"].status_code == 400
        theirs = responses["vllm"].json()["error"]
        assert "Input should be 'auto', 'low', 'high' or 'original'" in theirs["message"]
        assert responses["ours"].json() == responses["vllm"].json()
    for side in sides.values():
        assert side.new_requests() == []
    for detail in ("auto", "low", "high", "original"):
        part["image_url"]["detail"] = detail  # type: ignore[index]
        good = {k: _post(side, [{"role": "user", "content": [part]}]) for k, side in sides.items()}
        assert good["ours"].status_code == good["vllm"].status_code == 200
    for side in sides.values():
        side.new_requests()


def _bomb() -> str:
    # A valid 30000 x 30000 PNG in a few KB: Pillow refuses to decode it.
    from tests.multimodal.media.images import png_declaring

    return "data:image/png;base64," + base64.b64encode(png_declaring(30000, 30000)).decode()


def test_a_decompression_bomb_is_a_400_with_vllms_message(sides: dict[str, Side]) -> None:
    # vLLM answers 500 (Pillow's DecompressionBombError reaches its error handler); the
    # request is at fault, so ours answers 400 with the same message. Nothing reaches the
    # engines, and both go on serving.
    messages = [{"role": "user", "content": [_image(_bomb()), _text("What?")]}]
    responses = {k: _post(side, messages) for k, side in sides.items()}
    theirs, ours = responses["vllm"].json()["error"], responses["ours"].json()["error"]
    assert responses["vllm"].status_code == 500 and theirs["type"] == "InternalServerError"
    assert responses["ours"].status_code == 400
    assert ours == {**theirs, "type": "BadRequestError", "code": 400}
    assert "could be decompression bomb" in ours["message"]
    for side in sides.values():
        assert side.new_requests() == []
    good = {k: _post(side, REQUESTS["one image"]) for k, side in sides.items()}
    assert good["ours"].status_code == good["vllm"].status_code == 200
    for side in sides.values():
        side.new_requests()


def _agent_requests(side: Side, url: str) -> dict[str, httpx.Response]:
    """The image at ``url`` sent as a Responses ``input_image`` and, base64 ``data:`` URLs
    only, as an Anthropic Messages ``image`` block."""
    model = httpx.get(side.url + "/v1/models", timeout=30).json()["data"][0]["id"]
    image = {"type": "input_image", "image_url": url}
    body = {"model": model, "input": [{"role": "user", "content": [image]}]}
    out = {
        "responses": httpx.post(
            side.url + "/v1/responses", json={**body, "max_output_tokens": 3}, timeout=120
        )
    }
    if url.startswith("data:") and ";base64," in url:
        media_type, data = url[5:].split(";base64,", 1)
        block = {"type": "image", "source": {"type": "base64", "media_type": media_type,
                                             "data": data}}  # fmt: skip
        out["messages"] = httpx.post(
            side.url + "/v1/messages",
            json={"model": model, "max_tokens": 3,
                  "messages": [{"role": "user", "content": [block]}]},
            timeout=120,
        )  # fmt: skip
    return out


AGENT_BAD = {
    "truncated png": _truncated_png(),
    "bad padding": "data:image/png;base64,abc",
    "urlsafe base64": _png(40, 40, 11).replace("+", "-").replace("/", "_"),
    "4000x1": _png(4000, 1, 12),
    "empty url": "",
    "unknown scheme": "ftp://example.com/a.png",
}


@pytest.mark.parametrize("name", list(AGENT_BAD))
def test_bad_images_through_the_agent_apis_answer_as_vllm(
    sides: dict[str, Side], name: str
) -> None:
    answers = {k: _agent_requests(side, AGENT_BAD[name]) for k, side in sides.items()}
    assert answers["ours"].keys() == answers["vllm"].keys()
    for api, theirs in answers["vllm"].items():
        ours = answers["ours"][api]
        assert theirs.status_code == 400, (api, theirs.text)
        assert (ours.status_code, ours.json()) == (theirs.status_code, theirs.json()), api
    for side in sides.values():
        assert side.new_requests() == []


TOKENIZE = {
    "one image": {"messages": REQUESTS["one image"]},
    "images and videos, token strings": {
        "messages": REQUESTS["videos and images"],
        "return_token_strs": True,
    },
    "special tokens, no generation prompt": {
        "messages": REQUESTS["repeated image"],
        "add_special_tokens": True,
        "add_generation_prompt": False,
    },
    "longer than the context once expanded": {
        "messages": [{"role": "user", "content": [_image(_png(64, 48, 1)), _text("hi " * 2100)]}]
    },
    "too many images": {"messages": BAD["too many images"]},
    "not an image": {"messages": BAD["not an image"]},
    "mm_processor_kwargs": {
        "messages": REQUESTS["one image"],
        "mm_processor_kwargs": {"max_pixels": 20000},
    },
    "media_io_kwargs without media": {
        "messages": REQUESTS["string content"],
        "media_io_kwargs": {"image": {"image_mode": "L"}},
    },
}


@pytest.mark.parametrize("name", list(TOKENIZE))
def test_tokenize_with_media_answers_as_vllm(sides: dict[str, Side], name: str) -> None:
    # /tokenize expands each item's placeholder as generation does (vLLM's preprocess_chat).
    responses = {
        k: httpx.post(side.url + "/tokenize", json=TOKENIZE[name], timeout=120)
        for k, side in sides.items()
    }
    assert responses["ours"].status_code == responses["vllm"].status_code
    assert responses["ours"].json() == responses["vllm"].json()


def test_tokenize_leaves_the_engine_cache_alone_as_vllm(sides: dict[str, Side]) -> None:
    # vLLM's /tokenize sends nothing: a chat request after it carries the image's data.
    messages = [{"role": "user", "content": [_image(_png(52, 44, 91)), _text("Now?")]}]
    for side in sides.values():
        response = httpx.post(side.url + "/tokenize", json={"messages": messages}, timeout=120)
        assert response.status_code == 200, response.text
        assert side.new_requests() == []
    responses = {k: _post(side, messages) for k, side in sides.items()}
    assert responses["ours"].status_code == responses["vllm"].status_code == 200
    [vllm] = sides["vllm"].new_requests()
    [ours] = sides["ours"].new_requests()
    compare_requests(vllm, ours, _SENT)
    assert all(feature.data is not None for feature in ours.mm_features)


def test_output_budget_counts_the_placeholders(sides: dict[str, Side]) -> None:
    # 2048-token context: the expanded prompt (~150 tokens) leaves less than 2000 for output,
    # and a max_tokens beyond the context is refused.
    messages = REQUESTS["one image"]
    for max_tokens in (2000, 1900, 4096):
        responses = {k: _post(side, messages, max_tokens=max_tokens) for k, side in sides.items()}
        assert responses["ours"].status_code == responses["vllm"].status_code
        if responses["vllm"].status_code != 200:
            assert responses["ours"].json() == responses["vllm"].json()
            continue
        [vllm] = sides["vllm"].new_requests()
        [ours] = sides["ours"].new_requests()
        assert ours.sampling_params.max_tokens == vllm.sampling_params.max_tokens
        compare_requests(vllm, ours, _SENT)


def test_memory_stays_flat_over_many_image_requests(sides: dict[str, Side]) -> None:
    import psutil

    side = sides["ours"]
    process = psutil.Process(side.processes[0].pid)

    def burst(first_seed: int, count: int) -> None:
        for seed in range(first_seed, first_seed + count):
            content = [_image(_jpeg(640, 480, seed * 3 + k)) for k in range(3)]
            response = _post(side, [{"role": "user", "content": content}])
            assert response.status_code == 200

    burst(1000, 20)  # warm-up: pools, caches, allocator arenas
    side.new_requests()
    before = process.memory_info().rss
    burst(2000, 60)  # ~110 MB of pixel tensors: kept, they would show
    side.new_requests()
    growth = process.memory_info().rss - before
    assert growth < 40 * 2**20, growth


@pytest.mark.parametrize("keep", [5, 40, 120, 200, 400, -1])
@pytest.mark.parametrize("side", [None, "right"])
def test_truncation_keeps_items_whole_as_vllm(
    sides: dict[str, Side], keep: int, side: str | None
) -> None:
    # truncate_prompt_tokens cuts the text before placeholders expand; once expanded, a bound
    # that would cut or drop an item is refused, and one that keeps them all cuts text only.
    # Fresh images per case: vLLM's sender cache records the items of a request it then
    # refuses (a later request would send them without data, though the engine never got them).
    seed = 1000 + 10 * keep + (side is None)
    messages = [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                _text("First:"),
                _image(_png(300, 200, seed)),
                _text("then"),
                _image(_jpeg(97, 431, seed + 1)),
            ],
        },
    ]
    extra: dict[str, Any] = {"truncate_prompt_tokens": keep}
    if side is not None:
        extra["truncation_side"] = side
    responses = {k: _post(side_, messages, **extra) for k, side_ in sides.items()}
    theirs, ours = responses["vllm"], responses["ours"]
    if theirs.status_code == 500:
        # The text cut before expansion dropped a placeholder: vLLM's processor fails an
        # assertion (500); ours answers the same message as the client's error it is.
        assert ours.status_code == 400
        assert ours.json()["error"]["message"] == theirs.json()["error"]["message"]
    else:
        assert (ours.status_code, ours.json() if ours.status_code != 200 else None) == (
            theirs.status_code,
            theirs.json() if theirs.status_code != 200 else None,
        )
    if theirs.status_code != 200:
        assert sides["ours"].new_requests() == sides["vllm"].new_requests() == []
        return
    [vllm] = sides["vllm"].new_requests()
    [mine] = sides["ours"].new_requests()
    compare_requests(vllm, mine, _SENT)


# --- Precomputed embeddings (--enable-mm-embeds on both sides) ---------------------------------

HIDDEN = 128
"""The tiny Qwen2-VL's text hidden size (what an embedding row must have)."""


def _tensor(data: Any) -> tuple[str, tuple[int, ...], np.ndarray]:
    return data.dtype, tuple(data.shape), np.asarray(data.numpy())


def _npy(array: np.ndarray) -> str:
    buf = io.BytesIO()
    np.save(buf, array)
    return base64.b64encode(buf.getvalue()).decode()


def _torch_saved(array: np.ndarray, dtype: str) -> str:
    import torch

    buf = io.BytesIO()
    torch.save(torch.from_numpy(array).to(getattr(torch, dtype)), buf)
    return base64.b64encode(buf.getvalue()).decode()


def _rows(count: int, seed: int, width: int = HIDDEN) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((count, width)).astype(np.float32)


def _embeds(rows: Any, grid: Any, modality: str = "image", **extra: Any) -> dict[str, Any]:
    """A Qwen2-VL embeddings part: ``rows`` (an array, or a base64 payload) with its grid."""
    values = _npy(rows) if isinstance(rows, np.ndarray) else rows
    payload = {f"{modality}_embeds": values, f"{modality}_grid_thw": grid}
    return {"type": f"{modality}_embeds", f"{modality}_embeds": payload, **extra}


def _embeds_requests() -> dict[str, list[Any]]:
    user = "user"
    return {
        "image embeds": [
            {"role": user, "content": [_text("What?"), _embeds(_rows(4, 1), [1, 4, 4])]}
        ],
        "sizes, interleaved": [
            {"role": "system", "content": "Be brief."},
            {
                "role": user,
                "content": [
                    _embeds(_rows(4, 2), [1, 4, 4]),
                    _text("and"),
                    _embeds(_rows(6, 3), [1, 4, 6]),
                    _text("then"),
                    _embeds(_rows(9, 4), [1, 6, 6]),
                ],
            },
        ],
        "uuid": [{"role": user, "content": [_embeds(_rows(4, 5), [1, 4, 4], uuid="emb-1")]}],
        "rows past the grid": [{"role": user, "content": [_embeds(_rows(7, 6), [1, 4, 4])]}],
        "grid as a base64 int32 tensor": [
            {"role": user, "content": [_embeds(_rows(4, 7), _npy(np.array([1, 4, 4], np.int32)))]}
        ],
        "bfloat16 torch.save": [
            {"role": user, "content": [_embeds(_torch_saved(_rows(4, 8), "bfloat16"), [1, 4, 4])]}
        ],
        "float16 npy": [
            {"role": user, "content": [_embeds(_rows(4, 9).astype(np.float16), [1, 4, 4])]}
        ],
        "video embeds with an image": [
            {
                "role": user,
                "content": [
                    _image(_png(33, 57, 901)),
                    _embeds(_rows(8, 10), [2, 4, 4], "video"),
                    _text("So?"),
                ],
            }
        ],
    }


def _embeds_hashes(data: dict[str, Any], model: str) -> list[str]:
    """An embeddings item's possible vLLM hashes: its fields (as vLLM's ``DictEmbeddingItems``
    item) in either order, vLLM's taking a set's order (which varies with the process's string
    hash seed). The first is the order the family declares (values, then metadata)."""
    import itertools

    import torch
    from vllm.multimodal.hasher import MultiModalHasher

    tensors = {}
    for key, elem in data.items():
        dtype, _, values = _tensor(elem.data)
        tensor = torch.from_numpy(np.array(values))
        tensors[key] = tensor.bfloat16() if dtype == "bfloat16" else tensor
    modality = next(k for k in tensors if k.endswith("_embeds")).removesuffix("_embeds")
    keys = sorted(tensors, key=lambda k: not k.endswith("_embeds"))
    return [
        MultiModalHasher.hash_kwargs(
            "blake3", model_id=model, **{modality: {k: tensors[k] for k in order}}
        )
        for order in itertools.permutations(keys)
    ]


def _compare_embeds(vllm: Any, ours: Any) -> None:
    """As :func:`_compare` for a request with embeddings (every item carries its data), with
    an embeddings item's hash checked against vLLM's hasher."""
    assert ours.prompt_token_ids == vllm.prompt_token_ids
    assert len(ours.mm_features) == len(vllm.mm_features)
    model = str(tiny_vlm_dir())
    for theirs, mine in zip(vllm.mm_features, ours.mm_features, strict=True):
        assert mine.modality == theirs.modality
        assert (mine.mm_position.offset, mine.mm_position.length) == (
            theirs.mm_position.offset,
            theirs.mm_position.length,
        )
        assert mine.mm_position.is_embed is None and theirs.mm_position.is_embed is None
        assert mine.data is not None and theirs.data is not None
        assert set(mine.data) == set(theirs.data)
        for key, elem in theirs.data.items():
            got = mine.data[key]
            assert got.field == elem.field, key
            want_dtype, want_shape, want = _tensor(elem.data)
            got_dtype, got_shape, values = _tensor(got.data)
            assert (got_dtype, got_shape) == (want_dtype, want_shape), key
            assert np.array_equal(values, want), key
        if not any(k.endswith("_embeds") for k in theirs.data) or theirs.mm_hash == "emb-1":
            assert (mine.identifier, mine.mm_hash) == (theirs.identifier, theirs.mm_hash)
            continue
        declared, *others = _embeds_hashes(mine.data, model)
        assert theirs.mm_hash in (declared, *others)
        assert mine.mm_hash == mine.identifier == declared


EMBEDS_REQUESTS = [
    "image embeds",
    "sizes, interleaved",
    "uuid",
    "rows past the grid",
    "grid as a base64 int32 tensor",
    "bfloat16 torch.save",
    "float16 npy",
    "video embeds with an image",
]
"""The cases of :func:`_embeds_requests` (built when run: one imports torch)."""


@pytest.mark.parametrize("name", EMBEDS_REQUESTS)
def test_embeds_requests_equal(sides: dict[str, Side], name: str) -> None:
    # vLLM's hasher and torch.save give the expected hashes and payloads (an engine module:
    # the test process may import them).
    requests = _embeds_requests()
    assert sorted(requests) == sorted(EMBEDS_REQUESTS)
    messages = requests[name]
    for _ in range(2):  # vLLM's processor bypasses its cache for these: data both times
        responses = {k: _post(side, messages) for k, side in sides.items()}
        assert responses["ours"].status_code == responses["vllm"].status_code == 200, (
            responses["ours"].text,
            responses["vllm"].text,
        )
        [vllm] = sides["vllm"].new_requests()
        [ours] = sides["ours"].new_requests()
        _compare_embeds(vllm, ours)


def test_items_sent_beside_embeds_are_held_by_the_engine(sides: dict[str, Side]) -> None:
    # Ours, not vLLM's: vLLM's sender cache records nothing of a request with embeddings,
    # though its engine keeps every item of it; our mirror records them as the engine does, so
    # a later request with the same image sends it without data (vLLM sends it again).
    image = _image(_png(41, 23, 902))
    first = [{"role": "user", "content": [image, _embeds(_rows(4, 11), [1, 4, 4], "video")]}]
    later = [{"role": "user", "content": [image]}]
    for messages in (first, later):
        responses = {k: _post(side, messages) for k, side in sides.items()}
        assert responses["ours"].status_code == responses["vllm"].status_code == 200
    vllm = sides["vllm"].new_requests()
    ours = sides["ours"].new_requests()
    assert [f.mm_hash for f in ours[1].mm_features] == [f.mm_hash for f in vllm[1].mm_features]
    assert vllm[1].mm_features[0].data is not None
    assert ours[1].mm_features[0].data is None


def _normalized(body: dict[str, Any]) -> dict[str, Any]:
    # vLLM names sets of fields in the order of a Python set (it varies between processes).
    import re

    def sort(match: re.Match[str]) -> str:
        return "{" + ", ".join(sorted(match.group(1).split(", "))) + "}"

    message = re.sub(r"\{('[^{}]*')\}", sort, body["error"]["message"])
    return {**body, "error": {**body["error"], "message": message}}


def _bad_embeds() -> dict[str, list[Any]]:
    def user(*parts: Any) -> list[Any]:
        return [{"role": "user", "content": [*parts, _text("Hi")]}]

    grid = [1, 4, 4]
    values = _npy(_rows(4, 1))
    extra = {"image_embeds": values, "image_grid_thw": grid, "x": _npy(np.zeros(2))}
    return {
        "bad base64": user(_embeds("!!!", grid)),
        "no grid": user({"type": "image_embeds", "image_embeds": {"image_embeds": values}}),
        "no embeddings": user({"type": "image_embeds", "image_embeds": {"image_grid_thw": grid}}),
        "grid of floats": user(_embeds(_rows(4, 1), [1.0, 4, 4])),
        "nested grid": user(_embeds(_rows(4, 1), [[1, 4, 4]])),
        "2-D grid tensor": user(_embeds(_rows(4, 1), _npy(np.array([[1, 4, 4]])))),
        "embeddings as a JSON array": user(_embeds([0.5, 1.5], grid)),
        "different keys": user(
            _embeds(_rows(4, 1), grid),
            {"type": "image_embeds", "image_embeds": extra},
        ),
        "mixed with an image": user(_image(_png(64, 48, 1)), _embeds(_rows(4, 1), grid)),
        "too many": user(*[_embeds(_rows(4, i), grid) for i in range(4)]),
        "audio embeds": user({"type": "audio_embeds", "audio_embeds": _npy(_rows(4, 1))}),
        "an empty dictionary": user({"type": "image_embeds", "image_embeds": {}}),
    }  # fmt: skip


@pytest.mark.parametrize("name", list(_bad_embeds()))
def test_bad_embeds_answer_as_vllm(sides: dict[str, Side], name: str) -> None:
    messages = _bad_embeds()[name]
    responses = {k: _post(side, messages) for k, side in sides.items()}
    assert responses["ours"].status_code == responses["vllm"].status_code == 400
    assert _normalized(responses["ours"].json()) == _normalized(responses["vllm"].json())
    for side in sides.values():
        assert side.new_requests() == []


def _refused_by_us() -> dict[str, tuple[list[Any], int]]:
    # What vLLM answers 500 for (its processor fails), or passes to the engine though the
    # engine cannot use it (a wrong rank or hidden size, a negative or malformed grid, fewer
    # rows than placeholders): ours answers 400 and sends nothing. (request, vLLM's status)
    def user(*parts: Any) -> list[Any]:
        return [{"role": "user", "content": [*parts]}]

    bare = {"type": "image_embeds", "image_embeds": _npy(_rows(4, 1)[None])}
    return {
        "not a tensor": (user(_embeds(base64.b64encode(b"hello world").decode(), [1, 4, 4])), 500),
        "grid of no tokens": (user(_embeds(_rows(1, 1), [1, 1, 1])), 500),
        "bare 3-D tensor": (user(bare), 500),
        "hidden size": (user(_embeds(_rows(4, 1, 64), [1, 4, 4])), 200),
        "1-D embeddings": (user(_embeds(_rows(1, 1)[0], [1, 4, 4])), 200),
        "negative grid": (user(_embeds(_rows(4, 1), [-1, 4, -4])), 200),
        "grid of 4": (user(_embeds(_rows(4, 1), [1, 4, 4, 1])), 200),
        "rows short of the grid": (user(_embeds(_rows(3, 1), [1, 4, 4])), 200),
    }  # fmt: skip


@pytest.mark.parametrize("name", list(_refused_by_us()))
def test_embeds_vllm_cannot_serve_get_400(sides: dict[str, Side], name: str) -> None:
    messages, vllm_status = _refused_by_us()[name]
    responses = {k: _post(side, messages) for k, side in sides.items()}
    assert responses["vllm"].status_code == vllm_status
    assert responses["ours"].status_code == 400, responses["ours"].text
    assert responses["ours"].json()["error"]["type"] == "BadRequestError"
    assert sides["ours"].new_requests() == []
    sides["vllm"].new_requests()


# --- Token-in/token-out and render (--enable-scale-out on both sides) ---------------------------

IMAGE_PAD = "<|vision_start|><|image_pad|><|vision_end|>"
VIDEO_PAD = "<|vision_start|><|video_pad|><|vision_end|>"


def _token_ids(side: Side, text: str) -> list[int]:
    body = {"prompt": text, "add_special_tokens": False}
    response = httpx.post(side.url + "/tokenize", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()["tokens"]


def _generate(side: Side, body: dict[str, Any]) -> httpx.Response:
    body = {"sampling_params": {"max_tokens": 2}, **body}
    return httpx.post(side.url + "/inference/v1/generate", json=body, timeout=120)


def _part(kind: str, url: str | None, uuid: str | None = None) -> dict[str, Any]:
    part: dict[str, Any] = {"type": kind}
    if url is not None:
        part["url"] = url
    if uuid is not None:
        part["uuid"] = uuid
    return part


def _video_url(frames: int, fps: float, size: tuple[int, int]) -> str:
    return "data:video/mp4;base64," + base64.b64encode(make_video(frames, fps, size)).decode()


CONTENT_PARTS = {
    "one image": (
        f"User: {IMAGE_PAD}What is it?",
        [_part("image_url", _png(64, 48, 301))],
    ),
    "images, a video, uuids, a skipped part": (
        f"{IMAGE_PAD} and {VIDEO_PAD} then {IMAGE_PAD}.",
        [
            _part("image_url", _png(300, 200, 302), "gen-image"),
            {"type": "text", "text": "ignored"},
            _part("video_url", _video_url(10, 5.0, (64, 48))),
            _part("image_url", _jpeg(97, 131, 303)),
        ],
    ),
    "repeated image": (
        f"{IMAGE_PAD}{IMAGE_PAD}",
        [_part("image_url", _png(40, 40, 304)), _part("image_url", _png(40, 40, 304))],
    ),
}


@pytest.mark.parametrize("name", list(CONTENT_PARTS))
def test_generate_content_parts_engine_requests_equal(sides: dict[str, Side], name: str) -> None:
    # vLLM's ServingTokens renders a token prompt with media: each item's placeholder token
    # expanded, the items hashed, processed and sent (without data once the engine holds them).
    text, parts = CONTENT_PARTS[name]
    token_ids = _token_ids(sides["vllm"], text)
    assert _token_ids(sides["ours"], text) == token_ids
    body = {"token_ids": token_ids, "content_parts": parts, "return_token_ids": True}
    for _ in range(2):
        responses = {k: _generate(side, body) for k, side in sides.items()}
        assert responses["ours"].status_code == responses["vllm"].status_code == 200
        theirs, mine = responses["vllm"].json(), responses["ours"].json()
        assert mine["prompt_token_ids"] == theirs["prompt_token_ids"]
        assert mine["mm_placeholders"] == theirs["mm_placeholders"]
        assert mine["usage"] == theirs["usage"]
        [vllm] = sides["vllm"].new_requests()
        [ours] = sides["ours"].new_requests()
        assert ours.sampling_params.max_tokens == vllm.sampling_params.max_tokens
        compare_requests(vllm, ours, _SENT)


def test_generate_content_parts_stream_first_chunk_as_vllm(sides: dict[str, Side]) -> None:
    token_ids = _token_ids(sides["vllm"], f"{IMAGE_PAD}Hi")
    parts = [_part("image_url", _png(50, 30, 310))]
    body = {"token_ids": token_ids, "content_parts": parts, "return_token_ids": True}
    firsts = {}
    for key, side in sides.items():
        with httpx.stream(
            "POST",
            side.url + "/inference/v1/generate",
            json={"sampling_params": {"max_tokens": 2}, "stream": True, **body},
            timeout=120,
        ) as response:
            assert response.status_code == 200
            lines = [line for line in response.iter_lines() if line.startswith("data: {")]
        firsts[key] = json.loads(lines[0].removeprefix("data: "))
    for field in ("prompt_token_ids", "mm_placeholders"):
        assert firsts["ours"][field] == firsts["vllm"][field]
    [vllm] = sides["vllm"].new_requests()
    [ours] = sides["ours"].new_requests()
    compare_requests(vllm, ours, _SENT)


BAD_CONTENT_PARTS = {
    "no placeholder": ("No image here.", [_part("image_url", _png(30, 30, 320))]),
    "too few placeholders": (IMAGE_PAD, [_part("image_url", _png(30, 31, 321))] * 2),
    "too many images": (
        IMAGE_PAD * 4,
        [_part("image_url", _png(30, 32 + i, 322)) for i in range(4)],
    ),
    "truncated png": (IMAGE_PAD, [_part("image_url", _truncated_png())]),
    "empty url": (IMAGE_PAD, [_part("image_url", "")]),
    "4000x1": (IMAGE_PAD, [_part("image_url", _png(4000, 1, 323))]),
}


@pytest.mark.parametrize("name", list(BAD_CONTENT_PARTS))
def test_generate_bad_content_parts_answer_as_vllm(sides: dict[str, Side], name: str) -> None:
    text, parts = BAD_CONTENT_PARTS[name]
    token_ids = _token_ids(sides["vllm"], text)
    body = {"token_ids": token_ids, "content_parts": parts}
    responses = {k: _generate(side, body) for k, side in sides.items()}
    theirs, mine = responses["vllm"], responses["ours"]
    assert theirs.status_code != 200
    if theirs.status_code == 500:
        # A prompt whose placeholders do not match its items: vLLM's processor fails (500);
        # ours answers the same message as the client's error it is.
        assert mine.status_code == 400
        assert mine.json()["error"]["message"] == theirs.json()["error"]["message"]
    else:
        assert (mine.status_code, mine.json()) == (theirs.status_code, theirs.json())
    for side in sides.values():
        assert side.new_requests() == []


def _decoded_item(encoded: str | None) -> Any:
    # A serialized item as plain values: its fields in any order (vLLM's come in a set's
    # order, which varies with the process's string hash seed), each field's bytes as sent.
    if encoded is None:
        return None
    import msgspec

    return msgspec.msgpack.decode(
        base64.b64decode(encoded), ext_hook=lambda code, data: (code, bytes(data))
    )


def _comparable(rendered: dict[str, Any]) -> dict[str, Any]:
    """A render answer with its serialized items decoded (see :func:`_decoded_item`)."""
    features = rendered.get("features")
    if not features:
        return rendered
    features = dict(features)
    for key in ("kwargs_data", "mm_metadata"):
        if features.get(key) is not None:
            features[key] = {
                modality: [_decoded_item(item) for item in items]
                for modality, items in features[key].items()
            }
    return {**rendered, "features": features}


def _render(side: Side, messages: list[Any], **extra: Any) -> dict[str, Any]:
    body = {"messages": messages, "max_tokens": 3, **extra}
    response = httpx.post(side.url + "/v1/chat/completions/render", json=body, timeout=120)
    assert response.status_code == 200, response.text
    rendered = response.json()
    rendered.pop("request_id")
    return rendered


@pytest.fixture(scope="module")
def render_server() -> Iterator[httpx.Client]:
    """Our engine-free render server (``vllm-frontend render``) for the same model and options,
    in this process (it starts in about a second)."""
    from tests.server.support import RunningServer
    from vllm_frontend.cmd.assemble import build_render_app, load_model_resources
    from vllm_frontend.cmd.config import config_from_args

    options = {"limit_mm_per_prompt": LIMITS, "enable_mm_embeds": True}
    config = config_from_args({"model_tag": str(tiny_vlm_dir()), **options})
    server = RunningServer(build_render_app(config, load_model_resources(config)))
    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            yield client
    finally:
        server.stop()


@pytest.mark.parametrize("mm_payload", [None, "tensors", "none"])
def test_chat_render_with_media_is_vllms_and_generates_the_same(
    sides: dict[str, Side], render_server: httpx.Client, mm_payload: str | None
) -> None:
    # /v1/chat/completions/render answers the GenerateRequest with the items' hashes and
    # placeholders (and with "tensors" their processed fields); generating it sends the same.
    seed = 330 + len(mm_payload or "")
    messages = [
        {
            "role": "user",
            "content": [
                _image(_png(90, 60, seed)),
                _text("and"),
                _video(6, 3.0, (48, 40)),
                _image(_jpeg(40, 80, seed + 1), uuid=f"render-{seed}"),
            ],
        }
    ]
    extra = {} if mm_payload is None else {"mm_payload": mm_payload}
    rendered = {k: _render(side, messages, **extra) for k, side in sides.items()}
    assert _comparable(rendered["ours"]) == _comparable(rendered["vllm"])
    assert list(rendered["ours"]) == list(rendered["vllm"])  # key order too
    response = render_server.post(
        "/v1/chat/completions/render", json={"messages": messages, "max_tokens": 3, **extra}
    )
    assert response.status_code == 200, response.text
    served = {**response.json(), "request_id": None}
    assert _comparable(served) == _comparable({**rendered["vllm"], "request_id": None})
    assert rendered["vllm"]["features"]["mm_hashes"]
    if rendered["vllm"]["features"].get("kwargs_data") is None:
        return
    for _ in range(2):
        responses = {k: _generate(side, rendered["vllm"]) for k, side in sides.items()}
        assert responses["ours"].status_code == responses["vllm"].status_code == 200
        [vllm] = sides["vllm"].new_requests()
        [ours] = sides["ours"].new_requests()
        compare_requests(vllm, ours, _SENT)


def test_uuid_only_parts_name_what_the_engine_holds_as_vllm(sides: dict[str, Side]) -> None:
    # A part with a uuid and no media refers to an item the engine's cache holds (sent before
    # under that uuid): it expands as it did then and goes without data; one the cache does not
    # hold is refused.
    image = _image(_png(77, 55, 340), uuid="held-340")
    responses = {
        k: _post(side, [{"role": "user", "content": [image]}]) for k, side in sides.items()
    }
    assert responses["ours"].status_code == responses["vllm"].status_code == 200
    [vllm] = sides["vllm"].new_requests()
    [ours] = sides["ours"].new_requests()
    compare_requests(vllm, ours, _SENT)
    token_ids = _token_ids(sides["vllm"], f"{IMAGE_PAD}Again?")
    reference = {"type": "image_url", "uuid": "held-340"}
    body = {"token_ids": token_ids, "content_parts": [reference], "return_token_ids": True}
    responses = {k: _generate(side, body) for k, side in sides.items()}
    assert responses["ours"].status_code == responses["vllm"].status_code == 200
    theirs, mine = responses["vllm"].json(), responses["ours"].json()
    assert mine["mm_placeholders"] == theirs["mm_placeholders"]
    [vllm] = sides["vllm"].new_requests()
    [ours] = sides["ours"].new_requests()
    assert [f.data for f in vllm.mm_features] == [None]
    compare_requests(vllm, ours, _SENT)
    chat_reference = {"type": "image_url", "image_url": {"url": None}, "uuid": "held-340"}
    messages = [{"role": "user", "content": [_text("Same?"), chat_reference]}]
    responses = {k: _post(side, messages) for k, side in sides.items()}
    assert responses["ours"].status_code == responses["vllm"].status_code == 200
    [vllm] = sides["vllm"].new_requests()
    [ours] = sides["ours"].new_requests()
    assert [f.data for f in vllm.mm_features] == [None]
    compare_requests(vllm, ours, _SENT)
    body["content_parts"] = [{"type": "image_url", "uuid": "never-sent"}]
    responses = {k: _generate(side, body) for k, side in sides.items()}
    theirs, mine = responses["vllm"], responses["ours"]
    assert theirs.status_code == 400
    assert (mine.status_code, mine.json()) == (theirs.status_code, theirs.json())
    missing = {**chat_reference, "uuid": "never-sent"}
    messages = [{"role": "user", "content": [_image(_png(20, 20, 341)), _text("and"), missing]}]
    responses = {k: _post(side, messages) for k, side in sides.items()}
    theirs, mine = responses["vllm"], responses["ours"]
    assert theirs.status_code == 400
    assert (mine.status_code, mine.json()) == (theirs.status_code, theirs.json())
    for side in sides.values():
        assert side.new_requests() == []


def test_a_null_image_pil_with_a_uuid_names_a_held_item_as_vllm(sides: dict[str, Side]) -> None:
    # JSON has no PIL image: vLLM reads ``"image_pil": null`` as an image without data.
    sent = [{"role": "user", "content": [_image(_png(61, 45, 901), uuid="pil-held")]}]
    responses = {k: _post(side, sent) for k, side in sides.items()}
    assert responses["ours"].status_code == responses["vllm"].status_code == 200
    for uuid, status in (("pil-held", 200), ("pil-unknown", 400)):
        part = {"type": "image_pil", "image_pil": None, "uuid": uuid}
        messages = [{"role": "user", "content": [_text("Again?"), part]}]
        responses = {k: _post(side, messages) for k, side in sides.items()}
        assert responses["ours"].status_code == responses["vllm"].status_code == status
        if status != 200:
            assert responses["ours"].json() == responses["vllm"].json()
    vllm = sides["vllm"].new_requests()
    ours = sides["ours"].new_requests()
    assert len(vllm) == len(ours) == 2
    for theirs, mine in zip(vllm, ours, strict=True):
        compare_requests(theirs, mine, _SENT)
    assert [f.data for f in ours[1].mm_features] == [None]


def test_messages_render_with_an_image_is_vllms(sides: dict[str, Side]) -> None:
    # /v1/messages/render: the Anthropic image block mapped onto an image_url part, rendered
    # as the chat render renders it (hashes, placeholders and, by default, the tensors).
    data = _png(45, 65, 350).split(",", 1)[1]
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}
    body = {
        "model": str(tiny_vlm_dir()),
        "max_tokens": 4,
        "messages": [{"role": "user", "content": [image, {"type": "text", "text": "What?"}]}],
    }
    rendered = {}
    for key, side in sides.items():
        response = httpx.post(side.url + "/v1/messages/render", json=body, timeout=120)
        assert response.status_code == 200, response.text
        rendered[key] = {**response.json(), "request_id": None}
    assert rendered["vllm"]["features"]["mm_hashes"]["image"]
    assert _comparable(rendered["ours"]) == _comparable(rendered["vllm"])


# -- the Responses API: input_image parts go the way chat image parts go ---------------------


def _responses(side: Side, request_input: list[Any], **extra: Any) -> httpx.Response:
    body = {"input": request_input, "max_output_tokens": 3, **extra}
    return httpx.post(side.url + "/v1/responses", json=body, timeout=120)


def _input_image(url: str, **extra: Any) -> dict[str, Any]:
    return {"type": "input_image", "image_url": url, **extra}


RESPONSES_INPUTS: dict[str, list[Any]] = {
    "image and text": [
        {
            "role": "user",
            "content": [{"type": "input_text", "text": "What?"}, _input_image(_png(64, 48, 1))],
        }
    ],
    "images in a system and a user message, detail, uuid": [
        {"role": "system", "content": [_input_image(_jpeg(97, 431, 3), detail="high")]},
        {
            "role": "user",
            "content": [
                _input_image(_png(300, 200, 2), uuid="resp-image"),
                {"type": "input_text", "text": "Same?"},
            ],
        },
    ],
}


def _function_output(*parts: Any) -> list[Any]:
    """A call and its ``function_call_output`` of ``parts`` (a tool message's parts in chat)."""
    return [
        {"role": "user", "content": "Look it up."},
        {"type": "function_call", "call_id": "c1", "name": "find", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": list(parts)},
    ]


RESPONSES_INPUTS["a function's output with an image"] = _function_output(
    {"type": "input_text", "text": "Found:"}, _input_image(_png(41, 33, 31), detail="low")
)
_FIND = [{"type": "function", "name": "find", "parameters": {"type": "object"}}]


@pytest.mark.parametrize("name", list(RESPONSES_INPUTS))
def test_responses_engine_requests_equal(sides: dict[str, Side], name: str) -> None:
    for _ in range(2):  # the second time, the engine holds the items
        request_input = RESPONSES_INPUTS[name]
        extra = {"tools": _FIND} if request_input[-1].get("type") == "function_call_output" else {}
        responses = {k: _responses(side, request_input, **extra) for k, side in sides.items()}
        assert responses["ours"].status_code == responses["vllm"].status_code == 200
        [vllm] = sides["vllm"].new_requests()
        [ours] = sides["ours"].new_requests()
        compare_requests(vllm, ours, _SENT)
        # the engine request's id: the response's, numbered as vLLM numbers a response's turns
        assert _id_shape(ours.request_id) == _id_shape(vllm.request_id)


def _id_shape(request_id: str) -> str:
    return re.sub(r"[0-9a-f]{8,}", "X", request_id)


RESPONSES_BAD: dict[str, tuple[list[Any], dict[str, Any]]] = {
    "input_file part": (
        [
            {
                "role": "user",
                "content": [{"type": "input_file", "file_data": "JVBERi0=", "filename": "a.pdf"}],
            }
        ],
        {},
    ),
    "input_image by file_id": (
        [{"role": "user", "content": [_input_image(None, file_id="file-1")]}],  # type: ignore[arg-type]
        {},
    ),
    "truncated png": ([{"role": "user", "content": [_input_image(_truncated_png())]}], {}),
    "too many images": (
        [{"role": "user", "content": [_input_image(_png(8 + i, 8, i)) for i in range(4)]}],
        {},
    ),
    # vLLM defaults the detail of a message's input_image only: its chat parser refuses this
    "a function's output image without detail": (
        _function_output(_input_image(_png(42, 33, 32))),
        {"tools": _FIND},
    ),
    "media_io_kwargs": (RESPONSES_INPUTS["image and text"], {"media_io_kwargs": {"image": {}}}),
    "mm_processor_kwargs": (
        RESPONSES_INPUTS["image and text"],
        {"mm_processor_kwargs": {"max_pixels": 20000}},
    ),
}


@pytest.mark.parametrize("name", list(RESPONSES_BAD))
def test_responses_bad_input_answers_as_vllm(sides: dict[str, Side], name: str) -> None:
    request_input, extra = RESPONSES_BAD[name]
    responses = {k: _responses(side, request_input, **extra) for k, side in sides.items()}
    assert responses["vllm"].status_code != 200, responses["vllm"].text
    assert responses["ours"].status_code == responses["vllm"].status_code
    assert responses["ours"].json() == responses["vllm"].json()
    for side in sides.values():
        assert side.new_requests() == []

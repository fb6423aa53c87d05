"""Mistral 3 and Hugging Face-format Pixtral (``llava`` + ``pixtral``) against vLLM 0.32's own
``Mistral3MultiModalProcessor`` and ``PixtralHFMultiModalProcessor`` (in process, no server):
PNG images of many sizes and aspect ratios (inside and beyond the longest edge, tiny, thin,
whole multiples of the patch), one and several per prompt, sent to our multimodal facade as
``data:`` URLs; the prompt ids with each ``[IMG]`` expanded to its grid (``[IMG_BREAK]`` after
each row, ``[IMG_END]`` last), the placeholder ranges with their ``is_embed`` masks, the item
hashes, and every field (values, dtype, shape, field factory) equal vLLM's, in the engine's
dtypes, with the engine normalizing the pixels (Mistral 3's default) or not, and with
``--mm-processor-kwargs`` and per-request ``mm_processor_kwargs`` that change the size. Images
vLLM's processor refuses (a side that rounds to 0 pixels) get a 400 here.

vLLM's processors import transformers' ``PixtralProcessor``, which needs torchvision: the
reference runs in a subprocess on :data:`tests.support.tiny_vlm.VLM_PYTHONPATH` (this module
run as a script), where transformers' image processors stay the PIL ones."""

from __future__ import annotations

import asyncio
import base64
import pathlib
import sys
import types
from typing import Any

import pytest

from tests.multimodal.family_oracle import (
    assert_request_equals,
    facade,
    generate,
    pngs,
    run_reference,
    vllm_requests,
    write_reference,
)
from tests.support.render_reference import share_rust_tokenizers
from tests.support.tiny_mistral3 import (
    IMG,
    IMG_BREAK,
    IMG_END,
    tiny_mistral3_dir,
    tiny_pixtral_hf_dir,
)
from vllm_frontend.multimodal.parts import MediaPart
from vllm_frontend.multimodal.processors.pixtral import PixtralImageProcessor
from vllm_frontend.multimodal.sender_cache import SenderCache
from vllm_frontend.text.errors import BadInput, InvalidInput

pytestmark = pytest.mark.oracle

I = "[IMG]"  # noqa: E741
# name: (prompt text, image sizes (w, h)).
CASES: dict[str, tuple[str, list[tuple[int, int]]]] = {
    "one image": (f"{I}What is it?", [(64, 48)]),
    "several": (f"a {I} b {I} c {I}", [(300, 200), (17, 300), (128, 128)]),
    "beyond the edge": (f"{I} and {I}", [(1000, 300), (700, 2000)]),
    "tiny": (f"x {I}{I} y", [(1, 1), (5, 3)]),
    "whole patches": (f"{I}\n{I}", [(32, 16), (96, 96)]),
    "odd": (f"{I} {I} {I}", [(97, 431), (129, 127), (33, 17)]),
    "thin": (f"{I} too thin", [(1, 2000)]),
}
# name: (model, dtype, --mm-processor-kwargs, mm_device_do_normalize, request kwargs)
SETTINGS: dict[str, tuple[str, str, dict[str, Any], bool | None, dict[str, Any]]] = {
    "mistral3 bf16 device-normalized": ("mistral3", "bfloat16", {}, None, {}),
    "mistral3 bf16": ("mistral3", "bfloat16", {}, False, {}),
    "mistral3 f32": ("mistral3", "float32", {}, False, {}),
    "mistral3 size": ("mistral3", "bfloat16", {"size": {"longest_edge": 64}}, False, {}),
    "mistral3 scoped size": (
        "mistral3", "float32", {"images_kwargs": {"size": {"longest_edge": 48}}}, None, {}
    ),
    "mistral3 request size": ("mistral3", "bfloat16", {}, False, {"size": {"longest_edge": 80}}),
    # (vLLM turns mm_device_do_normalize off for a model that cannot take raw pixels)
    "pixtral-hf bf16": ("llava", "bfloat16", {}, True, {}),
    "pixtral-hf f32": ("llava", "float32", {}, None, {}),
    # vLLM sizes Pixtral-HF's grid on the vision tower's image_size whatever the size option
    "pixtral-hf size": ("llava", "float32", {"size": {"longest_edge": 48}}, None, {}),
}  # fmt: skip


def _model(kind: str) -> pathlib.Path:
    return tiny_mistral3_dir() if kind == "mistral3" else tiny_pixtral_hf_dir()


def _pngs(name: str) -> list[bytes]:
    return pngs(name, CASES[name][1])


def _reference(models: dict[str, str]) -> dict[str, dict[str, Any]]:
    """vLLM's processor outputs per setting and case (run in the subprocess)."""
    return {
        setting: vllm_requests(
            models[kind],
            {
                "dtype": dtype,
                "mm_processor_kwargs": kwargs or None,
                "mm_device_do_normalize": normalize,
            },
            CASES,
            request,
        )
        for setting, (kind, dtype, kwargs, normalize, request) in SETTINGS.items()
    }


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    models = [str(_model(kind)) for kind in ("mistral3", "llava")]
    target = tmp_path_factory.mktemp("pixtral") / "reference.pkl"
    out: dict[str, dict[str, Any]] = run_reference(__name__, models, target)
    return out


_FACADES: dict[str, Any] = {}
"""One facade per setting (they keep no state between requests without the cache mirror)."""


def _facade(kind: str, dtype: str, kwargs: dict[str, Any], normalize: bool | None,
            **options: Any) -> Any:  # fmt: skip
    return facade(_model(kind), dtype, mm_processor_kwargs=kwargs,
                  mm_device_do_normalize=normalize, **options)  # fmt: skip


@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize("name", list(CASES))
def test_engine_request_equals_vllms_processor(
    reference: dict[str, dict[str, Any]], name: str, setting: str
) -> None:
    from vllm_frontend.multimodal.media import MediaError

    kind, dtype, kwargs, normalize, request_kwargs = SETTINGS[setting]
    want = reference[setting][name]
    media = _FACADES.get(setting)
    if media is None:
        media = _FACADES[setting] = _facade(kind, dtype, kwargs, normalize)
    assert media.text.tokenizer.encode(CASES[name][0], add_special_tokens=False) == want["prompt"]
    if "error" in want:
        with pytest.raises(MediaError) as caught:
            generate(media, CASES[name][0], _pngs(name), request_kwargs)
        assert caught.value.status == 400
        return
    assert_request_equals(generate(media, CASES[name][0], _pngs(name), request_kwargs), want)


def test_reference_covers_the_layout(reference: dict[str, dict[str, Any]]) -> None:
    # The reference itself has the Pixtral layout (so the comparison above is not vacuous):
    # rows of [IMG] closed by [IMG_BREAK], the last by [IMG_END]; only [IMG] takes embeddings.
    want = reference["mistral3 bf16"]["several"]
    for offset, length, is_embed in want["ranges"]:
        tokens = want["ids"][offset : offset + length]
        assert tokens[-1] == IMG_END and IMG_BREAK in tokens
        assert is_embed == [t == IMG for t in tokens]
    assert "error" in reference["mistral3 bf16"]["thin"]


@pytest.mark.parametrize("kind", ["mistral3", "llava"])
def test_held_image_keeps_its_placeholder_and_goes_without_data(kind: str) -> None:
    # An image the engine's cache holds is not processed again: its placeholder run comes from
    # its size alone and equals the processed one's; it goes as data=None.
    media = _facade(kind, "bfloat16", {}, None)
    media.sender_cache = SenderCache(1)
    images = _pngs("odd") + _pngs("beyond the edge")
    prompt = " ".join([I] * len(images))
    first = generate(media, prompt, images)
    runs = [(f.mm_position.offset, f.mm_position.length, f.mm_position.is_embed.numpy().tolist())
            for f in first.mm_features]  # fmt: skip
    first.mm_cache.apply(first.mm_features)  # as when the request is sent
    calls: list[Any] = []
    original = PixtralImageProcessor.preprocess

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return original(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(PixtralImageProcessor, "preprocess", counted)
        second = generate(media, prompt, images)
    assert not calls
    assert second.token_ids == first.token_ids
    assert [f.data for f in second.mm_features] == [None] * len(images)
    assert [(f.mm_position.offset, f.mm_position.length, f.mm_position.is_embed.numpy().tolist())
            for f in second.mm_features] == runs  # fmt: skip


def test_limit_per_prompt_is_vllms() -> None:
    from vllm.multimodal.processing.context import BaseProcessingInfo

    info = types.SimpleNamespace(supported_mm_limits={"image": None},
                                 allowed_mm_limits={"image": 2})  # fmt: skip
    with pytest.raises(Exception) as theirs:
        BaseProcessingInfo.validate_num_items(info, "image", 3)  # type: ignore[arg-type]
    media = _facade("mistral3", "bfloat16", {}, None, limit_mm_per_prompt={"image": 2})
    parts = media.new_parts()
    parts.add(MediaPart("image", "data:,"))
    parts.add(MediaPart("image", "data:,"))
    with pytest.raises(InvalidInput) as ours:
        parts.add(MediaPart("image", "data:,"))
    assert str(ours.value) == str(theirs.value)
    assert ours.value.parameter == "image"


def test_expanded_prompt_longer_than_the_context_is_refused() -> None:
    # 6 text tokens and 3 images of 8x6 (with breaks: 54), 1x8 (16) and 8x8 (72) merged patches;
    # vLLM's get_max_tokens message (test_idefics3_requests checks it against vLLM's server)
    media = facade(_model("mistral3"), "bfloat16", max_model_len=100)
    with pytest.raises(BadInput) as caught:
        generate(media, f"a {I} b {I} c {I}", _pngs("several"))
    assert "Input length (148) exceeds model's maximum context length (100)." in str(caught.value)


def test_padding_and_patch_size_options_do_not_change_the_items() -> None:
    # PixtralProcessor sets the patch size itself and vLLM cuts each image out of the padded
    # batch: such request options leave the prompt and pixels as they were.
    media = _facade("mistral3", "bfloat16", {}, False)
    images = _pngs("several")
    prompt = CASES["several"][0]
    plain = generate(media, prompt, images)
    other = generate(media, prompt, images, {"do_pad": False, "patch_size": 5})
    assert other.token_ids == plain.token_ids
    for mine, theirs in zip(other.mm_features, plain.mm_features, strict=True):
        assert mine.mm_hash != theirs.mm_hash  # the request's options are hashed
        assert (
            mine.data["pixel_values"].data.numpy() == theirs.data["pixel_values"].data.numpy()
        ).all()


# A Mistral 3-style template: image parts become [IMG] (vLLM detects the "openai" format).
TEMPLATE = (
    "{% for message in messages %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}[IMG]{% else %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endfor %}"
)


def test_chat_request_with_data_urls_equals_vllms_processor(
    reference: dict[str, dict[str, Any]],
) -> None:
    # Through the chat facade as the server wires it: content parts with data: URLs, rendered by
    # the template (no placeholder text for Mistral 3), to the engine request vLLM's processor
    # gives for the same prompt and images (the engine normalizes: vLLM's default).
    from vllm_frontend.chat.llm import ChatLlm, ChatRequest
    from vllm_frontend.cmd.assemble import load_model_resources, multimodal_facade
    from vllm_frontend.cmd.config import config_from_args
    from vllm_frontend.engine.protocol import EngineCoreRequest
    from vllm_frontend.llm import LLM
    from vllm_frontend.text.llm import TextLlm, TextRequest
    from vllm_frontend.text.sampling import ModelSamplingInfo, SamplingRequest

    config = config_from_args({"model_tag": str(tiny_mistral3_dir()), "chat_template": TEMPLATE})
    model = load_model_resources(config)
    tokenizer = model.tokenizer
    sampling = ModelSamplingInfo(max_model_len=8192, eos_token_id=tokenizer.eos_token_id)
    text = TextLlm(LLM(types.SimpleNamespace(), EngineCoreRequest), tokenizer, 8192, sampling)
    client = types.SimpleNamespace(registrations={}, engine_indices=[0, 1])  # no cache mirror
    make = multimodal_facade(config, model, client)  # type: ignore[arg-type]
    assert make is not None
    chat = ChatLlm(text, model.renderer, media=make(text))
    urls = ["data:image/png;base64," + base64.b64encode(png).decode() for png in _pngs("several")]
    content: list[dict[str, Any]] = []
    for piece, url in zip(["a ", " b ", " c "], urls, strict=True):
        content += [
            {"type": "text", "text": piece},
            {"type": "image_url", "image_url": {"url": url}},
        ]
    request = ChatRequest(
        messages=[{"role": "user", "content": content}],
        text=TextRequest(request_id="r", max_tokens=4, sampling=SamplingRequest(),
                         add_special_tokens=False),
    )  # fmt: skip
    generation = asyncio.run(chat.prepare(request))
    [prepared] = generation.text.prompts
    assert prepared.text == CASES["several"][0]
    assert_request_equals(prepared, reference["mistral3 bf16 device-normalized"]["several"])


@pytest.mark.parametrize("mistral_mode", [False, True])
def test_served_family_and_mistral_tokenizer_mode(mistral_mode: bool) -> None:
    # The server wires the family for a Mistral 3 checkpoint; with --tokenizer-mode mistral
    # (prompts rendered to ids by mistral_common) media parts stay refused naming the type.
    import msgspec

    from vllm_frontend.cmd.assemble import load_model_resources, multimodal_facade
    from vllm_frontend.cmd.config import config_from_args
    from vllm_frontend.multimodal.parts import UnsupportedMedia
    from vllm_frontend.multimodal.pixtral import PixtralFamily

    config = config_from_args({"model_tag": str(tiny_mistral3_dir())})
    model = load_model_resources(config)
    if mistral_mode:
        model = msgspec.structs.replace(model, mistral=object())
    client = types.SimpleNamespace(registrations={}, engine_indices=[0])
    make = multimodal_facade(config, model, client)  # type: ignore[arg-type]
    assert make is not None
    media = make(None)  # type: ignore[arg-type]
    if not mistral_mode:
        assert isinstance(media.family, PixtralFamily)
        assert media.new_parts().add(MediaPart("image", "data:,")) is None  # no placeholder
        return
    assert media.family is None
    with pytest.raises(UnsupportedMedia, match="for model type 'mistral3' yet"):
        media.new_parts().add(MediaPart("image", "data:,"))


if __name__ == "__main__":
    share_rust_tokenizers()
    write_reference(_reference({"mistral3": sys.argv[1], "llava": sys.argv[2]}))

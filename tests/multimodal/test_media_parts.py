"""Media parts in chat messages (what vLLM 0.32's ``chat_utils`` does with them): their stand-in
in the conversation for each content format, their order, uuids and per-prompt limits, and the
placeholder expansion into the engine's ``mm_features`` order. Expected values are vLLM's
documented behaviour (see ``chat_utils._get_full_multimodal_text_prompt`` and
``MultiModalItemTracker``); the end-to-end equality with vLLM is in test_engine_requests."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any, ClassVar

import numpy as np
import pytest

from vllm_frontend.chat.errors import ChatError
from vllm_frontend.chat.messages import normalize_messages
from vllm_frontend.engine.protocol import MultiModalFieldElem
from vllm_frontend.multimodal.family import ProcessedItem
from vllm_frontend.multimodal.idefics3 import Idefics3Family
from vllm_frontend.multimodal.llm import (
    MultimodalOptions,
    _all_or_none,
    _expand,
    _resolve_order,
    load_family,
)
from vllm_frontend.multimodal.parts import MediaPart, MediaParts
from vllm_frontend.text.errors import InvalidInput

PLACEHOLDER = "<|vision_start|><|image_pad|><|vision_end|>"


def _parts(limit: int = 5, refusal: str | None = None) -> MediaParts:
    return MediaParts({"image": limit}, {"image": None}, {"image": PLACEHOLDER}, refusal)


def _image(url: str, **extra: Any) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}, **extra}


def test_openai_format_keeps_parts_in_place() -> None:
    parts = _parts()
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "a"}, _image("u1", uuid="x"),
                                     _image("u2", cache_control={"k": 1})]},
        {"role": "user", "content": [{"image_url": "u3"}]},
    ]  # fmt: skip
    conversation = normalize_messages(messages, "openai", parts)
    assert conversation[0]["content"] == [
        {"type": "text", "text": "a"},
        {"type": "image"},
        {"type": "image", "cache_control": {"k": 1}},
    ]
    assert conversation[1]["content"] == [{"type": "image"}]
    assert parts.items == [
        MediaPart("image", "u1", "x"),
        MediaPart("image", "u2"),
        MediaPart("image", "u3"),
    ]


def test_string_format_puts_missing_placeholders_first() -> None:
    parts = _parts()
    messages = [{"role": "user", "content": [{"type": "text", "text": "a"}, _image("u1"),
                                             {"type": "text", "text": "b"}, _image("u2")]},
                {"role": "user", "content": [_image("u3")]},
                {"role": "user", "content": [{"type": "text", "text": f"x {PLACEHOLDER}"},
                                             _image("u4")]}]  # fmt: skip
    conversation = normalize_messages(messages, "string", parts)
    assert conversation[0]["content"] == f"{PLACEHOLDER}\n{PLACEHOLDER}\na\nb"
    assert conversation[1]["content"] == PLACEHOLDER
    assert conversation[2]["content"] == f"x {PLACEHOLDER}"  # the user placed it
    with pytest.raises(ChatError, match=re.escape("more '<|vision_start|>")):
        normalize_messages(
            [{"role": "user", "content": [{"type": "text", "text": PLACEHOLDER * 2}, _image("u")]}],
            "string",
            _parts(),
        )


def test_limits_and_refusals() -> None:
    with pytest.raises(InvalidInput) as refused:
        normalize_messages([{"role": "user", "content": [_image("u")] * 3}], "openai", _parts(2))
    assert str(refused.value) == (
        "At most 2 image(s) may be provided in one prompt. (parameter=image)"
    )
    with pytest.raises(InvalidInput, match="At most 0 video"):
        normalize_messages(
            [{"role": "user", "content": [{"type": "video_url", "video_url": {"url": "v"}}]}],
            "openai",
            _parts(),
        )
    with pytest.raises(InvalidInput, match="model type 'llava'"):
        normalize_messages(
            [{"role": "user", "content": [_image("u")]}],
            "openai",
            _parts(refusal="... for model type 'llava' yet."),
        )
    with pytest.raises(ChatError, match="text-only"):
        normalize_messages([{"role": "user", "content": [_image("u")]}], "openai", None)
    assert normalize_messages([{"role": "user", "content": "hi"}], "openai", _parts(0))


def _embeds(payload: Any = "AAAA", kind: str = "image_embeds", **extra: Any) -> dict[str, Any]:
    return {"type": kind, kind: payload, **extra}


def test_embeds_parts_are_tracked_as_vllm_tracks_them() -> None:
    # Without --enable-mm-embeds: vLLM's parse_*_embeds refusal (VLLMValidationError naming
    # the part type).
    for kind in ("image_embeds", "video_embeds", "audio_embeds"):
        with pytest.raises(ChatError) as refused:
            normalize_messages(
                [{"role": "user", "content": [_embeds(kind=kind)]}], "openai", _parts()
            )
        assert refused.value.message == f"You must set `--enable-mm-embeds` to input `{kind}`"
        assert refused.value.param == kind
    # With it: the part stands in as its modality, its payload and uuid kept.
    parts = MediaParts({"image": 2}, {"image": None}, {"image": PLACEHOLDER}, embeds_enabled=True)
    grid = {"image_embeds": "AAAA", "image_grid_thw": [1, 2, 2]}
    conversation = normalize_messages(
        [{"role": "user", "content": [_embeds(grid, uuid=7), _embeds(), _image("u")]}],
        "openai",
        parts,
    )
    assert conversation[0]["content"] == [{"type": "image"}] * 3
    assert parts.items == [
        MediaPart("image", None, "7", embeds=grid, is_embeds=True),
        MediaPart("image", None, None, embeds="AAAA", is_embeds=True),
        MediaPart("image", "u"),
    ]
    # Embeddings are counted apart from raw items (vLLM's tracker keys them by part type).
    fresh = MediaParts({"image": 2}, {"image": None}, {"image": PLACEHOLDER}, embeds_enabled=True)
    with pytest.raises(InvalidInput, match="At most 2 image"):
        normalize_messages([{"role": "user", "content": [_embeds()] * 3}], "openai", fresh)
    # A modality limited to 0 takes any number of embeddings (not of raw items).
    zero = MediaParts({"image": 0}, {"image": None}, {"image": PLACEHOLDER}, embeds_enabled=True)
    normalize_messages([{"role": "user", "content": [_embeds()] * 4}], "string", zero)
    assert len(zero.items) == 4
    with pytest.raises(InvalidInput, match="At most 0 image"):
        normalize_messages([{"role": "user", "content": [_image("u")]}], "openai", zero)


class _Family:
    token_ids: ClassVar[dict[str, int]] = {"image": 7, "video": 8}


def _item(modality: str, n: int) -> ProcessedItem:
    return ProcessedItem(modality, n, {"x": MultiModalFieldElem(n, ("batched", {}))})


def test_expansion_orders_items_by_place_in_prompt() -> None:
    parts = [MediaPart("image", "a"), MediaPart("video", "b"), MediaPart("image", "c")]
    processed = [_item("image", 2), _item("video", 3), _item("image", 1)]
    ids, features = _expand(
        [1, 8, 2, 7, 3, 7, 4],
        _Family(),  # type: ignore[arg-type]
        parts,
        processed,
        ["ha", "hb", "hc"],
    )
    assert ids == [1, 8, 8, 8, 2, 7, 7, 3, 7, 4]
    assert [(f.modality, f.mm_hash, f.identifier) for f in features] == [
        ("video", "hb", "hb"),
        ("image", "ha", "ha"),
        ("image", "hc", "hc"),
    ]
    assert [(f.mm_position.offset, f.mm_position.length) for f in features] == [
        (1, 3),
        (5, 2),
        (8, 1),
    ]
    with pytest.raises(ValueError, match="prompt replacement"):
        _expand([1, 7], _Family(), parts[:1] * 2, processed[:1] * 2, ["h", "h"])  # type: ignore[arg-type]


def test_expansion_with_a_replacement_marks_the_embedding_positions() -> None:
    # A family whose items stand for other tokens too (Idefics3's tile grid): the placeholder
    # token becomes the item's replacement ids, and is_embed marks the embedding positions.
    replacement = [9, 7, 7, 9, 5, 7, 9]
    is_embed = np.array(replacement) == 7
    item = ProcessedItem("image", len(replacement), {}, replacement, is_embed)
    ids, [feature] = _expand(
        [1, 2, 7, 3],
        _Family(),  # type: ignore[arg-type]
        [MediaPart("image", "a")],
        [item],
        ["h"],
    )
    assert ids == [1, 2, *replacement, 3]
    position = feature.mm_position
    assert (position.offset, position.length) == (2, 7)
    assert position.is_embed is not None
    assert position.is_embed.dtype == "bool"
    assert position.is_embed.numpy().tolist() == is_embed.tolist()
    assert feature.data is None  # no fields: the engine holds the item


def test_loads_resolve_in_vllms_tracker_order() -> None:
    # vLLM's AsyncMultiModalItemTracker keeps items by modality (a modality's embeddings under
    # their own key), the groups in the order of their first item, and resolves them so.
    parts = [
        MediaPart("image", "a"),
        MediaPart("video", "b"),
        MediaPart("image", "c"),
        MediaPart("image", None, embeds="AAAA", is_embeds=True),
        MediaPart("video", "d"),
        MediaPart("image", "e"),
    ]
    assert _resolve_order(parts) == [0, 2, 5, 1, 4, 3]


def test_the_first_failed_load_in_order_is_raised_and_later_loads_are_cancelled() -> None:
    # vLLM gathers every load, then raises the first error in order, whichever failed first.
    # Ours raises the same one without waiting for the loads after it: they are cancelled.
    cancelled: list[str] = []

    async def load(name: str, delay: float, fail: bool) -> str:
        try:
            await asyncio.sleep(delay)
        except asyncio.CancelledError:
            cancelled.append(name)
            raise
        if fail:
            raise ValueError(name)
        return name

    async def run(specs: list[tuple[str, float, bool]], order: list[int]) -> list[str]:
        return await _all_or_none([load(*spec) for spec in specs], order)

    started = time.monotonic()
    with pytest.raises(ValueError, match=r"^slow$"):
        asyncio.run(run([("slow", 0.2, True), ("fast", 0.0, True), ("long", 30, False)], [0, 1, 2]))
    assert cancelled == ["long"]
    assert time.monotonic() - started < 5
    cancelled.clear()
    # In another order, the fast failure comes first: the slow load is not waited for.
    with pytest.raises(ValueError, match=r"^fast$"):
        asyncio.run(run([("slow", 30, True), ("fast", 0.0, True)], [1, 0]))
    assert cancelled == ["slow"]
    assert asyncio.run(run([("a", 0.01, False), ("b", 0.0, False)], [1, 0])) == ["a", "b"]


def test_idefics3_is_served_and_unimplemented_families_are_not(tmp_path: Any) -> None:
    ids = {"<image>": 7}

    def encode(text: str) -> list[int]:
        return [7] * text.count("<image>")

    config = {"model_type": "idefics3", "vision_config": {}}
    family = load_family(tmp_path, config, ids.get, MultimodalOptions(), encode)
    assert isinstance(family, Idefics3Family)
    assert family.token_ids == {"image": 7} and family.placeholders == {"image": "<image>"}
    llava = {"model_type": "llava", "vision_config": {}}
    assert load_family(tmp_path, llava, ids.get, MultimodalOptions(), encode) is None


# Shapes of the released checkpoints' config.json (the keys that matter here).
REFUSED_CONFIGS = {
    # InternVL2/2.5/3 in their remote-code format: vLLM 0.32 runs its own processor for them
    # (model_executor/models/internvl.py), not implemented here.
    "internvl_chat": {
        "architectures": ["InternVLChatModel"],
        "vision_config": {},
        "llm_config": {},
    },
    # Phi-4-multimodal-instruct: vLLM 0.32 runs the checkpoint's own (remote-code) processor.
    "phi4mm": {
        "architectures": ["Phi4MMForCausalLM"],
        "audio_processor": {},
        "embd_layer": {"embedding_cls": "image"},
    },
    # Phi-3-vision: likewise.
    "phi3_v": {
        "architectures": ["Phi3VForCausalLM"],
        "img_processor": {},
        "embd_layer": {"embedding_cls": "image"},
    },
    # Phi-4-multimodal in transformers' format: vLLM 0.32 no longer serves it at all.
    "phi4_multimodal": {
        "architectures": ["Phi4MultimodalForCausalLM"],
        "vision_config": {},
        "audio_config": {},
    },
}


@pytest.mark.parametrize("model_type", list(REFUSED_CONFIGS))
def test_multimodal_families_not_served_refuse_media_naming_their_type(
    model_type: str, tmp_path: Any
) -> None:
    from vllm_frontend.multimodal.family import is_multimodal_config
    from vllm_frontend.multimodal.llm import MultimodalLlm
    from vllm_frontend.multimodal.parts import UnsupportedMedia

    config = {"model_type": model_type, **REFUSED_CONFIGS[model_type]}
    assert is_multimodal_config(config)  # not taken for a text-only model
    assert load_family(tmp_path, config, {}.get, MultimodalOptions(), lambda t: []) is None
    media = MultimodalLlm(None, None, None, model_id="m", config=config)  # type: ignore[arg-type]
    with pytest.raises(UnsupportedMedia) as refused:
        media.new_parts().add(MediaPart("image", "data:,"))
    assert str(refused.value).startswith(
        f"Multimodal inputs are not supported by this frontend for model type {model_type!r}"
    )

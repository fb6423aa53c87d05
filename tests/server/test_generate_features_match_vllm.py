"""Multimodal ``features`` on the render and generate routes against vLLM 0.32's own functions,
no engine: an item serialized by vLLM's ``encode_mm_kwargs_item`` decodes here into the engine
fields it stands for, and serializes back to the same text (so a render's ``kwargs_data`` and
``mm_metadata`` are vLLM's bytes for the same fields); ``extract_mm_features`` and ours write
the same ``features`` for the same engine input; a generate request's features become the
engine features vLLM's ``mm_kwargs_from_features`` and input processor make."""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
import pytest

from vllm_frontend.engine.codec import decode_mm_item
from vllm_frontend.engine.protocol import MultiModalFeatureSpec, PlaceholderRange
from vllm_frontend.server.generate_features import engine_features
from vllm_frontend.server.render_features import render_features

pytestmark = pytest.mark.oracle


def _vllm_item(seed: int) -> Any:
    """A Qwen2-VL-like image item: bf16 patches (flat field), an int64 grid kept on the CPU."""
    import torch
    from vllm.multimodal.inputs import MultiModalFieldConfig, MultiModalKwargsItems

    rng = np.random.default_rng(seed)
    pixels = torch.from_numpy(rng.standard_normal((8, 12)).astype(np.float32)).bfloat16()
    grid = torch.tensor([[1, 2, 4]], dtype=torch.int64)
    config = {
        "pixel_values": MultiModalFieldConfig.flat_from_sizes("image", torch.tensor([8])),
        "image_grid_thw": MultiModalFieldConfig.batched("image", keep_on_cpu=True),
        "scale": MultiModalFieldConfig.batched("image"),
    }
    data = {"pixel_values": pixels, "image_grid_thw": grid, "scale": torch.tensor([0.5])}
    items = MultiModalKwargsItems.from_hf_inputs(data, config)  # type: ignore[arg-type]
    return items["image"][0]


def test_an_item_decodes_and_encodes_as_vllms() -> None:
    from vllm.entrypoints.scale_out.token_in_token_out.mm_serde import encode_mm_kwargs_item

    item = _vllm_item(1)
    text = encode_mm_kwargs_item(item)
    import base64

    ours = decode_mm_item(base64.b64decode(text))
    assert list(ours) == list(item)
    for key, elem in item.items():
        mine = ours[key]
        assert mine.field[0] in ("flat", "batched")
        want = elem.data.float().numpy() if elem.data.dtype.is_floating_point else elem.data
        assert np.array_equal(np.asarray(_as_float(mine.data)), np.asarray(want))
    feature = MultiModalFeatureSpec(ours, "image", "h", PlaceholderRange(3, 2), "h")
    out = render_features([feature], "tensors", lambda modality: {"image_grid_thw"})
    assert out is not None and out.kwargs_data == {"image": [text]}


def _as_float(tensor: Any) -> Any:
    return tensor.numpy().astype(np.float32)


def test_render_features_are_vllms_extract_mm_features() -> None:
    """The same engine input's features: vLLM's ``extract_mm_features`` and ours."""
    import base64

    from vllm.entrypoints.scale_out.token_in_token_out.mm_features import extract_mm_features
    from vllm.entrypoints.scale_out.token_in_token_out.mm_serde import encode_mm_kwargs_item
    from vllm.inputs import mm_input
    from vllm.multimodal.inputs import MultiModalKwargsItems
    from vllm.multimodal.inputs import PlaceholderRange as VllmRange

    items = [_vllm_item(2), _vllm_item(3)]
    places = [VllmRange(offset=1, length=2), VllmRange(offset=5, length=2)]
    engine_input = mm_input(
        [0] * 8,
        MultiModalKwargsItems({"image": items}),
        {"image": ["h0", "h1"]},
        {"image": places},
    )
    declared = {"image_grid_thw"}
    ours_features = [
        MultiModalFeatureSpec(
            decode_mm_item(base64.b64decode(encode_mm_kwargs_item(item))),
            "image",
            f"h{i}",
            PlaceholderRange(p.offset, p.length),
            f"h{i}",
        )
        for i, (item, p) in enumerate(zip(items, places, strict=True))
    ]
    for payload in ("tensors", "none"):
        theirs = extract_mm_features(
            engine_input, metadata_fields_for=lambda m: declared, mm_payload=payload
        )
        ours = render_features(ours_features, payload, lambda m: declared)
        assert theirs is not None
        assert msgspec.to_builtins(ours) == theirs.model_dump(), payload


def test_generate_features_are_the_engine_features_vllm_makes() -> None:
    from vllm.entrypoints.scale_out.token_in_token_out.mm_features import (
        extract_mm_features,
        mm_kwargs_from_features,
    )
    from vllm.entrypoints.scale_out.token_in_token_out.protocol import MultiModalFeatures
    from vllm.inputs import mm_input
    from vllm.multimodal.inputs import MultiModalKwargsItems
    from vllm.multimodal.inputs import PlaceholderRange as VllmRange

    items = [_vllm_item(4), _vllm_item(5)]
    engine_input = mm_input(
        [0] * 9,
        MultiModalKwargsItems({"image": items}),
        {"image": ["a", "b"]},
        {"image": [VllmRange(offset=6, length=2), VllmRange(offset=1, length=2)]},
    )
    raw = extract_mm_features(
        engine_input, metadata_fields_for=lambda m: {"image_grid_thw"}
    ).model_dump()  # type: ignore[union-attr]
    raw["kwargs_data"]["image"][1] = None  # metadata only: the engine's cache has the rest
    theirs = mm_kwargs_from_features(MultiModalFeatures.model_validate(raw))["image"]
    ours = engine_features(raw)
    # vLLM's input processor orders the items by their place in the prompt
    assert [f.mm_hash for f in ours] == ["b", "a"]
    assert [f.identifier for f in ours] == ["b", "a"]
    assert [(f.mm_position.offset, f.mm_position.length) for f in ours] == [(1, 2), (6, 2)]
    for mine, want in zip(ours, [theirs[1], theirs[0]], strict=True):
        assert mine.data is not None and want is not None
        assert list(mine.data) == list(want)
        for key, elem in want.items():
            assert np.array_equal(_as_float(mine.data[key].data), elem.data.float().numpy())

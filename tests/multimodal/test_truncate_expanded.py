"""``truncate_prompt_tokens`` applied again after placeholder expansion, against vLLM 0.32's
renderer (``BaseRenderer._truncate_expanded_prompt``, called on a stand-in renderer that only
has the tokenizer side it reads): the kept tokens, the shifted item offsets, or the same 400
message when an item would be cut or dropped."""

from __future__ import annotations

import itertools
import types
from typing import Any

import pytest

from vllm_frontend.engine.protocol import MultiModalFeatureSpec, PlaceholderRange
from vllm_frontend.multimodal.llm import truncate_expanded
from vllm_frontend.text.errors import InvalidInput

pytestmark = pytest.mark.oracle  # imports vLLM as the reference

pytest.importorskip("vllm")

# (modality, offset, length) of items in a 40-token prompt, in prompt order.
LAYOUTS = [
    [("image", 5, 10)],
    [("image", 0, 8), ("image", 30, 10)],
    [("image", 12, 6), ("video", 20, 12), ("image", 34, 4)],
    [("video", 2, 3), ("image", 8, 8)],
]
KEEPS = [0, 1, 5, 15, 22, 28, 35, 39]


def _vllm(layout: list[tuple[str, int, int]], keep: int, side: str) -> Any:
    from vllm.exceptions import VLLMValidationError
    from vllm.multimodal.inputs import PlaceholderRange as VllmRange
    from vllm.renderers.base import BaseRenderer
    from vllm.renderers.params import TokenizeParams

    placeholders: dict[str, list[Any]] = {}
    for modality, offset, length in layout:
        placeholders.setdefault(modality, []).append(VllmRange(offset=offset, length=length))
    engine_input: dict[str, Any] = {
        "type": "multimodal",
        "prompt_token_ids": list(range(40)),
        "mm_placeholders": placeholders,
    }
    params = TokenizeParams(max_total_tokens=64, truncate_prompt_tokens=keep, truncation_side=side)
    renderer = types.SimpleNamespace(tokenizer=None)
    try:
        BaseRenderer._truncate_expanded_prompt(renderer, engine_input, params)  # type: ignore[arg-type]
    except VLLMValidationError as e:
        return str(e)
    positions = sorted(
        (p.offset, m, p.length) for m, ps in engine_input["mm_placeholders"].items() for p in ps
    )
    return engine_input["prompt_token_ids"], [(m, o, n) for o, m, n in positions]


def _ours(layout: list[tuple[str, int, int]], keep: int, side: str) -> Any:
    features = [
        MultiModalFeatureSpec(None, m, f"h{i}", PlaceholderRange(o, n))
        for i, (m, o, n) in enumerate(layout)
    ]
    try:
        ids, kept = truncate_expanded(list(range(40)), features, keep, side, keep)
    except InvalidInput as e:
        return str(e)
    return ids, [(f.modality, f.mm_position.offset, f.mm_position.length) for f in kept]


@pytest.mark.parametrize(
    ("layout", "keep", "side"), list(itertools.product(LAYOUTS, KEEPS, ["left", "right"]))
)
def test_truncation_after_expansion_matches_vllm(
    layout: list[tuple[str, int, int]], keep: int, side: str
) -> None:
    assert _ours(layout, keep, side) == _vllm(layout, keep, side)

"""Llama 4 against vLLM 0.32's own ``Mllama4MultiModalProcessor`` (in process, no server): PNG
images of many sizes and aspect ratios (one tile, several tiles of every canvas, beyond the
largest canvas, tiny, thin), one and several per prompt, sent to our multimodal facade as
``data:`` URLs; the prompt ids with each ``<|image|>`` expanded to the image's tile text, the
placeholder ranges with their ``is_embed`` masks (the ``<|patch|>`` positions), the item hashes,
and every field (``pixel_values`` with its flat slices, ``patches_per_image``,
``aspect_ratios``: values, dtype, shape, field factory) equal vLLM's in the engine's dtypes, with
the server's ``max_patches`` / ``resize_to_max_canvas``.

transformers' ``Llama4ImageProcessor`` exists only on torchvision: the reference runs in a
subprocess on tests/fixtures/torchvision_stub, with torch's CPU capability set to AVX2, where it
resizes ``uint8`` bilinearly on the bytes as ours does (see test_llama4_processor)."""

from __future__ import annotations

import sys
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
from tests.support.tiny_llama4 import IMAGE, PATCH, tiny_llama4_dir
from vllm_frontend.multimodal.processors.llama4 import Llama4ImageProcessor
from vllm_frontend.multimodal.sender_cache import SenderCache

pytestmark = pytest.mark.oracle

I = "<|image|>"  # noqa: E741
# name: (prompt text, image sizes (w, h)); tiles are 56 pixels, at most 6 per image.
CASES: dict[str, tuple[str, list[tuple[int, int]]]] = {
    "one image": (f"{I}What is it?", [(50, 30)]),
    "several": (f"a {I} b {I} c {I}", [(300, 100), (60, 170), (112, 112)]),
    "canvases": (f"{I}{I}{I}{I}", [(100, 40), (40, 100), (170, 112), (112, 170)]),
    "beyond": (f"{I} and {I}", [(2000, 700), (640, 480)]),
    "tiny and thin": (f"x {I} y {I} z {I}", [(1, 1), (1, 400), (700, 2)]),
    "exact": (f"{I}\n{I}", [(56, 56), (336, 56)]),
}
# name: (dtype, --mm-processor-kwargs)
SETTINGS: dict[str, tuple[str, dict[str, Any]]] = {
    "bf16": ("bfloat16", {}),
    "f32": ("float32", {}),
    "max canvas": ("bfloat16", {"resize_to_max_canvas": True}),
    "3 tiles": ("float32", {"max_patches": 3}),
}


def _pngs(name: str) -> list[bytes]:
    return pngs(name, CASES[name][1])


def _reference(model: str) -> dict[str, dict[str, Any]]:
    """vLLM's processor outputs per setting and case (run in the subprocess)."""
    return {
        setting: vllm_requests(
            model, {"dtype": dtype, "mm_processor_kwargs": kwargs or None}, CASES, {}
        )
        for setting, (dtype, kwargs) in SETTINGS.items()
    }


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    target = tmp_path_factory.mktemp("llama4") / "reference.pkl"
    out: dict[str, dict[str, Any]] = run_reference(
        __name__, [str(tiny_llama4_dir())], target, ATEN_CPU_CAPABILITY="avx2"
    )
    return out


_FACADES: dict[str, Any] = {}
"""One facade per setting (they keep no state between requests without the cache mirror)."""


@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize("name", list(CASES))
def test_engine_request_equals_vllms_processor(
    reference: dict[str, dict[str, Any]], name: str, setting: str
) -> None:
    dtype, kwargs = SETTINGS[setting]
    want = reference[setting][name]
    assert "error" not in want, want.get("error")
    media = _FACADES.get(setting)
    if media is None:
        media = _FACADES[setting] = facade(tiny_llama4_dir(), dtype, mm_processor_kwargs=kwargs)
    assert media.text.tokenizer.encode(CASES[name][0], add_special_tokens=False) == want["prompt"]
    assert_request_equals(generate(media, CASES[name][0], _pngs(name)), want)


def test_reference_covers_the_layout(reference: dict[str, dict[str, Any]]) -> None:
    # The reference has several tile grids, each image's text around one <|image|>, and only
    # <|patch|> positions taking embeddings (so the comparison above is not vacuous).
    want = reference["bf16"]["canvases"]
    ratios = [tuple(fields["aspect_ratios"][2].astype(int)) for fields in want["fields"]]
    assert len(set(ratios)) == 4, ratios
    for offset, length, is_embed in want["ranges"]:
        tokens = want["ids"][offset : offset + length]
        assert tokens.count(IMAGE) == 1
        assert is_embed == [t == PATCH for t in tokens]
    # and the server's options change it: fewer tiles, or pixels resized up to the canvas
    assert reference["3 tiles"]["canvases"]["ids"] != reference["f32"]["canvases"]["ids"]
    [plain] = reference["bf16"]["one image"]["fields"]
    [to_max] = reference["max canvas"]["one image"]["fields"]
    assert (plain["pixel_values"][2] != to_max["pixel_values"][2]).any()


def test_held_image_keeps_its_placeholder_and_goes_without_data() -> None:
    media = facade(tiny_llama4_dir(), "bfloat16")
    media.sender_cache = SenderCache(1)
    images = _pngs("canvases") + _pngs("beyond")
    prompt = " ".join([I] * len(images))
    first = generate(media, prompt, images)
    runs = [(f.mm_position.offset, f.mm_position.length, f.mm_position.is_embed.numpy().tolist())
            for f in first.mm_features]  # fmt: skip
    first.mm_cache.apply(first.mm_features)  # as when the request is sent
    calls: list[Any] = []
    original = Llama4ImageProcessor.preprocess

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return original(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Llama4ImageProcessor, "preprocess", counted)
        second = generate(media, prompt, images)
    assert not calls
    assert second.token_ids == first.token_ids
    assert [f.data for f in second.mm_features] == [None] * len(images)
    assert [(f.mm_position.offset, f.mm_position.length, f.mm_position.is_embed.numpy().tolist())
            for f in second.mm_features] == runs  # fmt: skip


if __name__ == "__main__":
    share_rust_tokenizers()
    write_reference(_reference(sys.argv[1]))

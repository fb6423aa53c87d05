"""SmolVLM against vLLM 0.32's own ``SmolVLMMultiModalProcessor`` (in process, no server): PNG
images of many sizes and aspect ratios (one tile, several tiles, beyond the longest edge, tiny,
thin), one and several per prompt, sent to our multimodal facade as ``data:`` URLs; the prompt
ids with each ``<image>`` replaced by its tile grid text, the placeholder ranges with their
``is_embed`` masks, the item hashes and every field (values, dtype, shape, field factory,
slices) equal vLLM's, in bfloat16 and float32, with ``--mm-processor-kwargs`` and per-request
``mm_processor_kwargs`` that change the grid. vLLM serves SmolVLM images only: a video part gets
the limit error vLLM's processing info raises for it.

vLLM's processor builds transformers' ``SmolVLMProcessor``, whose video processor needs
torchvision (and ``num2words``): the reference runs in a subprocess on
:data:`tests.support.tiny_vlm.VLM_PYTHONPATH` (this module run as a script)."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from tests.multimodal.family_oracle import (
    assert_request_equals,
    facade,
    generate,
    pngs,
    run_reference_cached,
    vllm_requests,
    write_reference,
)
from tests.support.render_reference import share_rust_tokenizers
from tests.support.tiny_smolvlm import IMAGE, TILE, tiny_smolvlm_dir
from vllm_frontend.multimodal.parts import MediaPart
from vllm_frontend.text.errors import InvalidInput

pytestmark = pytest.mark.oracle

I = "<image>"  # noqa: E741
# name: (prompt text, image sizes (w, h)).
CASES: dict[str, tuple[str, list[tuple[int, int]]]] = {
    "one image": (f"User:{I}What is it?<end_of_utterance>\nAssistant:", [(64, 48)]),
    "several": (f"a {I} b {I} c {I}", [(300, 200), (17, 300), (128, 128)]),
    "beyond the edge": (f"{I} and {I}", [(1000, 300), (700, 2000)]),
    "tiny and thin": (f"x {I}{I} y {I}", [(1, 1), (5, 3), (1, 900)]),
    "odd": (f"{I}\n{I}\n{I}", [(97, 431), (129, 127), (65, 64)]),
}
# name: (dtype, --mm-processor-kwargs, request mm_processor_kwargs)
SETTINGS: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "bf16": ("bfloat16", {}, {}),
    "f32 unsplit": ("float32", {"do_image_splitting": False}, {}),
    "bf16 larger tiles, request size": (
        "bfloat16",
        {"max_image_size": {"longest_edge": 2 * TILE}},
        {"size": {"longest_edge": 6 * TILE}},
    ),
}


def _reference(model: str) -> dict[str, Any]:
    """vLLM's processor outputs per setting and case, and its refusal of a video (run in the
    subprocess)."""
    from vllm.config import ModelConfig
    from vllm.multimodal import MULTIMODAL_REGISTRY

    out: dict[str, Any] = {
        setting: vllm_requests(
            model, {"dtype": dtype, "mm_processor_kwargs": kwargs or None}, CASES, request
        )
        for setting, (dtype, kwargs, request) in SETTINGS.items()
    }
    processor = MULTIMODAL_REGISTRY.create_processor(
        ModelConfig(model=model, tokenizer=model, max_model_len=8192)
    )
    try:
        processor.info.validate_num_items("video", 1)
    except Exception as e:  # vLLM's VLLMValidationError (its 400)
        out["video"] = (type(e).__name__, str(e), getattr(e, "parameter", None))
    out["architecture"] = type(processor).__name__
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    staging = tmp_path_factory.mktemp("smolvlm") / "reference.pkl"
    out: dict[str, Any] = run_reference_cached(__name__, [tiny_smolvlm_dir()], staging)
    return out


_FACADES: dict[str, Any] = {}


def _facade(setting: str) -> Any:
    media = _FACADES.get(setting)
    if media is None:
        dtype, kwargs, _ = SETTINGS[setting]
        media = _FACADES[setting] = facade(tiny_smolvlm_dir(), dtype, mm_processor_kwargs=kwargs)
    return media


@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize("name", list(CASES))
def test_engine_request_equals_vllms_processor(
    reference: dict[str, Any], name: str, setting: str
) -> None:
    want = reference[setting][name]
    assert "error" not in want, want
    media = _facade(setting)
    text, sizes = CASES[name]
    assert media.text.tokenizer.encode(text, add_special_tokens=False) == want["prompt"]
    assert want["prompt"].count(IMAGE) == len(sizes)
    request_kwargs = SETTINGS[setting][2]
    assert_request_equals(generate(media, text, pngs(name, sizes), request_kwargs), want)


def test_the_cases_are_not_vacuous(reference: dict[str, Any]) -> None:
    # vLLM's SmolVLM processor ran, and the settings change the grids it made.
    assert reference["architecture"] == "Idefics3MultiModalProcessor"
    lengths = {
        setting: [r[1] for r in reference[setting]["beyond the edge"]["ranges"]]
        for setting in SETTINGS
    }
    assert len({tuple(v) for v in lengths.values()}) == len(SETTINGS), lengths
    assert len(set(lengths["bf16"])) == 1 or lengths["bf16"][0] != lengths["bf16"][1]


def test_a_video_is_refused_as_vllm_refuses_it(reference: dict[str, Any]) -> None:
    # vLLM 0.32 serves SmolVLM images only (its processing info supports no video), though
    # transformers' SmolVLM processor takes videos.
    kind, message, parameter = reference["video"]
    assert kind == "VLLMValidationError"
    parts = _facade("bf16").new_parts()
    with pytest.raises(InvalidInput) as caught:
        parts.add(MediaPart("video", "data:video/mp4;base64,AAAA"))
    assert str(caught.value) == message
    assert caught.value.parameter == parameter == "video"


if __name__ == "__main__":
    share_rust_tokenizers()
    write_reference(_reference(sys.argv[1]))

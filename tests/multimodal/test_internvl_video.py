"""InternVL (Hugging Face format) videos against vLLM 0.32's own ``InternS1MultiModalProcessor``
and transformers' ``InternVLVideoProcessor`` (no server, no engine), on the tiny config-only
InternVL of :mod:`tests.support.tiny_internvl` (which ships no ``video_preprocessor_config.json``:
its video processor reads ``preprocessor_config.json``, as transformers falls back to it):

- videos of many frame counts and sizes (downscaled, upscaled, already the tile size), alone and
  with images around them, through our family and vLLM's processor, bfloat16 and float32 and
  with server processor kwargs: the prompt ids with each ``<video>`` replaced by its frames'
  text, the placeholder ranges with their ``is_embed`` masks, and every field (values, dtype,
  shape, field factory and its arguments) equal;
- the video processor alone, as vLLM builds it (the image processor's tile size): ours bit-exact
  with transformers' on random videos of many sizes;
- a video part whose payload is not a video gets a 400 and the engine is never asked.

vLLM's InternVL code imports transformers' torchvision-backed processors, so the reference runs
in a subprocess on :data:`tests.support.tiny_vlm.VLM_PYTHONPATH` (this module run as a script)."""

from __future__ import annotations

import asyncio
import json
import sys
import zlib
from typing import Any

import numpy as np
import pytest
from PIL import Image

from tests.multimodal.family_oracle import facade, run_reference_cached, write_reference
from tests.multimodal.processor_oracle import assert_same_outputs
from tests.support.render_reference import share_rust_tokenizers
from tests.support.tiny_internvl import IMG_CONTEXT, LLAMA3_VOCAB, tiny_internvl_dir

pytestmark = pytest.mark.oracle

VIDEO = LLAMA3_VOCAB + 3
"""The tiny InternVL's ``<video>`` token id."""
# name: (dtype, --mm-processor-kwargs)
SETTINGS: dict[str, tuple[str, dict[str, Any]]] = {
    "bfloat16": ("bfloat16", {}),
    "float32": ("float32", {}),
    "max 2 tiles": ("bfloat16", {"max_patches": 2}),
    # (vLLM builds the video processor with the processor kwargs too: the mean is both's)
    "mean and std": ("float32", {"image_mean": [0.5, 0.25, 0.75], "image_std": [0.5, 0.5, 0.2]}),
}
# name: (image sizes (w, h), videos as (frames, h, w)); the prompt has the images'
# placeholders, then the videos'.
CASES: dict[str, tuple[list[tuple[int, int]], list[tuple[int, int, int]]]] = {
    "one video": ([], [(4, 90, 160)]),
    "videos": ([], [(1, 28, 28), (3, 17, 23), (6, 200, 120)]),
    "images and videos": ([(97, 431), (120, 80)], [(2, 64, 48), (5, 40, 300)]),
}
# The video processor alone: (frames, h, w) of random videos (not 1 or 3 pixels high, which
# transformers takes for channels-first frames).
VIDEO_SIZES = [(1, 2, 2), (2, 4, 500), (4, 28, 28), (3, 57, 55), (2, 384, 384), (5, 99, 31),
               (1, 720, 1280), (2, 500, 2)]  # fmt: skip


def _inputs(name: str) -> tuple[list[Image.Image], list[np.ndarray], list[int]]:
    """A case's images, videos and prompt ids."""
    sizes, videos = CASES[name]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    images = [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for w, h in sizes]
    clips = [rng.integers(0, 256, (t, h, w, 3), dtype=np.uint8) for t, h, w in videos]
    prompt = [5] + [IMG_CONTEXT, 6] * len(images) + [VIDEO, 7] * len(clips)
    return images, clips, prompt


def _random_videos() -> list[np.ndarray]:
    rng = np.random.default_rng(11)
    return [rng.integers(0, 256, (t, h, w, 3), dtype=np.uint8) for t, h, w in VIDEO_SIZES]


def _entry(elem: Any) -> tuple[Any, ...]:
    import dataclasses

    data, field = elem.data, elem.field
    kwargs = {}
    for f in dataclasses.fields(field):
        value = getattr(field, f.name)
        if f.name == "slices":
            value = [[[int(s.start), int(s.stop), s.step] for s in item] for item in value]
        kwargs[f.name] = value
    return (str(data.dtype).removeprefix("torch."), tuple(data.shape), data.float().numpy(),
            type(field).__name__, kwargs)  # fmt: skip


def _reference(model: str) -> dict[Any, Any]:
    """vLLM's processor outputs per setting and case, and transformers' video processor outputs
    (run in the subprocess)."""
    from transformers import InternVLVideoProcessor
    from vllm.config import ModelConfig
    from vllm.multimodal import MULTIMODAL_REGISTRY
    from vllm.multimodal.processing.context import TimingContext
    from vllm.multimodal.processing.inputs import ProcessorInputs

    out: dict[Any, Any] = {}
    for setting, (dtype, kwargs) in SETTINGS.items():
        config = ModelConfig(model=model, tokenizer=model, max_model_len=8192, dtype=dtype,
                             mm_processor_kwargs=kwargs or None)  # fmt: skip
        processor = MULTIMODAL_REGISTRY.create_processor(config)
        for name in CASES:
            images, clips, prompt = _inputs(name)
            data: dict[str, Any] = {"video": [(c, {"fps": 2.0}) for c in clips]}
            if images:
                data["image"] = images
            result = processor.apply(
                ProcessorInputs(prompt, processor.info.parse_mm_data(data)),
                TimingContext(enabled=False),
            )
            out[setting, name] = {
                "ids": list(result["prompt_token_ids"]),
                "ranges": {m: [(r.offset, r.length, None if r.is_embed is None
                                else r.is_embed.tolist()) for r in rs]
                           for m, rs in result["mm_placeholders"].items()},
                "fields": {m: [{k: _entry(e) for k, e in item.items()} for item in items]
                           for m, items in result["mm_kwargs"].items()},
            }  # fmt: skip
        if setting == "bfloat16":
            video_processor = processor.info.get_hf_processor().video_processor
            assert isinstance(video_processor, InternVLVideoProcessor)
            out["videos"] = [
                video_processor(videos=[clip], return_tensors="pt")["pixel_values_videos"][
                    0
                ].numpy()
                for clip in _random_videos()
            ]
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[Any, Any]:
    staging = tmp_path_factory.mktemp("internvl-video") / "reference.pkl"
    out: dict[Any, Any] = run_reference_cached(__name__, [tiny_internvl_dir()], staging)
    return out


_FACADES: dict[str, Any] = {}


def _facade(setting: str) -> Any:
    if setting not in _FACADES:
        dtype, kwargs = SETTINGS[setting]
        _FACADES[setting] = facade(tiny_internvl_dir(), dtype, mm_processor_kwargs=kwargs)
    return _FACADES[setting]


@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize("name", list(CASES))
def test_videos_equal_vllms_processor(reference: dict[Any, Any], name: str, setting: str) -> None:
    from vllm_frontend.multimodal.llm import _expand
    from vllm_frontend.multimodal.media import ImageItem, VideoItem
    from vllm_frontend.multimodal.parts import MediaPart

    want = reference[setting, name]
    dtype = SETTINGS[setting][0]
    family = _facade(setting).family
    images, clips, prompt = _inputs(name)
    processed = []
    if images:
        processed += family.process("image", [ImageItem(i, b"", None) for i in images], {}, dtype)
    processed += family.process("video", [VideoItem(c, {}, b"") for c in clips], {}, dtype)
    parts = [MediaPart("image", None, f"i{i}") for i in range(len(images))]
    parts += [MediaPart("video", None, f"v{i}") for i in range(len(clips))]
    ids, features = _expand(prompt, family, parts, processed, [p.uuid or "" for p in parts])
    assert ids == want["ids"]
    ranges: dict[str, list[Any]] = {}
    fields: dict[str, list[Any]] = {}
    for feature in features:
        position = feature.mm_position
        embed = None if position.is_embed is None else position.is_embed.numpy().tolist()
        ranges.setdefault(feature.modality, []).append((position.offset, position.length, embed))
        fields.setdefault(feature.modality, []).append(feature.data or {})
    assert ranges == want["ranges"]
    assert set(fields) == set(want["fields"])
    for modality, theirs in want["fields"].items():
        for mine, item in zip(fields[modality], theirs, strict=True):
            assert set(mine) == set(item)
            for key, (tdtype, shape, values, kind, options) in item.items():
                factory, ours = mine[key].field
                assert kind.lower() == f"multimodal{factory}field", key
                for option, value in options.items():
                    if option in ours:
                        assert ours[option] == value, (key, option)
                tensor = mine[key].data
                assert (tensor.dtype, tensor.shape) == (tdtype, shape), key
                assert np.array_equal(tensor.numpy().astype(np.float32), values), key
    # A held video's placeholder is told from its frame count alone.
    for clip, item in zip(clips, processed[len(images) :], strict=True):
        held = family.held_item("video", VideoItem(clip, {}, b""), {})
        assert held.replacement == item.replacement


def test_video_processor_equals_transformers(reference: dict[Any, Any]) -> None:
    from vllm_frontend.multimodal.processors.torch_video import (
        INTERNVL_DEFAULTS,
        TorchVideoProcessor,
    )

    model = tiny_internvl_dir()
    config = json.loads((model / "preprocessor_config.json").read_text())
    ours = TorchVideoProcessor(config, INTERNVL_DEFAULTS)
    for clip, want in zip(_random_videos(), reference["videos"], strict=True):
        got = ours.preprocess_video(clip, size=config["size"])
        assert_same_outputs({"v": want}, {"v": got}, f"video {clip.shape}")


def test_the_cases_are_not_vacuous(reference: dict[Any, Any]) -> None:
    ranges = reference["bfloat16", "videos"]["ranges"]["video"]
    assert len({length for _, length, _ in ranges}) == 3
    fields = reference["bfloat16", "images and videos"]["fields"]
    assert fields["video"][0]["pixel_values_videos"][1] == (2, 3, 28, 28)  # its own frames
    plain, means = (
        reference[setting, "one video"]["fields"]["video"][0]["pixel_values_videos"][2]
        for setting in ("float32", "mean and std")
    )
    assert not np.array_equal(plain, means)  # the server's mean and std reach the videos


def test_a_payload_that_is_not_a_video_is_a_400() -> None:
    from vllm_frontend.multimodal.media import MediaError
    from vllm_frontend.multimodal.parts import MediaPart
    from vllm_frontend.text.llm import TextRequest
    from vllm_frontend.text.sampling import SamplingRequest

    media = _facade("bfloat16")
    parts = media.new_parts()
    parts.add(MediaPart("video", "data:video/mp4;base64,AAAA"))
    request = TextRequest(request_id="r", max_tokens=4, sampling=SamplingRequest(),
                          add_special_tokens=False)  # fmt: skip
    with pytest.raises(MediaError) as caught:
        asyncio.run(media.generate(request, "a <video> b", parts))
    assert caught.value.status == 400


if __name__ == "__main__":
    share_rust_tokenizers()
    write_reference(_reference(sys.argv[1]))

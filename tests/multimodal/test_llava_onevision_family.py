"""LLaVA-OneVision against vLLM 0.32's own ``LlavaOnevisionMultiModalProcessor`` and
transformers' ``LlavaOnevisionVideoProcessor`` (no server, no engine), on the tiny model of
:mod:`tests.support.tiny_llava_onevision`:

- image chat: PNG images of many sizes and aspect ratios (small, wide, tall, large enough for
  vLLM's "anyres_max_9" reduction), one and several per prompt, sent to our facade as ``data:``
  URLs; the prompt ids with each ``<image>`` expanded, placeholder ranges, item hashes and every
  field (values, dtype, shape, field factory) equal vLLM's, bfloat16 and float32;
- images and videos: frames of many counts and sizes (downscaled, upscaled, already the tower's
  size) with images around them, through our family and vLLM's processor: prompt ids, ranges and
  ``pixel_values_videos`` equal;
- video chat: ``video/jpeg`` data URLs (JPEG frames) with an image, decoded by vLLM's
  ``MediaConnector`` for its side and by our loader for ours: prompt ids, item hashes, ranges
  and fields equal;
- the video processor alone: ours bit-exact with transformers' on random videos of many sizes.

vLLM's processor builds transformers' ``LlavaOnevisionProcessor``, whose video processor needs
torchvision: the reference runs in a subprocess on :data:`tests.support.tiny_vlm.VLM_PYTHONPATH`
(this module run as a script; its torchvision stand-in resizes with torch's own
``interpolate``, as torchvision does)."""

from __future__ import annotations

import sys
import zlib
from typing import Any

import numpy as np
import pytest
from PIL import Image

from tests.multimodal.family_oracle import (
    assert_request_equals,
    facade,
    generate,
    pngs,
    run_reference_cached,
    write_reference,
)
from tests.multimodal.processor_oracle import assert_same_outputs
from tests.support.render_reference import share_rust_tokenizers
from tests.support.tiny_llava_onevision import IMAGE, VIDEO, tiny_llava_onevision_dir

pytestmark = pytest.mark.oracle

I = "<image>"  # noqa: E741
V = "<video>"
DTYPES = ("bfloat16", "float32")
# Image chat: name -> (prompt text, image sizes (w, h)).
IMAGE_CASES: dict[str, tuple[str, list[tuple[int, int]]]] = {
    "one image": (f"USER: {I}\nWhat is it? ASSISTANT:", [(64, 48)]),
    "several": (f"a {I} b {I} c {I}", [(300, 200), (17, 300), (56, 56)]),
    "large": (f"{I} and {I}", [(336, 336), (1000, 700)]),
    "wide and tall": (f"{I}{I}{I}", [(1000, 90), (40, 700), (1, 1)]),
}
# Images and videos: name -> (image sizes (w, h), videos as (frames, h, w)); the prompt has the
# images' placeholders, then the videos'.
MIXED_CASES: dict[str, tuple[list[tuple[int, int]], list[tuple[int, int, int]]]] = {
    "one video": ([], [(4, 90, 160)]),
    "videos": ([], [(1, 56, 56), (3, 17, 23), (6, 200, 120)]),
    "images and videos": ([(97, 431), (120, 80)], [(2, 64, 48), (5, 40, 300)]),
}
# The video processor alone: (frames, h, w) of random videos. (Not 1 or 3 pixels high:
# transformers then guesses the frames are channels-first, [T, C, H, W], and processes a
# different image.)
VIDEO_SIZES = [(1, 2, 2), (2, 4, 500), (4, 56, 56), (3, 57, 55), (2, 384, 384), (5, 99, 31),
               (2, 240, 320), (1, 720, 1280), (3, 28, 112), (2, 500, 2)]  # fmt: skip


def _mixed_inputs(name: str) -> tuple[list[Image.Image], list[np.ndarray], list[int]]:
    """A mixed case's images, videos and prompt ids."""
    sizes, videos = MIXED_CASES[name]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    images = [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for w, h in sizes]
    clips = [rng.integers(0, 256, (t, h, w, 3), dtype=np.uint8) for t, h, w in videos]
    prompt = [5] + [IMAGE, 6] * len(images) + [VIDEO, 7] * len(clips)
    return images, clips, prompt


# Video chat: (prompt text, image sizes (w, h), videos as (frames, h, w) of JPEG frames).
CHAT_TEXT = f"USER: {I}\nand {V} then {V}? ASSISTANT:"
CHAT_IMAGES = [(100, 60)]
CHAT_VIDEOS = [(3, 48, 64), (5, 90, 40)]


def _jpeg_video_urls() -> list[str]:
    """``video/jpeg`` data URLs of random JPEG frames (comma-separated base64 frames)."""
    import base64
    import io

    rng = np.random.default_rng(3)
    urls = []
    for t, h, w in CHAT_VIDEOS:
        frames = []
        for _ in range(t):
            buf = io.BytesIO()
            Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(buf, "JPEG")
            frames.append(base64.b64encode(buf.getvalue()).decode())
        urls.append("data:video/jpeg;base64," + ",".join(frames))
    return urls


def _random_videos() -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    return [rng.integers(0, 256, (t, h, w, 3), dtype=np.uint8) for t, h, w in VIDEO_SIZES]


def _entry(elem: Any) -> tuple[Any, ...]:
    data, kind = elem.data, type(elem.field).__name__
    return (str(data.dtype).removeprefix("torch."), tuple(data.shape), data.float().numpy(),
            kind, getattr(elem.field, "keep_on_cpu", None))  # fmt: skip


def _reference(model: str) -> dict[str, Any]:
    """vLLM's processor outputs per dtype and case, and transformers' video processor outputs
    (run in the subprocess)."""
    from transformers import LlavaOnevisionVideoProcessor
    from vllm.config import ModelConfig
    from vllm.multimodal import MULTIMODAL_REGISTRY
    from vllm.multimodal.media.connector import MediaConnector
    from vllm.multimodal.media.image import ImageMediaIO
    from vllm.multimodal.processing.context import TimingContext
    from vllm.multimodal.processing.inputs import ProcessorInputs

    out: dict[str, Any] = {}
    for dtype in DTYPES:
        config = ModelConfig(model=model, tokenizer=model, max_model_len=8192, dtype=dtype)
        processor = MULTIMODAL_REGISTRY.create_processor(config)
        tokenizer = processor.info.get_tokenizer()
        for name, (text, sizes) in IMAGE_CASES.items():
            prompt = tokenizer.encode(text, add_special_tokens=False)
            images = [ImageMediaIO().load_bytes(png) for png in pngs(name, sizes)]
            result = processor.apply(
                ProcessorInputs(prompt, processor.info.parse_mm_data({"image": images})),
                TimingContext(enabled=False),
            )
            out[dtype, name] = {
                "prompt": prompt,
                "ids": list(result["prompt_token_ids"]),
                "hashes": list(result["mm_hashes"]["image"]),
                "ranges": [(r.offset, r.length, None) for r in result["mm_placeholders"]["image"]],
                "fields": [{k: (*_entry(e), None) for k, e in item.items()}
                           for item in result["mm_kwargs"]["image"]],
            }  # fmt: skip
        for name in MIXED_CASES:
            images, clips, prompt = _mixed_inputs(name)
            data: dict[str, Any] = {"video": [(c, {"fps": 2.0}) for c in clips]}
            if images:
                data["image"] = images
            result = processor.apply(
                ProcessorInputs(prompt, processor.info.parse_mm_data(data)),
                TimingContext(enabled=False),
            )
            out[dtype, name] = {
                "ids": list(result["prompt_token_ids"]),
                "ranges": {m: [(r.offset, r.length) for r in rs]
                           for m, rs in result["mm_placeholders"].items()},
                "fields": {m: [{k: _entry(e) for k, e in item.items()} for item in items]
                           for m, items in result["mm_kwargs"].items()},
            }  # fmt: skip
        tokenizer = processor.info.get_tokenizer()
        connector = MediaConnector()
        images = [ImageMediaIO().load_bytes(png) for png in pngs("chat", CHAT_IMAGES)]
        videos = [connector.fetch_video(url, video_processor="LlavaOnevisionVideoProcessor")
                  for url in _jpeg_video_urls()]  # fmt: skip
        result = processor.apply(
            ProcessorInputs(
                tokenizer.encode(CHAT_TEXT, add_special_tokens=False),
                processor.info.parse_mm_data({"image": images, "video": videos}),
            ),
            TimingContext(enabled=False),
        )
        out[dtype, "chat"] = {
            "ids": list(result["prompt_token_ids"]),
            "hashes": {m: list(h) for m, h in result["mm_hashes"].items()},
            "ranges": {m: [(r.offset, r.length) for r in rs]
                       for m, rs in result["mm_placeholders"].items()},
            "fields": {m: [{k: _entry(e) for k, e in item.items()} for item in items]
                       for m, items in result["mm_kwargs"].items()},
        }  # fmt: skip
    video_processor = LlavaOnevisionVideoProcessor.from_pretrained(model)
    out["videos"] = [
        video_processor(videos=[clip], return_tensors="pt")["pixel_values_videos"][0].numpy()
        for clip in _random_videos()
    ]
    out["video_processor"] = type(video_processor).__name__
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    staging = tmp_path_factory.mktemp("onevision") / "reference.pkl"
    out: dict[str, Any] = run_reference_cached(__name__, [tiny_llava_onevision_dir()], staging)
    return out


_FACADES: dict[str, Any] = {}


def _facade(dtype: str) -> Any:
    if dtype not in _FACADES:
        _FACADES[dtype] = facade(tiny_llava_onevision_dir(), dtype)
    return _FACADES[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(IMAGE_CASES))
def test_image_chat_engine_request_equals_vllms(
    reference: dict[str, Any], name: str, dtype: str
) -> None:
    want = reference[dtype, name]
    media = _facade(dtype)
    text, sizes = IMAGE_CASES[name]
    assert media.text.tokenizer.encode(text, add_special_tokens=False) == want["prompt"]
    assert_request_equals(generate(media, text, pngs(name, sizes)), want)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(MIXED_CASES))
def test_images_and_videos_equal_vllms_processor(
    reference: dict[str, Any], name: str, dtype: str
) -> None:
    from vllm_frontend.multimodal.llm import _expand
    from vllm_frontend.multimodal.media import ImageItem, VideoItem
    from vllm_frontend.multimodal.parts import MediaPart

    want = reference[dtype, name]
    family = _facade(dtype).family
    images, clips, prompt = _mixed_inputs(name)
    processed = family.process("image", [ImageItem(i, b"", None) for i in images], {}, dtype)
    processed += family.process("video", [VideoItem(c, {}, b"") for c in clips], {}, dtype)
    parts = [MediaPart("image", None, f"i{i}") for i in range(len(images))]
    parts += [MediaPart("video", None, f"v{i}") for i in range(len(clips))]
    ids, features = _expand(prompt, family, parts, processed, [p.uuid or "" for p in parts])
    assert ids == want["ids"]
    ranges: dict[str, list[Any]] = {}
    fields: dict[str, list[Any]] = {}
    for feature in features:
        assert feature.mm_position.is_embed is None
        ranges.setdefault(feature.modality, []).append(
            (feature.mm_position.offset, feature.mm_position.length)
        )
        fields.setdefault(feature.modality, []).append(feature.data or {})
    assert ranges == want["ranges"]
    assert set(fields) == set(want["fields"])
    for modality, theirs in want["fields"].items():
        for mine, item in zip(fields[modality], theirs, strict=True):
            assert set(mine) == set(item)
            for key, (tdtype, shape, values, kind, keep_on_cpu) in item.items():
                factory, options = mine[key].field
                assert kind.lower() == f"multimodal{factory}field", key
                assert options.get("keep_on_cpu") == keep_on_cpu, key
                tensor = mine[key].data
                assert (tensor.dtype, tensor.shape) == (tdtype, shape), key
                assert np.array_equal(tensor.numpy().astype(np.float32), values), key
    # A held video's placeholder is told from its frame count alone.
    for clip, item in zip(clips, processed[len(images) :], strict=True):
        assert family.item_tokens("video", VideoItem(clip, {}, b""), {}) == item.num_tokens


@pytest.mark.parametrize("dtype", DTYPES)
def test_video_chat_engine_request_equals_vllms(reference: dict[str, Any], dtype: str) -> None:
    import asyncio
    import base64

    from vllm_frontend.multimodal.parts import MediaPart
    from vllm_frontend.text.llm import TextRequest
    from vllm_frontend.text.sampling import SamplingRequest

    want = reference[dtype, "chat"]
    media = _facade(dtype)
    parts = media.new_parts()
    for png in pngs("chat", CHAT_IMAGES):
        parts.add(MediaPart("image", "data:image/png;base64," + base64.b64encode(png).decode()))
    for url in _jpeg_video_urls():
        parts.add(MediaPart("video", url))
    request = TextRequest(request_id="r", max_tokens=4, sampling=SamplingRequest(),
                          add_special_tokens=False)  # fmt: skip
    [prepared] = asyncio.run(media.generate(request, CHAT_TEXT, parts)).prompts
    assert prepared.token_ids == want["ids"]
    hashes: dict[str, list[str]] = {}
    ranges: dict[str, list[Any]] = {}
    fields: dict[str, list[Any]] = {}
    for feature in prepared.mm_features:
        assert feature.identifier == feature.mm_hash
        hashes.setdefault(feature.modality, []).append(feature.mm_hash)
        ranges.setdefault(feature.modality, []).append(
            (feature.mm_position.offset, feature.mm_position.length)
        )
        fields.setdefault(feature.modality, []).append(feature.data or {})
    assert hashes == want["hashes"]
    assert ranges == want["ranges"]
    for modality, theirs in want["fields"].items():
        for mine, item in zip(fields[modality], theirs, strict=True):
            assert set(mine) == set(item)
            for key, (tdtype, shape, values, _, _) in item.items():
                tensor = mine[key].data
                assert (tensor.dtype, tensor.shape) == (tdtype, shape), key
                assert np.array_equal(tensor.numpy().astype(np.float32), values), key


def test_video_processor_equals_transformers(reference: dict[str, Any]) -> None:
    import json

    from vllm_frontend.multimodal.processors.torch_video import (
        LLAVA_ONEVISION_DEFAULTS,
        TorchVideoProcessor,
    )

    assert reference["video_processor"] == "LlavaOnevisionVideoProcessor"
    model = tiny_llava_onevision_dir()
    config = json.loads((model / "video_preprocessor_config.json").read_text())
    ours = TorchVideoProcessor(config, LLAVA_ONEVISION_DEFAULTS)
    for clip, want in zip(_random_videos(), reference["videos"], strict=True):
        got = ours.preprocess_video(clip)
        assert_same_outputs({"v": want}, {"v": got}, f"video {clip.shape}")


def test_the_cases_are_not_vacuous(reference: dict[str, Any]) -> None:
    # Image token counts differ by size (the large one past the anyres_max_9 reduction), and
    # videos' by frame count.
    lengths = [r[1] for r in reference["bfloat16", "large"]["ranges"]]
    assert len(set(lengths)) == 2
    videos = [length for _, length in reference["bfloat16", "videos"]["ranges"]["video"]]
    assert videos == [4 * 1 + 1, 4 * 3 + 1, 4 * 6 + 1]


if __name__ == "__main__":
    share_rust_tokenizers()
    write_reference(_reference(sys.argv[1]))

"""The Qwen2.5-VL and Qwen3-VL model types of the Qwen2-VL family against vLLM 0.32's own
``Qwen2_5_VLMultiModalProcessor`` and ``Qwen3VLMultiModalProcessor`` (no server): for images of
many sizes and videos of many frame counts, sizes and loader metadata (Qwen2.5-VL: the sampled
frame rate gives ``second_per_grid_ts``; Qwen3-VL: the frames' timestamps, written in the
prompt, and the processor's own frame sampling when the loader kept every frame), in the
engine's dtypes, the expanded prompt ids, the placeholder ranges with their ``is_embed`` masks
and every field (values, dtype, shape, field factory) equal vLLM's, and where vLLM's processor
refuses an item (a one-frame video for Qwen3-VL) ours refuses it with the same message.

vLLM's Qwen-VL code imports torchvision, so the reference runs in a subprocess on
:data:`tests.support.tiny_vlm.VLM_PYTHONPATH` (this module run as a script)."""

from __future__ import annotations

import os
import pathlib
import pickle
import subprocess
import sys
import zlib
from typing import Any

import numpy as np
import pytest
from PIL import Image

from tests.support.render_reference import share_rust_tokenizers
from tests.support.tiny_qwen3_vl import tiny_qwen3_vl_dir
from tests.support.tiny_qwen25_vl import tiny_qwen25_vl_dir
from tests.support.tiny_vlm import IMAGE_PAD, VIDEO_PAD, VISION_END, VISION_START, VLM_PYTHONPATH

pytestmark = pytest.mark.oracle

ROOT = pathlib.Path(__file__).resolve().parents[2]
DTYPES = ("bfloat16", "float32")
MODELS = {"qwen2_5_vl": tiny_qwen25_vl_dir, "qwen3_vl": tiny_qwen3_vl_dir}

# Per case: image sizes (w, h), then videos as (frames, h, w, fps, total frames in the
# container; the frames sampled evenly from them).
CASES: dict[str, tuple[list[tuple[int, int]], list[tuple[int, int, int, float, int]]]] = {
    "one image": ([(64, 48)], []),
    "images": ([(300, 200), (97, 431), (20, 20), (1000, 90)], []),
    "one video": ([], [(6, 64, 96, 8.0, 24)]),
    "videos": ([], [(4, 50, 70, 30.0, 60), (3, 90, 160, 5.0, 10), (8, 28, 28, 2.0, 8)]),
    "odd frames": ([], [(5, 84, 56, 12.5, 40), (3, 64, 64, 1.0, 9)]),
    "all frames": ([], [(4, 56, 56, 10.0, 4)]),
    "images and videos": ([(64, 48), (97, 431)], [(6, 64, 96, 8.0, 24), (2, 40, 40, 3.0, 3)]),
    "processor samples": ([], [(30, 48, 64, 6.0, 30), (9, 40, 72, 2.5, 9)]),
    "one frame": ([], [(1, 64, 64, 1.0, 1)]),
}


def _inputs(name: str) -> tuple[list[Image.Image], list[tuple[np.ndarray, dict[str, Any]]]]:
    """The case's images and videos (frames with the metadata a vLLM loader gives them)."""
    sizes, videos = CASES[name]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    images = [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for w, h in sizes]
    out = []
    for frames, h, w, fps, total in videos:
        array = rng.integers(0, 256, (frames, h, w, 3), dtype=np.uint8)
        step = total // frames
        metadata = {
            "total_num_frames": total,
            "fps": fps,
            "duration": total / fps,
            "video_backend": "opencv",
            "frames_indices": [i * step for i in range(frames)],
            # As vLLM's loaders say: the processor samples when the loader kept every frame.
            "do_sample_frames": frames == total,
        }
        out.append((array, metadata))
    return images, out


def _prompt(name: str) -> list[int]:
    sizes, videos = CASES[name]
    ids = [5]
    for _ in sizes:
        ids += [VISION_START, IMAGE_PAD, VISION_END, 6]
    for _ in videos:
        ids += [VISION_START, VIDEO_PAD, VISION_END, 7]
    return ids


def _entry(elem: Any) -> tuple[Any, ...]:
    """A field element as (dtype, shape, values, field class, keep_on_cpu)."""
    data, kind = elem.data, type(elem.field).__name__
    keep = getattr(elem.field, "keep_on_cpu", None)
    if isinstance(data, list):  # Qwen3-VL's timestamps
        return ("list", (len(data),), data, kind, keep)
    return (str(data.dtype).removeprefix("torch."), tuple(data.shape), data.float().numpy(),
            kind, keep)  # fmt: skip


def _reference(model: str, dtype: str) -> dict[str, Any]:
    """vLLM's processor outputs (or its error) per case (run in the subprocess)."""
    from vllm.config import ModelConfig
    from vllm.multimodal import MULTIMODAL_REGISTRY
    from vllm.multimodal.processing.context import TimingContext
    from vllm.multimodal.processing.inputs import ProcessorInputs

    config = ModelConfig(model=model, tokenizer=model, max_model_len=4096, dtype=dtype)
    processor = MULTIMODAL_REGISTRY.create_processor(config)
    results: dict[str, Any] = {}
    for name in CASES:
        images, videos = _inputs(name)
        data: dict[str, Any] = {}
        if images:
            data["image"] = images
        if videos:
            data["video"] = videos
        items = processor.info.parse_mm_data(data)
        try:
            out = processor.apply(
                ProcessorInputs(_prompt(name), items), TimingContext(enabled=False)
            )
        except ValueError as e:
            # vLLM's message wraps transformers' (with the whole input's repr): keep both.
            results[name] = {"error": str(e), "cause": str(e.__cause__ or e)}
            continue
        fields = {
            modality: [{key: _entry(elem) for key, elem in item.items()} for item in items]
            for modality, items in out["mm_kwargs"].items()
        }
        ranges = {
            m: [(r.offset, r.length, None if r.is_embed is None else r.is_embed.tolist())
                for r in rs]
            for m, rs in out["mm_placeholders"].items()
        }  # fmt: skip
        results[name] = {"ids": list(out["prompt_token_ids"]), "ranges": ranges, "fields": fields}
    return results


def _all_references() -> dict[tuple[str, str], Any]:
    """Every model type's and dtype's reference outputs (in one subprocess: vLLM imports once)."""
    return {
        (model_type, dtype): _reference(str(model_dir()), dtype)
        for model_type, model_dir in MODELS.items()
        for dtype in DTYPES
    }


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Any]:
    for model_dir in MODELS.values():
        model_dir()  # built here, not in the subprocess
    target = tmp_path_factory.mktemp("qwen-vl") / "reference.pkl"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([VLM_PYTHONPATH, str(ROOT)]))
    subprocess.run(
        [sys.executable, __file__, str(target)], check=True, env=env, cwd=ROOT, timeout=900
    )
    out: dict[tuple[str, str], Any] = pickle.loads(target.read_bytes())
    return out


def _ours(model_type: str, name: str, dtype: str) -> tuple[list[int], list[Any]]:
    from vllm_frontend.multimodal.llm import MultimodalOptions, _expand, load_family
    from vllm_frontend.multimodal.media import ImageItem, VideoItem
    from vllm_frontend.multimodal.parts import MediaPart
    from vllm_frontend.text.tokenizer import Tokenizer

    model = MODELS[model_type]()
    tokenizer = Tokenizer.from_dir(model)

    def encode(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False)

    family = load_family(model, {"model_type": model_type}, tokenizer.token_to_id,
                         MultimodalOptions(), encode)  # fmt: skip
    assert family is not None
    images, videos = _inputs(name)
    processed = []
    parts = []
    if images:
        items = [ImageItem(image, b"", None) for image in images]
        processed += family.process("image", items, {}, dtype)
        parts += [MediaPart("image", None, f"i{i}") for i in range(len(images))]
    if videos:
        clips = [VideoItem(frames, metadata, b"") for frames, metadata in videos]
        processed += family.process("video", clips, {}, dtype)
        parts += [MediaPart("video", None, f"v{i}") for i in range(len(videos))]
    hashes = [part.uuid or "" for part in parts]
    return _expand(_prompt(name), family, parts, processed, hashes)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("model_type", list(MODELS))
def test_family_equals_vllms_processor(
    reference: dict[tuple[str, str], Any], model_type: str, name: str, dtype: str
) -> None:
    from vllm_frontend.multimodal.media import MediaError

    want = reference[model_type, dtype][name]
    if "error" in want:
        with pytest.raises(MediaError) as caught:
            _ours(model_type, name, dtype)
        assert caught.value.status == 400
        assert want["error"].startswith("Failed to apply Qwen3VLProcessor on data=")
        assert str(caught.value) == want["cause"]  # transformers' own words, not the repr
        return
    ids, features = _ours(model_type, name, dtype)
    assert ids == want["ids"]
    got_ranges: dict[str, list[Any]] = {}
    got_fields: dict[str, list[dict[str, Any]]] = {}
    for feature in features:
        position = feature.mm_position
        embed = None if position.is_embed is None else position.is_embed.numpy().tolist()
        got_ranges.setdefault(feature.modality, []).append(
            (position.offset, position.length, embed)
        )
        got_fields.setdefault(feature.modality, []).append(feature.data or {})
    assert got_ranges == want["ranges"]
    assert set(got_fields) == set(want["fields"])
    for modality, theirs in want["fields"].items():
        for mine, item in zip(got_fields[modality], theirs, strict=True):
            assert set(mine) == set(item)
            for key, (tdtype, shape, values, kind, keep_on_cpu) in item.items():
                elem = mine[key]
                factory, options = elem.field
                assert kind.lower() == f"multimodal{factory}field", key
                assert options.get("keep_on_cpu") == keep_on_cpu, key
                if tdtype == "list":
                    assert elem.data == values, key
                    continue
                tensor = elem.data
                assert tensor.dtype == tdtype, key
                assert tensor.shape == shape, key
                assert np.array_equal(tensor.numpy().astype(np.float32), values), key


if __name__ == "__main__":
    share_rust_tokenizers()
    pathlib.Path(sys.argv[1]).write_bytes(pickle.dumps(_all_references()))

"""The Qwen2.5-VL and Qwen3-VL model types of the Qwen2-VL family against vLLM 0.32's own
``Qwen2_5_VLMultiModalProcessor`` and ``Qwen3VLMultiModalProcessor`` (no server): for images of
many sizes (and, for Qwen2.5-VL, videos of many frame counts, sizes and loader metadata: the
sampled frame rate gives ``second_per_grid_ts``), in the engine's dtypes, the expanded prompt
ids, the placeholder ranges and every field (values, dtype, shape, field factory) equal vLLM's.
Qwen3-VL's videos (timestamped frames) are refused with a 400 naming the model type.

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
    "odd frames": ([], [(5, 84, 56, 12.5, 40), (1, 64, 64, 1.0, 1)]),
    "all frames": ([], [(4, 56, 56, 10.0, 4)]),
    "images and videos": ([(64, 48), (97, 431)], [(6, 64, 96, 8.0, 24), (2, 40, 40, 3.0, 3)]),
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
            "do_sample_frames": False,
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


def _cases(model_type: str) -> list[str]:
    """The cases a model type takes (Qwen3-VL: the image-only ones)."""
    return [name for name in CASES if model_type != "qwen3_vl" or not CASES[name][1]]


def _reference(model: str, dtype: str, model_type: str) -> dict[str, Any]:
    """vLLM's processor outputs per case (run in the subprocess)."""
    from vllm.config import ModelConfig
    from vllm.multimodal import MULTIMODAL_REGISTRY
    from vllm.multimodal.processing.context import TimingContext
    from vllm.multimodal.processing.inputs import ProcessorInputs

    config = ModelConfig(model=model, tokenizer=model, max_model_len=4096, dtype=dtype)
    processor = MULTIMODAL_REGISTRY.create_processor(config)
    results: dict[str, Any] = {}
    for name in _cases(model_type):
        images, videos = _inputs(name)
        data: dict[str, Any] = {}
        if images:
            data["image"] = images
        if videos:
            data["video"] = videos
        items = processor.info.parse_mm_data(data)
        out = processor.apply(ProcessorInputs(_prompt(name), items), TimingContext(enabled=False))
        fields: dict[str, list[dict[str, Any]]] = {}
        for modality, kwargs_items in out["mm_kwargs"].items():
            for item in kwargs_items:
                entry = {}
                for key, elem in item.items():
                    tensor = elem.data
                    kind = type(elem.field).__name__
                    entry[key] = (
                        str(tensor.dtype).removeprefix("torch."),
                        tuple(tensor.shape),
                        tensor.float().numpy(),
                        kind,
                        getattr(elem.field, "keep_on_cpu", None),
                    )
                fields.setdefault(modality, []).append(entry)
        ranges = {m: [(r.offset, r.length) for r in rs] for m, rs in out["mm_placeholders"].items()}
        results[name] = {"ids": list(out["prompt_token_ids"]), "ranges": ranges, "fields": fields}
    return results


def _all_references() -> dict[tuple[str, str], Any]:
    """Every model type's and dtype's reference outputs (in one subprocess: vLLM imports once)."""
    return {
        (model_type, dtype): _reference(str(model_dir()), dtype, model_type)
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


PARAMS = [(m, n) for m in MODELS for n in _cases(m)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("model_type", "name"), PARAMS)
def test_family_equals_vllms_processor(
    reference: dict[tuple[str, str], Any], model_type: str, name: str, dtype: str
) -> None:
    from vllm_frontend.multimodal.llm import MultimodalOptions, _expand, load_family
    from vllm_frontend.multimodal.media import ImageItem, VideoItem
    from vllm_frontend.multimodal.parts import MediaPart
    from vllm_frontend.text.tokenizer import Tokenizer

    want = reference[model_type, dtype][name]
    model = MODELS[model_type]()
    tokenizer = Tokenizer.from_dir(model)
    family = load_family(model, {"model_type": model_type}, tokenizer.token_to_id,
                         MultimodalOptions())  # fmt: skip
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
    ids, features = _expand(_prompt(name), family, parts, processed, hashes)

    assert ids == want["ids"]
    got_ranges: dict[str, list[tuple[int, int]]] = {}
    got_fields: dict[str, list[dict[str, Any]]] = {}
    for feature in features:
        position = feature.mm_position
        got_ranges.setdefault(feature.modality, []).append((position.offset, position.length))
        got_fields.setdefault(feature.modality, []).append(feature.data or {})
    assert got_ranges == want["ranges"]
    assert set(got_fields) == set(want["fields"])
    for modality, theirs in want["fields"].items():
        for mine, item in zip(got_fields[modality], theirs, strict=True):
            assert set(mine) == set(item)
            for key, (tdtype, shape, values, kind, keep_on_cpu) in item.items():
                elem = mine[key]
                tensor = elem.data
                assert tensor.dtype == tdtype, key
                assert tensor.shape == shape, key
                assert np.array_equal(tensor.numpy().astype(np.float32), values), key
                factory, options = elem.field
                assert kind.lower() == f"multimodal{factory}field", key
                assert options.get("keep_on_cpu") == keep_on_cpu, key


def test_qwen3_vl_videos_are_refused_naming_the_model_type() -> None:
    from vllm_frontend.multimodal.llm import MultimodalOptions, load_family
    from vllm_frontend.multimodal.media import MediaError, VideoItem
    from vllm_frontend.text.tokenizer import Tokenizer

    model = tiny_qwen3_vl_dir()
    tokenizer = Tokenizer.from_dir(model)
    family = load_family(model, {"model_type": "qwen3_vl"}, tokenizer.token_to_id,
                         MultimodalOptions())  # fmt: skip
    assert family is not None
    [(frames, metadata)] = _inputs("one video")[1]
    with pytest.raises(MediaError, match="model type 'qwen3_vl'") as caught:
        family.process("video", [VideoItem(frames, metadata, b"")], {}, "bfloat16")
    assert caught.value.status == 400


if __name__ == "__main__":
    pathlib.Path(sys.argv[1]).write_bytes(pickle.dumps(_all_references()))

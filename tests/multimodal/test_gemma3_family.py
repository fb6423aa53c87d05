"""The Gemma 3 family against vLLM 0.32's own ``Gemma3MultiModalProcessor`` (no server): for
prompts whose images sit next to newlines of every length (vLLM merges the newline tokens its
replacement puts side by side, and places each placeholder on the merged tokens), images of
many sizes, with and without pan-and-scan (``--mm-processor-kwargs``), in the engine's dtypes:
the expanded prompt ids, the placeholder ranges with their ``is_embed`` masks and every field
(values, dtype, shape, field factory) equal vLLM's.

vLLM's Gemma 3 code imports transformers' torchvision-backed processor, so the reference runs
in a subprocess on :data:`tests.support.tiny_vlm.VLM_PYTHONPATH` (this module run as a
script)."""

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
from tests.support.tiny_gemma3 import tiny_gemma3_dir
from tests.support.tiny_vlm import VLM_PYTHONPATH

pytestmark = pytest.mark.oracle

ROOT = pathlib.Path(__file__).resolve().parents[2]
DTYPES = ("bfloat16", "float32")
KWARGS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "pan and scan": {"do_pan_and_scan": True},
    "pan and scan, small crops": {
        "do_pan_and_scan": True,
        "pan_and_scan_min_crop_size": 32,
        "pan_and_scan_max_num_crops": 3,
    },
}
I = "<start_of_image>"  # noqa: E741
# name: (prompt text, image sizes (w, h)); vLLM fails "newlines around" (a "\n" right after an
# image merges with the image's closing "\n\n", and vLLM no longer finds the image).
CASES: dict[str, tuple[str, list[tuple[int, int]]]] = {
    "one image": (f"<start_of_turn>user\n{I}What is it?<end_of_turn>\n", [(64, 48)]),
    "newlines around": (f"a\n{I}\nb\n\n{I}\n\nc\n\n\n{I}\n\n\nd", [(90, 60), (60, 90), (64, 64)]),
    "back to back": (f"{I}{I}{I}", [(300, 200), (800, 300), (20, 20)]),
    "wide and tall": (f"x {I} y {I}", [(1000, 300), (300, 1000)]),
    "text newlines only": (f"one\n\n\ntwo\n\n\n\nthree {I}", [(128, 128)]),
}


def _images(name: str) -> list[Image.Image]:
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    return [
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for w, h in CASES[name][1]
    ]


def _entry(elem: Any) -> tuple[Any, ...]:
    data = elem.data
    return (str(data.dtype).removeprefix("torch."), tuple(data.shape), data.float().numpy(),
            type(elem.field).__name__, getattr(elem.field, "keep_on_cpu", None))  # fmt: skip


def _reference(model: str) -> dict[tuple[str, str, str], Any]:
    """vLLM's processor outputs per (kwargs, dtype, case) (run in the subprocess)."""
    from vllm.config import ModelConfig
    from vllm.multimodal import MULTIMODAL_REGISTRY
    from vllm.multimodal.processing.context import TimingContext
    from vllm.multimodal.processing.inputs import ProcessorInputs

    results: dict[tuple[str, str, str], Any] = {}
    for kwargs_name, kwargs in KWARGS.items():
        for dtype in DTYPES:
            config = ModelConfig(model=model, tokenizer=model, max_model_len=8192, dtype=dtype,
                                 mm_processor_kwargs=kwargs or None)  # fmt: skip
            processor = MULTIMODAL_REGISTRY.create_processor(config)
            tokenizer = processor.info.get_tokenizer()
            for name, (text, _) in CASES.items():
                prompt = tokenizer.encode(text, add_special_tokens=False)
                items = processor.info.parse_mm_data({"image": _images(name)})
                try:
                    out = processor.apply(
                        ProcessorInputs(prompt, items), TimingContext(enabled=False)
                    )
                except RuntimeError as e:  # vLLM's own failure (a 500 from its server)
                    results[kwargs_name, dtype, name] = {"prompt": prompt, "error": str(e)}
                    continue
                results[kwargs_name, dtype, name] = {
                    "prompt": prompt,
                    "ids": list(out["prompt_token_ids"]),
                    "ranges": [
                        (r.offset, r.length, r.is_embed.tolist())
                        for r in out["mm_placeholders"]["image"]
                    ],
                    "fields": [
                        {k: _entry(e) for k, e in item.items()}
                        for item in out["mm_kwargs"]["image"]
                    ],
                }
    return results


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str, str], Any]:
    model = tiny_gemma3_dir()
    target = tmp_path_factory.mktemp("gemma3") / "reference.pkl"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([VLM_PYTHONPATH, str(ROOT)]))
    subprocess.run([sys.executable, __file__, str(model), str(target)], check=True, env=env,
                   cwd=ROOT, timeout=900)  # fmt: skip
    out: dict[tuple[str, str, str], Any] = pickle.loads(target.read_bytes())
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kwargs_name", list(KWARGS))
@pytest.mark.parametrize("name", list(CASES))
def test_family_equals_vllms_processor(
    reference: dict[tuple[str, str, str], Any], name: str, kwargs_name: str, dtype: str
) -> None:
    from vllm_frontend.multimodal.llm import MultimodalOptions, _expand, load_family
    from vllm_frontend.multimodal.media import ImageItem, MediaError
    from vllm_frontend.multimodal.parts import MediaPart
    from vllm_frontend.text.tokenizer import Tokenizer

    want = reference[kwargs_name, dtype, name]
    model = tiny_gemma3_dir()
    tokenizer = Tokenizer.from_dir(model)

    def encode(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False)

    assert encode(CASES[name][0]) == want["prompt"]
    options = MultimodalOptions(mm_processor_kwargs=KWARGS[kwargs_name])
    family = load_family(model, {"model_type": "gemma3"}, tokenizer.token_to_id, options, encode)
    assert family is not None
    items = [ImageItem(image, b"", None) for image in _images(name)]
    processed = family.process("image", items, {}, dtype)
    parts = [MediaPart("image", None, str(i)) for i in range(len(items))]
    hashes = [p.uuid or "" for p in parts]
    if "error" in want:
        # vLLM's processor cannot find an image whose closing newlines merged with the
        # prompt's (its server answers 500); ours refuses the request with a 400.
        assert "prompt placeholders" in want["error"]
        with pytest.raises(MediaError) as caught:
            _expand(want["prompt"], family, parts, processed, hashes)
        assert caught.value.status == 400
        return
    ids, features = _expand(want["prompt"], family, parts, processed, hashes)
    assert ids == want["ids"]
    got = [(f.mm_position.offset, f.mm_position.length, f.mm_position.is_embed.numpy().tolist())
           for f in features]  # fmt: skip
    assert got == want["ranges"]
    for feature, theirs in zip(features, want["fields"], strict=True):
        mine = feature.data or {}
        assert set(mine) == set(theirs)
        for key, (tdtype, shape, values, kind, keep_on_cpu) in theirs.items():
            elem = mine[key]
            factory, options_ = elem.field
            assert kind.lower() == f"multimodal{factory}field", key
            assert options_.get("keep_on_cpu") == keep_on_cpu, key
            assert elem.data.dtype == tdtype, key
            assert elem.data.shape == shape, key
            assert np.array_equal(elem.data.numpy().astype(np.float32), values), key


if __name__ == "__main__":
    share_rust_tokenizers()
    pathlib.Path(sys.argv[2]).write_bytes(pickle.dumps(_reference(sys.argv[1])))

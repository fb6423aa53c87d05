"""InternVL (Hugging Face format) against vLLM 0.32's own ``InternS1MultiModalProcessor`` (the
processor vLLM serves ``InternVLForConditionalGeneration`` with; no server, no engine): image
chat requests with ``data:`` URLs (PNG and JPEG, many sizes and aspect ratios, several images,
repeated images, uuids) go through our multimodal facade in front of a recording engine client,
and the engine request must equal what vLLM's processor makes of the same prompt and image bytes
(decoded by vLLM's ``ImageMediaIO``): the expanded prompt ids, the placeholder ranges with their
``is_embed`` masks, every field (values, dtype, shape, field factory and its arguments) and the
item hashes, for the server's ``--mm-processor-kwargs`` and per-request ``mm_processor_kwargs``
that change the tile grid, in bfloat16 and float32.

vLLM's InternVL code imports transformers' torchvision-backed processors, so the reference runs
in a subprocess on :data:`tests.support.tiny_vlm.VLM_PYTHONPATH` (this module run as a script).
"""

from __future__ import annotations

import asyncio
import base64
import functools
import io
import json
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

from tests.support.tiny_internvl import IMAGE_SEQ_LENGTH, IMG_CONTEXT, tiny_internvl_dir
from tests.support.tiny_vlm import VLM_PYTHONPATH

pytestmark = pytest.mark.oracle

ROOT = pathlib.Path(__file__).resolve().parents[2]
C = "<IMG_CONTEXT>"
# name: (server --mm-processor-kwargs, per-request mm_processor_kwargs, dtype)
SETTINGS: dict[str, tuple[dict[str, Any], dict[str, Any], str]] = {
    "defaults bfloat16": ({}, {}, "bfloat16"),
    "defaults float32": ({}, {}, "float32"),
    "max 2 tiles": ({"max_patches": 2}, {}, "bfloat16"),
    "no tiling": ({"crop_to_patches": False}, {}, "bfloat16"),
    "3 to 4 tiles": ({"min_patches": 3, "max_patches": 4}, {}, "bfloat16"),
    "request max 3 tiles": ({}, {"max_patches": 3}, "bfloat16"),
}
# name: (prompt text, images as (width, height, format), uuids)
CASES: dict[str, tuple[str, list[tuple[int, int, str]], list[str | None] | None]] = {
    "one image": (f"<|im_start|>user\n{C}\nWhat is it?<|im_end|>\n", [(64, 48, "PNG")], None),
    "sizes": (
        f"First: {C} then {C}\nand {C}{C} end",
        [(300, 200, "PNG"), (97, 431, "JPEG"), (20, 20, "PNG"), (1000, 90, "JPEG")],
        None,
    ),
    "exact tiles": (f"{C}{C}{C}", [(28, 28, "PNG"), (56, 28, "PNG"), (84, 56, "PNG")], None),
    "repeated": (f"a {C} b {C}", [(150, 100, "JPEG"), (150, 100, "JPEG")], None),
    "uuids": (f"{C} and {C}", [(40, 120, "PNG"), (130, 60, "PNG")], ["my-image", None]),
}


def _bytes(name: str) -> list[bytes]:
    """The case's images, encoded (a repeated size is the same image)."""
    out = []
    for width, height, fmt in CASES[name][1]:
        rng = np.random.default_rng(zlib.crc32(f"{name}{width}x{height}".encode()))
        image = Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))
        buf = io.BytesIO()
        image.save(buf, fmt, **({"quality": 90} if fmt == "JPEG" else {}))
        out.append(buf.getvalue())
    return out


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


def _reference(model: str) -> dict[tuple[str, str], Any]:
    """vLLM's processor outputs per (setting, case) (run in the subprocess)."""
    from vllm.config import ModelConfig
    from vllm.multimodal import MULTIMODAL_REGISTRY
    from vllm.multimodal.media.image import ImageMediaIO
    from vllm.multimodal.processing.context import TimingContext
    from vllm.multimodal.processing.inputs import ProcessorInputs

    results: dict[tuple[str, str], Any] = {}
    for setting, (server, request, dtype) in SETTINGS.items():
        config = ModelConfig(model=model, tokenizer=model, max_model_len=8192, dtype=dtype,
                             mm_processor_kwargs=server or None)  # fmt: skip
        processor = MULTIMODAL_REGISTRY.create_processor(config)
        tokenizer = processor.info.get_tokenizer()
        for name, (text, _, uuids) in CASES.items():
            prompt = tokenizer.encode(text, add_special_tokens=False)
            images = [ImageMediaIO().load_bytes(data) for data in _bytes(name)]
            items = processor.info.parse_mm_data({"image": images})
            inputs = ProcessorInputs(
                prompt,
                items,
                mm_uuid_items={"image": uuids} if uuids else None,
                hf_processor_mm_kwargs=request,
            )
            out = processor.apply(inputs, TimingContext(enabled=False))
            results[setting, name] = {
                "prompt": prompt,
                "ids": list(out["prompt_token_ids"]),
                "ranges": [
                    (r.offset, r.length, r.is_embed.tolist())
                    for r in out["mm_placeholders"]["image"]
                ],
                "fields": [
                    {k: _entry(e) for k, e in item.items()} for item in out["mm_kwargs"]["image"]
                ],
                "hashes": list(out["mm_hashes"]["image"]),
            }
    return results


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Any]:
    model = tiny_internvl_dir()
    target = tmp_path_factory.mktemp("internvl") / "reference.pkl"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([VLM_PYTHONPATH, str(ROOT)]))
    subprocess.run([sys.executable, __file__, str(model), str(target)], check=True, env=env,
                   cwd=ROOT, timeout=900)  # fmt: skip
    out: dict[tuple[str, str], Any] = pickle.loads(target.read_bytes())
    return out


class _Stream:
    def take(self) -> list[Any]:
        return []

    def on_ready(self, callback: Any) -> None:
        pass


class _Client:
    """Records the engine requests it is sent."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    def add_request(self, request: Any) -> _Stream:
        # The features as sent (the request lets go of them once they are on the wire).
        self.sent.append((list(request.prompt_token_ids), list(request.mm_features or [])))
        return _Stream()

    def abort_requests(self, ids: Any) -> None:
        pass


@functools.cache
def _model() -> tuple[Any, dict[str, Any]]:
    """The tiny InternVL's tokenizer and config (loaded once)."""
    from vllm_frontend.text.tokenizer import Tokenizer

    model = tiny_internvl_dir()
    return Tokenizer.from_dir(model), json.loads((model / "config.json").read_text())


def _facade(server_kwargs: dict[str, Any], dtype: str, client: _Client) -> Any:
    from vllm_frontend.engine.protocol import EngineCoreRequest
    from vllm_frontend.llm import LLM
    from vllm_frontend.multimodal.llm import MultimodalLlm, MultimodalOptions, load_family
    from vllm_frontend.multimodal.media import MediaLoader, MediaPolicy
    from vllm_frontend.text.llm import TextLlm
    from vllm_frontend.text.sampling import ModelSamplingInfo

    model = tiny_internvl_dir()
    tokenizer, config = _model()

    def encode(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False)

    options = MultimodalOptions(mm_processor_kwargs=server_kwargs)
    family = load_family(model, config, tokenizer.token_to_id, options, encode)
    sampling = ModelSamplingInfo(max_model_len=8192, eos_token_id=tokenizer.eos_token_id)
    text = TextLlm(LLM(client, EngineCoreRequest), tokenizer, 8192, sampling)
    loader = MediaLoader(MediaPolicy())
    return MultimodalLlm(text, family, loader, model_id=str(model), config=config, dtype=dtype,
                         options=options)  # fmt: skip


def _url(data: bytes) -> str:
    kind = "jpeg" if data[:2] == b"\xff\xd8" else "png"
    return f"data:image/{kind};base64," + base64.b64encode(data).decode()


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("setting", list(SETTINGS))
def test_engine_request_equals_vllms_processor(
    reference: dict[tuple[str, str], Any], setting: str, name: str
) -> None:
    from vllm_frontend.multimodal.parts import MediaPart
    from vllm_frontend.text.llm import TextRequest
    from vllm_frontend.text.sampling import SamplingRequest

    server, request_kwargs, dtype = SETTINGS[setting]
    text, _, uuids = CASES[name]
    want = reference[setting, name]
    client = _Client()
    media = _facade(server, dtype, client)
    parts = media.new_parts()
    for i, data in enumerate(_bytes(name)):
        parts.add(MediaPart("image", _url(data), uuids[i] if uuids else None))
    request = TextRequest(request_id="r", max_tokens=4, sampling=SamplingRequest(),
                          add_special_tokens=False)  # fmt: skip
    generation = asyncio.run(
        media.generate(request, text, parts, mm_processor_kwargs=request_kwargs or None)
    )
    generation.source(0).start()
    [(ids, features)] = client.sent
    assert ids == want["ids"]
    got = [(f.mm_position.offset, f.mm_position.length, f.mm_position.is_embed.numpy().tolist())
           for f in features]  # fmt: skip
    assert got == want["ranges"]
    assert [f.mm_hash for f in features] == want["hashes"]
    assert [f.identifier for f in features] == want["hashes"]
    for feature, theirs in zip(features, want["fields"], strict=True):
        mine = feature.data or {}
        assert set(mine) == set(theirs)
        for key, (tdtype, shape, values, kind, field_kwargs) in theirs.items():
            elem = mine[key]
            factory, options = elem.field
            assert kind.lower() == f"multimodal{factory}field", key
            assert options == field_kwargs, key
            assert elem.data.dtype == tdtype, key
            assert elem.data.shape == shape, key
            assert np.array_equal(elem.data.numpy().astype(np.float32), values), key


def test_the_cases_tile_and_differ() -> None:
    # Not vacuous: a 300x200 image under the defaults is 3x2 tiles and a thumbnail (7 tiles of
    # IMAGE_SEQ_LENGTH context tokens between <img> and </img>); without tiling it is 1 tile.
    from vllm_frontend.multimodal.media import ImageItem

    image = Image.new("RGB", (300, 200))
    for kwargs, tiles in (({}, 7), ({"crop_to_patches": False}, 1), ({"max_patches": 2}, 3)):
        media = _facade(kwargs, "bfloat16", _Client())
        [item] = media.family.process("image", [ImageItem(image, b"", None)], {}, "bfloat16")
        assert item.fields["pixel_values"].data.shape == (tiles, 3, 28, 28)
        assert len(item.replacement) == tiles * IMAGE_SEQ_LENGTH + 2
        assert int(np.sum(item.is_embed)) == tiles * IMAGE_SEQ_LENGTH
        assert item.replacement.count(IMG_CONTEXT) == tiles * IMAGE_SEQ_LENGTH


if __name__ == "__main__":
    pathlib.Path(sys.argv[2]).write_bytes(pickle.dumps(_reference(sys.argv[1])))

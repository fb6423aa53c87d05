"""Engine requests of our multimodal facade against vLLM 0.32's own multimodal processor, in
process (no server, no engine): PNG images sent to ours as ``data:`` URLs and to vLLM's
processor as the ``MediaWithBytes`` its media connector makes of them, so the item hashes are
comparable too. vLLM's side runs in a subprocess (:func:`run_reference`) where its model code
can import transformers' torchvision-backed processors (:data:`tests.support.tiny_vlm.
VLM_PYTHONPATH`)."""

from __future__ import annotations

import asyncio
import base64
import functools
import io
import json
import os
import pathlib
import pickle
import shutil
import subprocess
import sys
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np
from PIL import Image

from tests.support.tiny_vlm import VLM_PYTHONPATH

ROOT = pathlib.Path(__file__).resolve().parents[2]


def pngs(name: str, sizes: list[tuple[int, int]]) -> list[bytes]:
    """Random RGB PNGs of ``sizes`` (w, h), seeded by ``name``."""
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    out = []
    for w, h in sizes:
        buffer = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(buffer, "PNG")
        out.append(buffer.getvalue())
    return out


def _entry(elem: Any) -> tuple[Any, ...]:
    data, field = elem.data, elem.field
    slices = getattr(field, "slices", None)
    if slices is not None:
        slices = [[(int(s.start), int(s.stop), s.step) for s in item] for item in slices]
    return (str(data.dtype).removeprefix("torch."), tuple(data.shape), data.float().numpy(),
            type(field).__name__, getattr(field, "keep_on_cpu", None), slices)  # fmt: skip


def vllm_requests(
    model: str,
    config_kwargs: Mapping[str, Any],
    cases: Mapping[str, tuple[str, list[tuple[int, int]]]],
    request_kwargs: Mapping[str, Any],
) -> dict[str, Any]:
    """vLLM's processor output per case (prompt text, image sizes): prompt ids, item hashes,
    placeholder ranges and fields, or its error (run in the reference subprocess)."""
    from vllm.config import ModelConfig
    from vllm.multimodal import MULTIMODAL_REGISTRY
    from vllm.multimodal.media.image import ImageMediaIO
    from vllm.multimodal.processing.context import TimingContext
    from vllm.multimodal.processing.inputs import ProcessorInputs

    config = ModelConfig(model=model, tokenizer=model, max_model_len=8192, **config_kwargs)
    processor = MULTIMODAL_REGISTRY.create_processor(config)
    tokenizer = processor.info.get_tokenizer()
    results: dict[str, Any] = {}
    for name, (text, sizes) in cases.items():
        prompt = tokenizer.encode(text, add_special_tokens=False)
        images = [ImageMediaIO().load_bytes(png) for png in pngs(name, sizes)]
        items = processor.info.parse_mm_data({"image": images})
        try:
            out = processor.apply(
                ProcessorInputs(prompt, items, hf_processor_mm_kwargs=request_kwargs),
                TimingContext(enabled=False),
            )
        except ValueError as e:  # vLLM's server answers 400
            results[name] = {"prompt": prompt, "error": str(e)}
            continue
        results[name] = {
            "prompt": prompt,
            "ids": list(out["prompt_token_ids"]),
            "hashes": list(out["mm_hashes"]["image"]),
            "ranges": [
                (r.offset, r.length, None if r.is_embed is None else r.is_embed.tolist())
                for r in out["mm_placeholders"]["image"]
            ],
            "fields": [
                {k: _entry(e) for k, e in item.items()} for item in out["mm_kwargs"]["image"]
            ],
        }
    return results


def run_reference(module: str, args: list[str], target: pathlib.Path, **env: str) -> Any:
    """Run ``python -m <module> <args> <target>`` on the reference path and load the pickle it
    writes to ``target``."""
    path = os.pathsep.join([VLM_PYTHONPATH, str(ROOT / "src"), str(ROOT)])
    environ = dict(os.environ, PYTHONPATH=path, **env)
    environ.pop("VLLM_USE_RUST_FRONTEND", None)
    subprocess.run([sys.executable, "-m", module, *args, str(target)], check=True, env=environ,
                   cwd=ROOT, timeout=900)  # fmt: skip
    return pickle.loads(target.read_bytes())


def run_reference_cached(module: str, models: list[pathlib.Path], staging: pathlib.Path) -> Any:
    """:func:`run_reference` with the model directories as arguments, its result kept in the test
    cache under a key of the module's source, the models' files and vLLM's and transformers'
    versions (building vLLM's processors takes most of a minute on a loaded machine)."""
    import importlib.metadata

    from tests.support.tiny_model import cache_root, inputs_hash

    source = pathlib.Path(sys.modules[module].__file__ or "")
    key = inputs_hash(
        source.read_bytes(),
        pathlib.Path(__file__).read_bytes(),
        *(f.read_bytes() for m in models for f in sorted(m.iterdir()) if f.is_file()),
        *(str(m).encode() for m in models),  # vLLM's item hashes carry the model's path
        importlib.metadata.version("vllm").encode(),
        importlib.metadata.version("transformers").encode(),
    )
    target = cache_root() / f"{source.stem}-reference-{key}.pkl"
    if not target.is_file():
        run_reference(module, [str(m) for m in models], staging)
        shutil.move(staging, target)
    return pickle.loads(target.read_bytes())


def write_reference(result: Any) -> None:
    """Write the reference subprocess's result where :func:`run_reference` reads it."""
    pathlib.Path(sys.argv[-1]).write_bytes(pickle.dumps(result))


class _Stream:
    def take(self) -> list[Any]:
        return []

    def on_ready(self, callback: Any) -> None:
        pass


class _Client:
    def add_request(self, request: Any) -> _Stream:
        return _Stream()

    def abort_requests(self, ids: Any) -> None:
        pass


@functools.cache
def _tokenizer(model: pathlib.Path) -> Any:
    from vllm_frontend.text.tokenizer import Tokenizer

    return Tokenizer.from_dir(model)


def facade(model: pathlib.Path, dtype: str, max_model_len: int = 8192, **options: Any) -> Any:
    """Our multimodal facade over ``model`` with ``MultimodalOptions(**options)``, in front of
    a client that sends nowhere."""
    from vllm_frontend.engine.protocol import EngineCoreRequest
    from vllm_frontend.llm import LLM
    from vllm_frontend.multimodal.llm import MultimodalLlm, MultimodalOptions, load_family
    from vllm_frontend.multimodal.media import MediaLoader, MediaPolicy
    from vllm_frontend.text.llm import TextLlm
    from vllm_frontend.text.sampling import ModelSamplingInfo

    tokenizer = _tokenizer(model)

    def encode(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False)

    config = json.loads((model / "config.json").read_text())
    mm_options = MultimodalOptions(**options)
    family = load_family(model, config, tokenizer.token_to_id, mm_options, encode)
    assert family is not None
    sampling = ModelSamplingInfo(max_model_len=max_model_len, eos_token_id=tokenizer.eos_token_id)
    text = TextLlm(LLM(_Client(), EngineCoreRequest), tokenizer, max_model_len, sampling)
    return MultimodalLlm(text, family, MediaLoader(MediaPolicy()), model_id=str(model),
                         config=config, dtype=dtype, options=mm_options)  # fmt: skip


def generate(media: Any, prompt: str, images: list[bytes], request_kwargs: Any = None) -> Any:
    """The prepared prompt our facade sends for ``prompt`` with ``images`` as data: URLs."""
    from vllm_frontend.multimodal.parts import MediaPart
    from vllm_frontend.text.llm import TextRequest
    from vllm_frontend.text.sampling import SamplingRequest

    parts = media.new_parts()
    for png in images:
        parts.add(MediaPart("image", "data:image/png;base64," + base64.b64encode(png).decode()))
    request = TextRequest(request_id="r", max_tokens=4, sampling=SamplingRequest(),
                          add_special_tokens=False)  # fmt: skip
    generation = asyncio.run(
        media.generate(request, prompt, parts, mm_processor_kwargs=request_kwargs or None)
    )
    [prepared] = generation.prompts
    return prepared


def assert_request_equals(prepared: Any, want: Mapping[str, Any]) -> None:
    """Our prepared prompt's ids and features equal vLLM's processor output ``want``."""
    assert prepared.token_ids == want["ids"]
    features = prepared.mm_features
    assert [f.modality for f in features] == ["image"] * len(want["hashes"])
    assert [f.mm_hash for f in features] == want["hashes"]
    assert [f.identifier for f in features] == want["hashes"]
    got = [(f.mm_position.offset, f.mm_position.length,
            None if f.mm_position.is_embed is None else f.mm_position.is_embed.numpy().tolist())
           for f in features]  # fmt: skip
    assert got == want["ranges"]
    for feature, theirs in zip(features, want["fields"], strict=True):
        mine = feature.data or {}
        assert set(mine) == set(theirs)
        for key, (dtype, shape, values, kind, keep_on_cpu, slices) in theirs.items():
            elem = mine[key]
            factory, options = elem.field
            assert kind.lower() == f"multimodal{factory}field", key
            assert options.get("keep_on_cpu") == keep_on_cpu, key
            if slices is not None:
                assert [[tuple(s) for s in item] for item in options["slices"]] == slices, key
            assert elem.data.dtype == dtype, key
            assert elem.data.shape == shape, key
            assert np.array_equal(elem.data.numpy().astype(np.float32), values), key

"""Mistral 3 and Hugging Face-format Pixtral (``llava`` + ``pixtral``) against vLLM 0.32's own
``Mistral3MultiModalProcessor`` and ``PixtralHFMultiModalProcessor`` (in process, no server):
PNG images of many sizes and aspect ratios (inside and beyond the longest edge, tiny, thin,
whole multiples of the patch), one and several per prompt, sent to our multimodal facade as
``data:`` URLs; the prompt ids with each ``[IMG]`` expanded to its grid (``[IMG_BREAK]`` after
each row, ``[IMG_END]`` last), the placeholder ranges with their ``is_embed`` masks, the item
hashes, and every field (values, dtype, shape, field factory) equal vLLM's, in the engine's
dtypes, with the engine normalizing the pixels (Mistral 3's default) or not, and with
``--mm-processor-kwargs`` and per-request ``mm_processor_kwargs`` that change the size. Images
vLLM's processor refuses (a side that rounds to 0 pixels) get a 400 here.

vLLM's processors import transformers' ``PixtralProcessor``, which needs torchvision: the
reference runs in a subprocess on :data:`tests.support.tiny_vlm.VLM_PYTHONPATH` (this module
run as a script), where transformers' image processors stay the PIL ones."""

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
import types
import zlib
from typing import Any

import numpy as np
import pytest
from PIL import Image

from tests.support.tiny_mistral3 import (
    IMG,
    IMG_BREAK,
    IMG_END,
    tiny_mistral3_dir,
    tiny_pixtral_hf_dir,
)
from tests.support.tiny_vlm import VLM_PYTHONPATH
from vllm_frontend.multimodal.parts import MediaPart
from vllm_frontend.multimodal.processors.pixtral import PixtralImageProcessor
from vllm_frontend.multimodal.sender_cache import SenderCache
from vllm_frontend.text.errors import BadInput, InvalidInput

pytestmark = pytest.mark.oracle

ROOT = pathlib.Path(__file__).resolve().parents[2]
I = "[IMG]"  # noqa: E741
# name: (prompt text, image sizes (w, h)).
CASES: dict[str, tuple[str, list[tuple[int, int]]]] = {
    "one image": (f"{I}What is it?", [(64, 48)]),
    "several": (f"a {I} b {I} c {I}", [(300, 200), (17, 300), (128, 128)]),
    "beyond the edge": (f"{I} and {I}", [(1000, 300), (700, 2000)]),
    "tiny": (f"x {I}{I} y", [(1, 1), (5, 3)]),
    "whole patches": (f"{I}\n{I}", [(32, 16), (96, 96)]),
    "odd": (f"{I} {I} {I}", [(97, 431), (129, 127), (33, 17)]),
    "thin": (f"{I} too thin", [(1, 2000)]),
}
# name: (model, dtype, --mm-processor-kwargs, mm_device_do_normalize, request kwargs)
SETTINGS: dict[str, tuple[str, str, dict[str, Any], bool | None, dict[str, Any]]] = {
    "mistral3 bf16 device-normalized": ("mistral3", "bfloat16", {}, None, {}),
    "mistral3 bf16": ("mistral3", "bfloat16", {}, False, {}),
    "mistral3 f32": ("mistral3", "float32", {}, False, {}),
    "mistral3 size": ("mistral3", "bfloat16", {"size": {"longest_edge": 64}}, False, {}),
    "mistral3 scoped size": (
        "mistral3", "float32", {"images_kwargs": {"size": {"longest_edge": 48}}}, None, {}
    ),
    "mistral3 request size": ("mistral3", "bfloat16", {}, False, {"size": {"longest_edge": 80}}),
    "pixtral-hf bf16": ("llava", "bfloat16", {}, None, {}),
    "pixtral-hf f32": ("llava", "float32", {}, None, {}),
}  # fmt: skip


def _model(kind: str) -> pathlib.Path:
    return tiny_mistral3_dir() if kind == "mistral3" else tiny_pixtral_hf_dir()


def _pngs(name: str) -> list[bytes]:
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    out = []
    for w, h in CASES[name][1]:
        buffer = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(buffer, "PNG")
        out.append(buffer.getvalue())
    return out


def _entry(elem: Any) -> tuple[Any, ...]:
    data = elem.data
    return (str(data.dtype).removeprefix("torch."), tuple(data.shape), data.float().numpy(),
            type(elem.field).__name__, getattr(elem.field, "keep_on_cpu", None))  # fmt: skip


def _reference(models: dict[str, str]) -> dict[tuple[str, str], Any]:
    """vLLM's processor outputs per (setting, case) (run in the subprocess)."""
    from vllm.config import ModelConfig
    from vllm.multimodal import MULTIMODAL_REGISTRY
    from vllm.multimodal.media.image import ImageMediaIO
    from vllm.multimodal.processing.context import TimingContext
    from vllm.multimodal.processing.inputs import ProcessorInputs

    results: dict[tuple[str, str], Any] = {}
    for setting, (kind, dtype, kwargs, normalize, request) in SETTINGS.items():
        model = models[kind]
        config = ModelConfig(model=model, tokenizer=model, max_model_len=8192, dtype=dtype,
                             mm_processor_kwargs=kwargs or None,
                             mm_device_do_normalize=normalize)  # fmt: skip
        processor = MULTIMODAL_REGISTRY.create_processor(config)
        tokenizer = processor.info.get_tokenizer()
        for name, (text, _) in CASES.items():
            prompt = tokenizer.encode(text, add_special_tokens=False)
            images = [ImageMediaIO().load_bytes(png) for png in _pngs(name)]
            items = processor.info.parse_mm_data({"image": images})
            try:
                out = processor.apply(
                    ProcessorInputs(prompt, items, hf_processor_mm_kwargs=request),
                    TimingContext(enabled=False),
                )
            except ValueError as e:  # vLLM's server answers 400
                results[setting, name] = {"prompt": prompt, "error": str(e)}
                continue
            results[setting, name] = {
                "prompt": prompt,
                "ids": list(out["prompt_token_ids"]),
                "hashes": list(out["mm_hashes"]["image"]),
                "ranges": [
                    (r.offset, r.length, r.is_embed.tolist())
                    for r in out["mm_placeholders"]["image"]
                ],
                "fields": [
                    {k: _entry(e) for k, e in item.items()} for item in out["mm_kwargs"]["image"]
                ],
            }
    return results


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Any]:
    models = {kind: str(_model(kind)) for kind in ("mistral3", "llava")}
    target = tmp_path_factory.mktemp("pixtral") / "reference.pkl"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([VLM_PYTHONPATH, str(ROOT)]))
    env.pop("VLLM_USE_RUST_FRONTEND", None)
    subprocess.run([sys.executable, __file__, models["mistral3"], models["llava"], str(target)],
                   check=True, env=env, cwd=ROOT, timeout=900)  # fmt: skip
    out: dict[tuple[str, str], Any] = pickle.loads(target.read_bytes())
    return out


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


_FACADES: dict[str, Any] = {}
"""One facade per setting (they keep no state between requests without the cache mirror)."""


@functools.cache
def _tokenizer(kind: str) -> Any:
    from vllm_frontend.text.tokenizer import Tokenizer

    return Tokenizer.from_dir(_model(kind))


def facade(kind: str, dtype: str, kwargs: dict[str, Any], normalize: bool | None,
           max_model_len: int = 8192, limits: dict[str, Any] | None = None) -> Any:  # fmt: skip
    """Our multimodal facade over the tiny model, in front of a client that sends nowhere."""
    from vllm_frontend.engine.protocol import EngineCoreRequest
    from vllm_frontend.llm import LLM
    from vllm_frontend.multimodal.llm import MultimodalLlm, MultimodalOptions, load_family
    from vllm_frontend.multimodal.media import MediaLoader, MediaPolicy
    from vllm_frontend.text.llm import TextLlm
    from vllm_frontend.text.sampling import ModelSamplingInfo

    model = _model(kind)
    tokenizer = _tokenizer(kind)
    config = json.loads((model / "config.json").read_text())
    options = MultimodalOptions(
        mm_processor_kwargs=kwargs, mm_device_do_normalize=normalize,
        limit_mm_per_prompt=limits or {},
    )  # fmt: skip
    family = load_family(model, config, tokenizer.token_to_id, options)
    assert family is not None
    sampling = ModelSamplingInfo(max_model_len=max_model_len, eos_token_id=tokenizer.eos_token_id)
    text = TextLlm(LLM(_Client(), EngineCoreRequest), tokenizer, max_model_len, sampling)
    return MultimodalLlm(text, family, MediaLoader(MediaPolicy()), model_id=str(model),
                         config=config, dtype=dtype, options=options)  # fmt: skip


def generate(media: Any, prompt: str, pngs: list[bytes], request_kwargs: dict[str, Any]) -> Any:
    """The prepared prompt our facade sends for ``prompt`` with ``pngs`` as data: URLs."""
    from vllm_frontend.multimodal.parts import MediaPart
    from vllm_frontend.text.llm import TextRequest
    from vllm_frontend.text.sampling import SamplingRequest

    parts = media.new_parts()
    for png in pngs:
        parts.add(MediaPart("image", "data:image/png;base64," + base64.b64encode(png).decode()))
    request = TextRequest(request_id="r", max_tokens=4, sampling=SamplingRequest(),
                          add_special_tokens=False)  # fmt: skip
    generation = asyncio.run(
        media.generate(request, prompt, parts, mm_processor_kwargs=request_kwargs or None)
    )
    [prepared] = generation.prompts
    return prepared


@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize("name", list(CASES))
def test_engine_request_equals_vllms_processor(
    reference: dict[tuple[str, str], Any], name: str, setting: str
) -> None:
    from vllm_frontend.multimodal.media import MediaError

    kind, dtype, kwargs, normalize, request_kwargs = SETTINGS[setting]
    want = reference[setting, name]
    media = _FACADES.get(setting)
    if media is None:
        media = _FACADES[setting] = facade(kind, dtype, kwargs, normalize)
    assert media.text.tokenizer.encode(CASES[name][0], add_special_tokens=False) == want["prompt"]
    if "error" in want:
        with pytest.raises(MediaError) as caught:
            generate(media, CASES[name][0], _pngs(name), request_kwargs)
        assert caught.value.status == 400
        return
    prepared = generate(media, CASES[name][0], _pngs(name), request_kwargs)
    assert prepared.token_ids == want["ids"]
    features = prepared.mm_features
    assert [f.modality for f in features] == ["image"] * len(want["hashes"])
    assert [f.mm_hash for f in features] == want["hashes"]
    assert [f.identifier for f in features] == want["hashes"]
    got = [(f.mm_position.offset, f.mm_position.length, f.mm_position.is_embed.numpy().tolist())
           for f in features]  # fmt: skip
    assert got == want["ranges"]
    for feature, theirs in zip(features, want["fields"], strict=True):
        mine = feature.data or {}
        assert set(mine) == set(theirs)
        for key, (tdtype, shape, values, kind_name, keep_on_cpu) in theirs.items():
            elem = mine[key]
            factory, options_ = elem.field
            assert kind_name.lower() == f"multimodal{factory}field", key
            assert options_.get("keep_on_cpu") == keep_on_cpu, key
            assert elem.data.dtype == tdtype, key
            assert elem.data.shape == shape, key
            assert np.array_equal(elem.data.numpy().astype(np.float32), values), key


def test_reference_covers_the_layout(reference: dict[tuple[str, str], Any]) -> None:
    # The reference itself has the Pixtral layout (so the comparison above is not vacuous):
    # rows of [IMG] closed by [IMG_BREAK], the last by [IMG_END]; only [IMG] takes embeddings.
    want = reference["mistral3 bf16", "several"]
    for offset, length, is_embed in want["ranges"]:
        tokens = want["ids"][offset : offset + length]
        assert tokens[-1] == IMG_END and IMG_BREAK in tokens
        assert is_embed == [t == IMG for t in tokens]
    assert "error" in reference["mistral3 bf16", "thin"]


@pytest.mark.parametrize("kind", ["mistral3", "llava"])
def test_held_image_keeps_its_placeholder_and_goes_without_data(kind: str) -> None:
    # An image the engine's cache holds is not processed again: its placeholder run comes from
    # its size alone and equals the processed one's; it goes as data=None.
    media = facade(kind, "bfloat16", {}, None)
    media.sender_cache = SenderCache(1)
    pngs = _pngs("odd") + _pngs("beyond the edge")
    prompt = " ".join([I] * len(pngs))
    first = generate(media, prompt, pngs, {})
    runs = [(f.mm_position.offset, f.mm_position.length, f.mm_position.is_embed.numpy().tolist())
            for f in first.mm_features]  # fmt: skip
    first.mm_cache.apply(first.mm_features)  # as when the request is sent
    calls: list[Any] = []
    original = PixtralImageProcessor.preprocess

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return original(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(PixtralImageProcessor, "preprocess", counted)
        second = generate(media, prompt, pngs, {})
    assert not calls
    assert second.token_ids == first.token_ids
    assert [f.data for f in second.mm_features] == [None] * len(pngs)
    assert [(f.mm_position.offset, f.mm_position.length, f.mm_position.is_embed.numpy().tolist())
            for f in second.mm_features] == runs  # fmt: skip


def test_limit_per_prompt_is_vllms() -> None:
    from vllm.multimodal.processing.context import BaseProcessingInfo

    info = types.SimpleNamespace(supported_mm_limits={"image": None},
                                 allowed_mm_limits={"image": 2})  # fmt: skip
    with pytest.raises(Exception) as theirs:
        BaseProcessingInfo.validate_num_items(info, "image", 3)  # type: ignore[arg-type]
    media = facade("mistral3", "bfloat16", {}, None, limits={"image": 2})
    parts = media.new_parts()
    parts.add(MediaPart("image", "data:,"))
    parts.add(MediaPart("image", "data:,"))
    with pytest.raises(InvalidInput) as ours:
        parts.add(MediaPart("image", "data:,"))
    assert str(ours.value) == str(theirs.value)
    assert ours.value.parameter == "image"


def test_expanded_prompt_longer_than_the_context_is_refused() -> None:
    # 6 text tokens and 3 images of 8x6 (with breaks: 54), 1x8 (16) and 8x8 (72) merged patches
    media = facade("mistral3", "bfloat16", {}, None, max_model_len=100)
    with pytest.raises(BadInput) as caught:
        generate(media, f"a {I} b {I} c {I}", _pngs("several"), {})
    assert "The decoder prompt (length 148) is longer than the maximum model length of 100" in str(
        caught.value
    )


@pytest.mark.parametrize("mistral_mode", [False, True])
def test_served_family_and_mistral_tokenizer_mode(mistral_mode: bool) -> None:
    # The server wires the family for a Mistral 3 checkpoint; with --tokenizer-mode mistral
    # (prompts rendered to ids by mistral_common) media parts stay refused naming the type.
    import msgspec

    from vllm_frontend.cmd.assemble import load_model_resources, multimodal_facade
    from vllm_frontend.cmd.config import config_from_args
    from vllm_frontend.multimodal.parts import UnsupportedMedia
    from vllm_frontend.multimodal.pixtral import PixtralFamily

    config = config_from_args({"model_tag": str(tiny_mistral3_dir())})
    model = load_model_resources(config)
    if mistral_mode:
        model = msgspec.structs.replace(model, mistral=object())
    client = types.SimpleNamespace(registrations={}, engine_indices=[0])
    make = multimodal_facade(config, model, client)  # type: ignore[arg-type]
    assert make is not None
    media = make(None)  # type: ignore[arg-type]
    if not mistral_mode:
        assert isinstance(media.family, PixtralFamily)
        assert media.new_parts().add(MediaPart("image", "data:,")) is None  # no placeholder
        return
    assert media.family is None
    with pytest.raises(UnsupportedMedia, match="for model type 'mistral3' yet"):
        media.new_parts().add(MediaPart("image", "data:,"))


if __name__ == "__main__":
    result = _reference({"mistral3": sys.argv[1], "llava": sys.argv[2]})
    pathlib.Path(sys.argv[3]).write_bytes(pickle.dumps(result))

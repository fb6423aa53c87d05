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

from tests.support.render_reference import share_rust_tokenizers
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
    "request images_kwargs": (
        {"max_patches": 4},
        {"images_kwargs": {"min_patches": 2}},
        "bfloat16",
    ),
    # internvl_chat's option name: transformers' InternVL processor has no such option.
    "max_dynamic_patch": ({"max_dynamic_patch": 2}, {}, "bfloat16"),
}
# name: (prompt text, images as (width, height, "format[ mode]"), uuids)
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
    # Converted to RGB on loading (RGBA on a white background), as vLLM's ImageMediaIO does.
    "modes": (f"{C}{C}", [(70, 30, "PNG RGBA"), (45, 45, "PNG L")], None),
    # What the tiny model's chat template renders of CHAT_MESSAGES.
    "chat": (
        f"<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n{C}\nDescribe{C}\n"
        "<|im_end|>\n<|im_start|>assistant\n",
        [(120, 90, "JPEG"), (33, 250, "PNG")],
        None,
    ),
}


# The cases each setting is checked on: every case with the defaults, a few that tile
# differently under the others (the reference's cost grows with each).
GRID_CASES = ("sizes", "exact tiles", "uuids")
PAIRS = [("defaults bfloat16", name) for name in CASES] + [
    (setting, name)
    for setting in SETTINGS
    if setting != "defaults bfloat16"
    for name in (("chat", *GRID_CASES) if setting == "defaults float32" else GRID_CASES)
]


def _bytes(name: str) -> list[bytes]:
    """The case's images, encoded (a repeated size is the same image)."""
    out = []
    for width, height, kind in CASES[name][1]:
        fmt, _, mode = kind.partition(" ")
        rng = np.random.default_rng(zlib.crc32(f"{name}{width}x{height}".encode()))
        image = Image.fromarray(rng.integers(0, 256, (height, width, 4), dtype=np.uint8))
        image = image.convert(mode or "RGB")
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
            if (setting, name) not in PAIRS:
                continue
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


def _facade(
    server_kwargs: dict[str, Any], dtype: str, client: _Client, mirror: bool = False
) -> Any:
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
                         options=options, mirror_engine_cache=mirror)  # fmt: skip


def _url(data: bytes) -> str:
    kind = "jpeg" if data[:2] == b"\xff\xd8" else "png"
    return f"data:image/{kind};base64," + base64.b64encode(data).decode()


def _send(media: Any, client: _Client, name: str, request_kwargs: dict[str, Any]) -> Any:
    """Send case ``name``'s prompt and images through ``media``; what ``client`` got so far."""
    from vllm_frontend.multimodal.parts import MediaPart
    from vllm_frontend.text.llm import TextRequest
    from vllm_frontend.text.sampling import SamplingRequest

    text, _, uuids = CASES[name]
    parts = media.new_parts()
    for i, data in enumerate(_bytes(name)):
        parts.add(MediaPart("image", _url(data), uuids[i] if uuids else None))
    request = TextRequest(request_id=f"r{len(client.sent)}", max_tokens=4,
                          sampling=SamplingRequest(), add_special_tokens=False)  # fmt: skip
    generation = asyncio.run(
        media.generate(request, text, parts, mm_processor_kwargs=request_kwargs or None)
    )
    generation.source(0).start()
    return client.sent


@pytest.mark.parametrize(("setting", "name"), PAIRS)
def test_engine_request_equals_vllms_processor(
    reference: dict[tuple[str, str], Any], setting: str, name: str
) -> None:
    server, request_kwargs, dtype = SETTINGS[setting]
    want = reference[setting, name]
    client = _Client()
    [(ids, features)] = _send(_facade(server, dtype, client), client, name, request_kwargs)
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


@pytest.mark.parametrize("setting", ["defaults bfloat16", "request max 3 tiles"])
def test_items_the_engine_holds_go_without_data(
    reference: dict[tuple[str, str], Any], setting: str
) -> None:
    # As vLLM's sender cache does: the second time, every item is held (the first sending put
    # it in the mirror), its placeholder taken from the image size, its data None.
    server, request_kwargs, dtype = SETTINGS[setting]
    want = reference[setting, "sizes"]
    client = _Client()
    media = _facade(server, dtype, client, mirror=True)
    _send(media, client, "sizes", request_kwargs)
    [_, (ids, features)] = _send(media, client, "sizes", request_kwargs)
    assert ids == want["ids"]
    assert [f.mm_hash for f in features] == want["hashes"]
    assert [f.data for f in features] == [None] * 4
    ranges = [(f.mm_position.offset, f.mm_position.length, f.mm_position.is_embed.numpy().tolist())
              for f in features]  # fmt: skip
    assert ranges == want["ranges"]


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


def _part(data: bytes) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": _url(data)}}


CHAT_MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {
        "role": "user",
        "content": [
            _part(_bytes("chat")[0]),
            {"type": "text", "text": "Describe"},
            _part(_bytes("chat")[1]),
        ],
    },
]


class _GeneratingClient(_Client):
    """Records the engine requests and answers each with two tokens."""

    async def _outputs(self, request_id: str) -> Any:
        from vllm_frontend.engine.protocol import EngineCoreOutput, FinishReason

        yield EngineCoreOutput(request_id, [100])
        yield EngineCoreOutput(request_id, [101], finish_reason=FinishReason.LENGTH)

    def add_request(self, request: Any) -> Any:  # type: ignore[override]
        super().add_request(request)
        return self._outputs(request.request_id)


def _chat(body: dict[str, Any], max_model_len: int = 8192, limits: Any = None) -> Any:
    """POST ``body`` to ``/v1/chat/completions`` of the tiny InternVL served in process:
    (status, JSON body, what the engine got)."""
    from tests.support.generation_app import generation_app
    from tests.support.responses import body as body_of
    from vllm_frontend.multimodal.llm import MultimodalLlm, MultimodalOptions, load_family
    from vllm_frontend.multimodal.media import MediaLoader, MediaPolicy
    from vllm_frontend.server.transport import Request

    model = tiny_internvl_dir()
    tokenizer, config = _model()
    client = _GeneratingClient()
    options = MultimodalOptions(limit_mm_per_prompt=limits or {})

    def encode(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False)

    family = load_family(model, config, tokenizer.token_to_id, options, encode)

    def make(text: Any) -> MultimodalLlm:
        loader = MediaLoader(MediaPolicy())
        return MultimodalLlm(text, family, loader, model_id=str(model), config=config,
                             options=options)  # fmt: skip

    app = generation_app(
        model, client, max_model_len=max_model_len, tokenizer=tokenizer, multimodal=make
    )
    raw = json.dumps({"model": "m", "max_tokens": 2, **body}).encode()
    request = Request("POST", "/v1/chat/completions", b"", {b"content-type": b"application/json"},
                      raw)  # fmt: skip

    async def run() -> tuple[int, Any]:
        response = await app(request)
        return response.status, json.loads(await body_of(response))

    status, answer = asyncio.run(run())
    return status, answer, client.sent


def test_chat_with_data_urls_sends_vllms_engine_request(
    reference: dict[tuple[str, str], Any],
) -> None:
    status, answer, sent = _chat({"messages": CHAT_MESSAGES})
    assert status == 200, answer
    want = reference["defaults bfloat16", "chat"]
    [(ids, features)] = sent
    assert ids == want["ids"]
    assert [f.mm_hash for f in features] == want["hashes"]
    ranges = [(f.mm_position.offset, f.mm_position.length) for f in features]
    assert ranges == [(offset, length) for offset, length, _ in want["ranges"]]
    assert answer["usage"]["prompt_tokens"] == len(want["ids"])


def _error(body: dict[str, Any], **kwargs: Any) -> tuple[int, str]:
    status, answer, sent = _chat(body, **kwargs)
    assert sent == []  # the engine is never asked
    return status, answer["error"]["message"]


def test_bad_input_gets_vllms_400s() -> None:
    image = _part(_bytes("chat")[0])
    three = {"messages": [{"role": "user", "content": [image, image, image]}]}
    status, message = _error(three, limits={"image": 2})
    assert status == 400
    assert message.startswith("At most 2 image(s) may be provided in one prompt."), message
    truncated = _url(_bytes("chat")[1][:200])
    bad = {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": truncated}}]}]}  # fmt: skip
    status, message = _error(bad)
    assert status == 400 and message.startswith("Failed to load image"), message
    # The rendered text fits in 40 tokens; with the images' tiles expanded it does not: vLLM's
    # get_max_tokens refuses it (test_idefics3_requests checks the message against its server).
    status, message = _error({"messages": CHAT_MESSAGES}, max_model_len=40)
    assert status == 400 and message.startswith("Input length ("), message


if __name__ == "__main__":
    share_rust_tokenizers()
    pathlib.Path(sys.argv[2]).write_bytes(pickle.dumps(_reference(sys.argv[1])))

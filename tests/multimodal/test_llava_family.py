"""LLaVA-1.5 and LLaVA-NeXT image chat against vLLM 0.32's own frontend, in process (no server,
no engine): vLLM's render app (``vllm launch render``, the same chat parsing, media loading,
processor, hashing and length checks its API server runs before the engine) and our chat route
over our multimodal facade get the same chat requests (``image_url`` data: URLs, PNG and JPEG,
one and several images of random sizes and aspect ratios, grey and RGBA images, uuids,
``--mm-processor-kwargs``, bfloat16 and float32), for the tiny models of
:mod:`tests.support.tiny_llava` (a CLIP LLaVA-1.5, a CLIP LLaVA-NeXT, a SigLIP LLaVA-NeXT).

What must be equal: the prompt token ids with each ``<image>`` expanded, the items' hashes
(``mm_hash`` and ``identifier``), placeholder ranges, every field (name, factory, ``keep_on_cpu``,
dtype, shape, values), ``max_tokens`` left by the context after the placeholders; for bad input
(too many images, a video, a payload that is not an image, a truncated PNG, a prompt longer than
the context) the status and error body, with nothing sent to the engine.

vLLM's LLaVA code imports transformers' torchvision-backed processors, so the reference runs in a
subprocess on :data:`tests.support.tiny_vlm.VLM_PYTHONPATH` (this module run as a script)."""

from __future__ import annotations

import asyncio
import base64
import inspect
import io
import json
import os
import pathlib
import pickle
import shutil
import subprocess
import sys
import zlib
from collections.abc import AsyncIterator, Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from PIL import Image

from tests.support.render_reference import lean_render_apps, share_rust_tokenizers
from tests.support.tiny_llava import tiny_llava_dir
from tests.support.tiny_model import cache_root, inputs_hash
from tests.support.tiny_vlm import VLM_PYTHONPATH

pytestmark = pytest.mark.oracle

ROOT = pathlib.Path(__file__).resolve().parents[2]
MAX_MODEL_LEN = 320
LIMITS = {"image": 4}
# name: (variant, dtype, --mm-processor-kwargs)
APPS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "llava": ("llava", "bfloat16", {}),
    "llava float32, no center crop": ("llava", "float32", {"do_center_crop": False}),
    "llava_next": ("llava_next", "bfloat16", {}),
    "llava_next siglip": ("llava_next_siglip", "bfloat16", {}),
}


def _image(width: int, height: int, seed: int, fmt: str, mode: str = "RGB") -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    image = Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))
    buf = io.BytesIO()
    image.convert(mode).save(buf, fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    url = f"data:image/{fmt.lower()};base64," + base64.b64encode(buf.getvalue()).decode()
    return {"type": "image_url", "image_url": {"url": url}}


def _png(width: int, height: int, seed: int, mode: str = "RGB") -> dict[str, Any]:
    return _image(width, height, seed, "PNG", mode)


def _jpeg(width: int, height: int, seed: int) -> dict[str, Any]:
    return _image(width, height, seed, "JPEG")


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _random_sizes(name: str, count: int) -> list[tuple[int, int]]:
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    return [(int(rng.integers(8, 700)), int(rng.integers(8, 700))) for _ in range(count)]


def _truncated_png() -> dict[str, Any]:
    part = _png(64, 64, 9)
    url = part["image_url"]["url"]
    data = base64.b64decode(url.split(",", 1)[1])[:200]
    url = "data:image/png;base64," + base64.b64encode(data).decode()
    return {"type": "image_url", "image_url": {"url": url}}


def _not_an_image() -> dict[str, Any]:
    url = "data:image/png;base64," + base64.b64encode(b"hello, this is text").decode()
    return {"type": "image_url", "image_url": {"url": url}}


_VIDEO = {"type": "video_url", "video_url": {"url": "x"}}
REQUESTS: dict[str, dict[str, Any]] = {
    "one png": {"messages": [{"role": "user", "content": [_png(100, 60, 1), _text("What?")]}]},
    "text first, one jpeg": {
        "messages": [{"role": "user", "content": [_text("Look:"), _jpeg(130, 70, 2)]}]
    },
    "sizes and interleaved text": {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {
                "role": "user",
                "content": [
                    _text("First:"),
                    _png(300, 200, 3),
                    _text("then"),
                    _jpeg(97, 431, 4),
                    _png(20, 20, 5, "L"),
                    _png(1000, 90, 6),
                ],
            },
        ]
    },
    "random sizes": {
        "messages": [
            {
                "role": "user",
                "content": [
                    (_png if i % 2 else _jpeg)(w, h, 10 + i)
                    for i, (w, h) in enumerate(_random_sizes("random sizes", 3))
                ],
            }
        ]
    },
    "two turns, repeated image": {
        "messages": [
            {"role": "user", "content": [_png(64, 48, 1), _png(64, 48, 1)]},
            {"role": "assistant", "content": "Two."},
            {"role": "user", "content": [_text("Again"), _png(300, 200, 3)]},
        ]
    },
    "uuid": {"messages": [{"role": "user", "content": [{**_png(50, 190, 7), "uuid": "img-1"}]}]},
    "rgba": {"messages": [{"role": "user", "content": [_png(70, 30, 8, "RGBA")]}]},
    "string content": {"messages": [{"role": "user", "content": "No image here."}]},
    "max_tokens": {
        "messages": [{"role": "user", "content": [_png(90, 90, 11)]}],
        "max_tokens": 100,
    },
    "too many images": {
        "messages": [{"role": "user", "content": [_png(8 + i, 8, i) for i in range(5)]}]
    },
    "video": {"messages": [{"role": "user", "content": [_VIDEO]}]},
    "not an image": {"messages": [{"role": "user", "content": [_not_an_image()]}]},
    "truncated png": {"messages": [{"role": "user", "content": [_truncated_png()]}]},
    "longer than the context": {
        "messages": [{"role": "user", "content": [_png(110, 110, 20 + i) for i in range(4)]}],
        "max_tokens": 200,
    },
}


# -- the reference (run in a subprocess) --------------------------------------------------------


def _render_app(model: str, dtype: str, kwargs: dict[str, Any]) -> Any:
    from vllm import AsyncEngineArgs
    from vllm.config import VllmConfig
    from vllm.entrypoints.launchers.app import build_app
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.entrypoints.launchers.render.app_state import init_render_app_state
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    argv = ["--model", model, "--served-model-name", "m", "--dtype", dtype,
            "--max-model-len", str(MAX_MODEL_LEN), "--limit-mm-per-prompt", json.dumps(LIMITS),
            "--mm-processor-cache-gb", "0"]  # fmt: skip
    if kwargs:
        argv += ["--mm-processor-kwargs", json.dumps(kwargs)]
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(argv)
    engine_args = AsyncEngineArgs.from_cli_args(args)
    config = VllmConfig(
        model_config=engine_args.create_model_config(),
        structured_outputs_config=engine_args.create_structured_outputs_config(),
    )
    app = build_app(args, ("render",))
    asyncio.run(init_render_app_state(config, app.state, args))
    return app


def _reference(out: pathlib.Path) -> None:
    from starlette.testclient import TestClient
    from vllm.entrypoints.scale_out.token_in_token_out.mm_serde import decode_mm_kwargs_item

    lean_render_apps()
    results: dict[tuple[str, str], Any] = {}
    for app_name, (variant, dtype, kwargs) in APPS.items():
        app = _render_app(str(tiny_llava_dir(variant)), dtype, kwargs)
        with TestClient(app) as client:
            for name, body in REQUESTS.items():
                r = client.post("/v1/chat/completions/render", json={"model": "m", **body})
                if r.status_code != 200:
                    results[app_name, name] = {"status": r.status_code, "body": r.json()}
                    continue
                data = r.json()
                features = data.get("features")
                items = []
                if features is not None:
                    for hash_, place, encoded in zip(
                        features["mm_hashes"]["image"],
                        features["mm_placeholders"]["image"],
                        features["kwargs_data"]["image"],
                        strict=True,
                    ):
                        item = decode_mm_kwargs_item(encoded)
                        fields = {
                            key: (str(e.data.dtype).removeprefix("torch."), tuple(e.data.shape),
                                  e.data.float().numpy(), type(e.field).__name__,
                                  e.field.keep_on_cpu)
                            for key, e in item.items()
                        }  # fmt: skip
                        items.append((hash_, place["offset"], place["length"], fields))
                results[app_name, name] = {
                    "status": 200,
                    "ids": data["token_ids"],
                    "max_tokens": data["sampling_params"]["max_tokens"],
                    "items": items,
                }
    out.write_bytes(pickle.dumps(results))


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Any]:
    """vLLM's answers, computed once per change of their inputs (this module, the tiny models,
    vLLM's version) and kept in the test cache: building vLLM's render apps takes minutes."""
    import vllm

    models = [tiny_llava_dir(variant) for variant in sorted({v for v, _, _ in APPS.values()})]
    key = inputs_hash(
        json.dumps([APPS, REQUESTS, MAX_MODEL_LEN, LIMITS], sort_keys=True).encode(),
        inspect.getsource(_render_app).encode(),
        inspect.getsource(_reference).encode(),
        *(f.read_bytes() for m in models for f in sorted(m.iterdir())),
        *(str(m).encode() for m in models),  # vLLM's item hashes carry the model's path
        vllm.__version__.encode(),
    )
    target = cache_root() / f"llava-reference-{key}.pkl"
    if not target.is_file():
        staging = tmp_path_factory.mktemp("llava") / "reference.pkl"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([VLM_PYTHONPATH, str(ROOT)]))
        subprocess.run([sys.executable, __file__, str(staging)], check=True, env=env,
                       cwd=ROOT, timeout=900)  # fmt: skip
        shutil.move(staging, target)
    out: dict[tuple[str, str], Any] = pickle.loads(target.read_bytes())
    return out


# -- ours ----------------------------------------------------------------------------------------


class _Client:
    """An engine stand-in: records each request as sent (its features' data then) and
    finishes it with one token."""

    def __init__(self, dtype: str) -> None:
        self.registrations = {0: SimpleNamespace(dtype=dtype)}
        self.engine_indices = [0]
        self.sent: list[Any] = []
        self.features: list[list[Any]] = []
        """Each request's features as sent (the request drops them once sent)."""

    async def _outputs(self, request_id: str) -> AsyncIterator[Any]:
        from vllm_frontend.engine.protocol import EngineCoreOutput, FinishReason

        yield EngineCoreOutput(request_id, [100], finish_reason=FinishReason.LENGTH)

    def add_request(self, request: Any) -> Any:
        self.sent.append(request)
        self.features.append(list(request.mm_features or []))
        return self._outputs(request.request_id)

    def abort_requests(self, request_ids: Sequence[str]) -> int:
        return len(request_ids)


def _ours(variant: str, dtype: str, kwargs: dict[str, Any], cache_gb: float = 0) -> Any:
    from tests.support.generation_app import generation_app
    from vllm_frontend.cmd.assemble import load_model_resources, multimodal_facade
    from vllm_frontend.cmd.config import config_from_args

    model = tiny_llava_dir(variant)
    config = config_from_args({
        "model_tag": str(model), "served_model_name": ["m"], "max_model_len": MAX_MODEL_LEN,
        "limit_mm_per_prompt": LIMITS, "mm_processor_kwargs": kwargs or None,
        "mm_processor_cache_gb": cache_gb,
    })  # fmt: skip
    client = _Client(dtype)
    make = multimodal_facade(config, load_model_resources(config), client)  # type: ignore[arg-type]
    assert make is not None
    app = generation_app(model, client, max_model_len=MAX_MODEL_LEN, multimodal=make)
    return app, client


def _post(app: Any, body: dict[str, Any]) -> tuple[int, Any]:
    from tests.support.responses import body as body_of
    from vllm_frontend.server.transport import Request

    request = Request("POST", "/v1/chat/completions", b"",
                      {b"content-type": b"application/json"},
                      json.dumps({"model": "m", **body}).encode())  # fmt: skip

    async def run() -> tuple[int, bytes]:
        response = await app(request)
        return response.status, await body_of(response)

    status, raw = asyncio.run(run())
    return status, json.loads(raw)


@pytest.fixture(scope="module")
def ours() -> dict[str, Any]:
    return {name: _ours(*spec) for name, spec in APPS.items()}


@pytest.mark.parametrize("name", list(REQUESTS))
@pytest.mark.parametrize("app_name", list(APPS))
def test_engine_request_equals_vllms(
    reference: dict[tuple[str, str], Any], ours: dict[str, Any], app_name: str, name: str
) -> None:
    want = reference[app_name, name]
    app, client = ours[app_name]
    before = len(client.sent)
    status, body = _post(app, REQUESTS[name])
    if want["status"] != 200:
        assert (status, body) == (want["status"], want["body"])
        assert len(client.sent) == before  # the engine untouched
        return
    assert status == 200, body
    [request] = client.sent[before:]
    assert request.prompt_token_ids == want["ids"]
    assert request.sampling_params.max_tokens == want["max_tokens"]
    features = client.features[-1]
    assert len(features) == len(want["items"])
    for feature, (hash_, offset, length, fields) in zip(features, want["items"], strict=True):
        assert (feature.modality, feature.mm_hash, feature.identifier) == ("image", hash_, hash_)
        assert (feature.mm_position.offset, feature.mm_position.length) == (offset, length)
        assert feature.mm_position.is_embed is None
        mine = feature.data or {}
        assert set(mine) == set(fields)
        for key, (dtype, shape, values, kind, keep_on_cpu) in fields.items():
            elem = mine[key]
            factory, options = elem.field
            assert kind.lower() == f"multimodal{factory}field", key
            assert options.get("keep_on_cpu") == keep_on_cpu, key
            assert (elem.data.dtype, elem.data.shape) == (dtype, shape), key
            assert np.array_equal(elem.data.numpy().astype(np.float32), values), key


def test_the_cases_are_not_vacuous(reference: dict[tuple[str, str], Any]) -> None:
    # LLaVA-NeXT's items differ in token count and patch count by image size, and several
    # images of one request are padded to the same patch count; the bad requests fail in vLLM.
    items = reference["llava_next", "sizes and interleaved text"]["items"]
    assert len({length for _, _, length, _ in items}) > 1
    assert len({fields["pixel_values"][1] for *_, fields in items}) == 1
    assert items[0][3]["pixel_values"][1][0] > 2
    for name in ("too many images", "video", "not an image", "truncated png"):
        assert reference["llava", name]["status"] == 400
    assert reference["llava_next", "longer than the context"]["status"] == 400
    assert reference["llava", "longer than the context"]["status"] == 200


if __name__ == "__main__":
    share_rust_tokenizers()
    _reference(pathlib.Path(sys.argv[1]))


@pytest.mark.parametrize("app_name", ["llava", "llava_next", "llava_next siglip"])
def test_items_the_engine_holds_go_without_data(
    reference: dict[tuple[str, str], Any], app_name: str
) -> None:
    # With the engine's cache mirrored, a repeated image goes as data=None with the hash and
    # placeholder vLLM gives it, its length told from its size alone (not processed again).
    variant, dtype, kwargs = APPS[app_name]
    app, client = _ours(variant, dtype, kwargs, cache_gb=4)
    for name in ("one png", "random sizes", "sizes and interleaved text"):
        want = reference[app_name, name]
        for repeat in (False, True):
            assert _post(app, REQUESTS[name])[0] == 200
            assert client.sent[-1].prompt_token_ids == want["ids"]
            got = [(f.mm_hash, f.mm_position.offset, f.mm_position.length, f.data is None)
                   for f in client.features[-1]]  # fmt: skip
            assert got == [(h, o, n, repeat) for h, o, n, _ in want["items"]]


def _model_with(tmp: pathlib.Path, variant: str, **changes: Any) -> pathlib.Path:
    """A copy of the tiny ``variant`` with ``changes`` to its config files (file stem -> keys
    to set)."""
    source = tiny_llava_dir(variant)
    target = tmp / variant
    shutil.copytree(source, target)
    for stem, values in changes.items():
        path = target / f"{stem}.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **values}))
    return target


TOWER = {"model_type": "siglip2_vision_model", "image_size": 56, "patch_size": 14,
         "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 2}  # fmt: skip
# (A ``llava`` config with a Pixtral tower is the Pixtral family's: multimodal.pixtral.)
NOT_SERVED = {
    "siglip2 tower": ("llava_next", {"config": {"vision_config": TOWER}}),
    "a full CLIP config as the tower": (
        "llava",
        {"config": {"vision_config": {**TOWER, "model_type": "clip"}}},
    ),
    "another architecture": (
        "llava",
        {"config": {"architectures": ["MantisForConditionalGeneration"]}},
    ),
    "an image processor we lack": (
        "llava",
        {"preprocessor_config": {"image_processor_type": "LlavaImageProcessor"}},
    ),
}


@pytest.mark.parametrize("name", list(NOT_SERVED))
def test_models_not_served_have_no_family(tmp_path: pathlib.Path, name: str) -> None:
    from vllm_frontend.multimodal.llm import MultimodalOptions, load_family

    variant, changes = NOT_SERVED[name]
    model = _model_with(tmp_path, variant, **changes)
    config = json.loads((model / "config.json").read_text())
    assert load_family(model, config, lambda _: None, MultimodalOptions()) is None
    served = tiny_llava_dir(variant)
    assert load_family(
        served, json.loads((served / "config.json").read_text()), lambda _: None,
        MultimodalOptions(),
    ) is not None  # fmt: skip


def test_a_model_not_served_refuses_media_naming_its_type(tmp_path: pathlib.Path) -> None:
    from tests.support.generation_app import generation_app
    from vllm_frontend.cmd.assemble import load_model_resources, multimodal_facade
    from vllm_frontend.cmd.config import config_from_args

    variant, changes = NOT_SERVED["siglip2 tower"]
    model = _model_with(tmp_path, variant, **changes)
    config = config_from_args({"model_tag": str(model), "served_model_name": ["m"]})
    client = _Client("bfloat16")
    make = multimodal_facade(config, load_model_resources(config), client)  # type: ignore[arg-type]
    assert make is not None
    app = generation_app(model, client, max_model_len=MAX_MODEL_LEN, multimodal=make)
    status, body = _post(app, REQUESTS["one png"])
    assert (status, body["error"]["message"]) == (400, (
        "Multimodal inputs are not supported by this frontend for model type 'llava_next' yet. "
        "(parameter=messages)"
    ))  # fmt: skip
    assert client.sent == []
    assert _post(app, REQUESTS["string content"])[0] == 200  # text is served

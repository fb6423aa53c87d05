"""Precomputed embeddings (``--enable-mm-embeds``) for every family vLLM 0.32 takes them for,
against vLLM's own frontend, in process (no server, no engine): vLLM's render app (``vllm
launch render``: the same chat parsing, embeddings decoding, processor and hashing its API
server runs before the engine) and our chat route over our multimodal facade get the same chat
requests, for the tiny models of ``tests.support``:

- bare ``image_embeds`` tensors for LLaVA-1.5, LLaVA-NeXT and InternVL (``<img>`` ... ``</img>``
  around the rows), bare ``audio_embeds`` and ``{"audio_embeds", "audio_num_tokens"}``
  dictionaries for Qwen2-Audio, ``{"image_embeds", "image_grid_thw"}`` dictionaries for
  Qwen2.5-VL, ``{"video_embeds", "video_grid_thw", "timestamps"}`` dictionaries for Qwen3-VL
  (its placeholder holds each frame's timestamp text): one and several items, of one and of
  different lengths (vLLM stacks the first, keeps the others apart), a ``(1, n, hidden)``
  tensor, ``.npy`` and ``torch.save`` payloads, float32 / float16 / bfloat16, uuids;
- what must be equal: the prompt ids, every item's hash, placeholder range (and which of its
  positions take embeddings), fields (name, factory, ``keep_on_cpu``, dtype, shape, values);
- bad input (a wrong hidden size, bad base64, a ``torch.save`` file whose pickle names
  ``os.system``, wrong ranks, counts that do not match): vLLM's status (and its error body
  where vLLM's message does not quote the tensor), nothing sent to the engine, no code run;
  what vLLM answers 500 for, or passes to the engine though the engine cannot use it, is a 400;
- families vLLM refuses embeddings for (Idefics3, Gemma 3, Llama 4, Mistral 3, Pixtral-HF):
  refused as vLLM refuses them; InternVL's ``video_embeds``, which vLLM answers with a 500, a
  400.

vLLM's answers are computed once in a subprocess (on :data:`tests.support.tiny_vlm.
VLM_PYTHONPATH`) and kept in the test cache."""

from __future__ import annotations

import asyncio
import base64
import inspect
import io
import json
import os
import pathlib
import pickle
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import AsyncIterator, Callable, Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from tests.support.render_reference import lean_render_apps, share_rust_tokenizers
from tests.support.tiny_gemma3 import tiny_gemma3_dir
from tests.support.tiny_idefics3 import tiny_idefics3_dir
from tests.support.tiny_internvl import tiny_internvl_dir
from tests.support.tiny_llama4 import tiny_llama4_dir
from tests.support.tiny_llava import tiny_llava_dir
from tests.support.tiny_mistral3 import tiny_mistral3_dir, tiny_pixtral_hf_dir
from tests.support.tiny_model import cache_root, inputs_hash
from tests.support.tiny_qwen2_audio import tiny_qwen2_audio_dir
from tests.support.tiny_qwen3_vl import tiny_qwen3_vl_dir
from tests.support.tiny_qwen25_vl import tiny_qwen25_vl_dir
from tests.support.tiny_vlm import VLM_PYTHONPATH

pytestmark = pytest.mark.oracle

ROOT = pathlib.Path(__file__).resolve().parents[2]
MAX_MODEL_LEN = 1024
MARKER = pathlib.Path("/tmp/vllm-frontend-embeds-pwned")
"""What the hostile payload's pickle would create if it ran."""

MODELS: dict[str, Callable[[], pathlib.Path]] = {
    "llava": lambda: tiny_llava_dir("llava"),
    "llava_next": lambda: tiny_llava_dir("llava_next"),
    "internvl": tiny_internvl_dir,
    "qwen2_audio": tiny_qwen2_audio_dir,
    "qwen2_5_vl": tiny_qwen25_vl_dir,
    "qwen3_vl": tiny_qwen3_vl_dir,
    "idefics3": tiny_idefics3_dir,
    "gemma3": tiny_gemma3_dir,
    "llama4": tiny_llama4_dir,
    "mistral3": tiny_mistral3_dir,
    "pixtral_hf": tiny_pixtral_hf_dir,
}
BARE = ("llava", "llava_next", "internvl", "qwen2_audio")
"""The families taking bare embedding tensors."""
REFUSING = ("idefics3", "gemma3", "llama4", "mistral3", "pixtral_hf")


LIMITS = {"image": 4, "audio": 4}
TEMPLATE = "{% for message in messages %}{{ message['content'] }}\n{% endfor %}"
"""The chat template given to both frontends for a tiny model that has none (a "string"
content format: each item's placeholder text in the content)."""


def _template(model: pathlib.Path) -> str | None:
    """:data:`TEMPLATE` for a model without a chat template of its own."""
    if (model / "chat_template.jinja").is_file():
        return None
    if "chat_template" in json.loads((model / "tokenizer_config.json").read_text()):
        return None
    return TEMPLATE


def _hidden(model: pathlib.Path) -> int:
    config = json.loads((model / "config.json").read_text())
    text = config.get("text_config") or config
    return int(text["hidden_size"])


# -- the requests (built once, in this process; the reference reads them from a file) --------


def _npy(array: np.ndarray) -> str:
    buf = io.BytesIO()
    np.save(buf, array)
    return base64.b64encode(buf.getvalue()).decode()


def _saved(array: np.ndarray, dtype: str) -> str:
    import torch

    buf = io.BytesIO()
    torch.save(torch.from_numpy(array).to(getattr(torch, dtype)), buf)
    return base64.b64encode(buf.getvalue()).decode()


def _hostile() -> str:
    """A ``torch.save`` file whose pickle calls ``os.system`` when loaded without restriction."""
    import torch

    class Evil:
        def __reduce__(self) -> Any:
            return (os.system, (f"touch {MARKER}",))

    buf = io.BytesIO()
    torch.save(torch.zeros(2, 2), buf)
    out = io.BytesIO()
    with zipfile.ZipFile(buf) as src, zipfile.ZipFile(out, "w") as dst:
        for name in src.namelist():
            data = pickle.dumps(Evil(), protocol=2) if name.endswith("data.pkl") else src.read(name)
            dst.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)
    return base64.b64encode(out.getvalue()).decode()


def _rows(count: int, seed: int, width: int, dtype: Any = np.float32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((count, width)).astype(dtype)


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _user(*parts: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": [_text("Hi"), *parts]}]}


def _requests(app: str, hidden: int) -> dict[str, dict[str, Any]]:
    """The chat requests sent to both frontends for ``app``'s model."""
    if app == "qwen2_5_vl":

        def grid(rows: Any, thw: Any, **extra: Any) -> dict[str, Any]:
            values = _npy(rows) if isinstance(rows, np.ndarray) else rows
            payload = {"image_embeds": values, "image_grid_thw": thw}
            return {"type": "image_embeds", "image_embeds": payload, **extra}

        return {
            "one": _user(grid(_rows(4, 1, hidden), [1, 4, 4])),
            "three, text between": _user(
                grid(_rows(4, 2, hidden), [1, 4, 4]), _text("and"),
                grid(_rows(6, 3, hidden), [1, 4, 6]),
                grid(_saved(_rows(9, 4, hidden), "bfloat16"), [1, 6, 6]),
            ),
            "uuid": _user(grid(_rows(4, 5, hidden), [1, 4, 4], uuid="emb-1")),
            "hidden size": _user(grid(_rows(4, 1, hidden + 8), [1, 4, 4])),
        }  # fmt: skip
    if app == "qwen3_vl":

        def video(rows: Any, thw: Any, timestamps: Any = None, **extra: Any) -> dict[str, Any]:
            payload: Any = _npy(rows) if isinstance(rows, np.ndarray) else rows
            if thw is not None:
                payload = {"video_embeds": payload, "video_grid_thw": thw}
                if timestamps is not None:
                    payload["timestamps"] = timestamps
            return {"type": "video_embeds", "video_embeds": payload, **extra}

        return {
            "one": _user(video(_rows(8, 1, hidden), [2, 4, 4], [0.5, 1.5]), _text("What?")),
            "two, text between": _user(
                video(_rows(4, 2, hidden), [1, 4, 4], [0.25], uuid="emb-1"), _text("and"),
                video(_saved(_rows(18, 3, hidden), "bfloat16"), [3, 4, 6], [0, 2, 4]),
            ),
            "without timestamps": _user(video(_rows(8, 1, hidden), [2, 4, 4])),
            "bare tensor": _user(video(_rows(8, 1, hidden), None)),
            "timestamps of the wrong length": _user(video(_rows(8, 1, hidden), [2, 4, 4], [1.0])),
        }  # fmt: skip
    modality = "audio" if app == "qwen2_audio" else "image"
    key = f"{modality}_embeds"

    def part(payload: Any, **extra: Any) -> dict[str, Any]:
        if isinstance(payload, np.ndarray):
            # vLLM reads audio embeddings with torch.load alone
            payload = _saved(payload, payload.dtype.name) if modality == "audio" else _npy(payload)
        return {"type": key, key: payload, **extra}

    def rows(count: int, seed: int, dtype: Any = np.float32) -> np.ndarray:
        return _rows(count, seed, hidden, dtype)

    out = {
        "one": _user(part(rows(5, 1))),
        "two of different lengths, text between": _user(
            part(rows(5, 2)), _text("and"), part(rows(7, 3))
        ),
        "three of one length": _user(part(rows(4, 4)), part(rows(4, 5)), part(rows(4, 6))),
        "(1, n, hidden)": _user(part(rows(6, 7)[None])),
        "torch.save bfloat16": _user(part(_saved(rows(5, 8), "bfloat16"))),
        "torch.save float16 and float32, one length": _user(
            part(_saved(rows(5, 9), "float16")), part(_saved(rows(5, 10), "float32"))
        ),
        "float16 and float32, different lengths": _user(
            part(rows(3, 11, np.float16)), part(rows(8, 12))
        ),
        "repeated, with a uuid": _user(
            part(rows(5, 13)), part(rows(5, 13)), part(rows(2, 14), uuid="emb-1")
        ),
        # errors
        "hidden size": _user(part(rows(5, 1)[:, :-1])),
        "hidden size of the second": _user(part(rows(5, 1)), part(_rows(6, 2, hidden + 1))),
        "bad base64": _user(part("!!not base64!!")),
        "pickle naming os.system": _user(part(_hostile())),
        "garbage bytes": _user(part(base64.b64encode(b"garbage " * 20).decode())),
        "1-D tensor": _user(part(rows(1, 1)[0])),
        "two items in one tensor": _user(part(np.stack([rows(5, 1), rows(5, 2)]))),
        "second one 1-D": _user(part(rows(5, 1)), part(rows(1, 2)[0])),
        "no rows": _user(part(rows(0, 1))),
        "mixed with an image": _user(
            part(rows(5, 1)),
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
            if modality == "image"
            else {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
        ),
    }
    if app == "qwen2_audio":

        def saved(rows: np.ndarray) -> str:
            return _saved(rows, rows.dtype.name)

        def counted(rows: np.ndarray, count: Any, **extra: Any) -> dict[str, Any]:
            return part({"audio_embeds": saved(rows), "audio_num_tokens": count}, **extra)

        out |= {
            "dict with counts": _user(counted(rows(4, 20), [4]), counted(rows(6, 21), [6])),
            "dict with counts of one length": _user(
                counted(rows(4, 22), [4]), counted(rows(4, 23), [4])
            ),
            "dict, count as a tensor": _user(counted(rows(3, 24), saved(np.array(3, np.int32)))),
            "dict without counts": _user(
                part({"audio_embeds": saved(rows(5, 25))}),
                part({"audio_embeds": saved(rows(2, 26))}),
            ),
            "an .npy payload": _user(part(_npy(rows(5, 1)))),
            "dict, count off by one": _user(counted(rows(4, 27), [5])),
            "dict, count of zero": _user(counted(rows(4, 27), [0])),
            "dict, count of floats": _user(counted(rows(4, 27), [4.0])),
            "dict, nested count": _user(counted(rows(4, 27), [[4]])),
            "dict, two counts": _user(counted(rows(4, 27), [2, 2])),
            "dict, no embeddings": _user(part({"audio_num_tokens": [4]})),
            "dict, different keys": _user(
                counted(rows(4, 27), [4]), part({"audio_embeds": saved(rows(2, 26))})
            ),
            "dict, hidden size": _user(counted(rows(4, 27)[:, :-1], [4])),
        }  # fmt: skip
    else:
        out["dict payload"] = _user(part({"image_embeds": _npy(rows(5, 1))}))
    if app == "internvl":
        out["video embeds"] = _user({"type": "video_embeds", "video_embeds": _npy(rows(8, 1))})
        out["video embeds dict"] = _user(
            {"type": "video_embeds", "video_embeds": {"video_embeds": _npy(rows(8, 1))}}
        )
    return out


def _all_requests() -> dict[str, tuple[str, dict[str, dict[str, Any]]]]:
    """Each app's model directory and requests."""
    out = {}
    for app, make in MODELS.items():
        model = make()
        if app in REFUSING:
            key = "image_embeds"
            hidden = _hidden(model)
            grid = {key: _npy(_rows(4, 1, hidden)), "image_grid_thw": [1, 4, 4]}
            requests = {
                "one": _user({"type": key, key: _npy(_rows(5, 1, hidden))}),
                "two of different lengths": _user(
                    {"type": key, key: _npy(_rows(5, 1, hidden))},
                    {"type": key, key: _npy(_rows(7, 2, hidden))},
                ),
                "hidden size": _user({"type": key, key: _npy(_rows(5, 1, hidden + 1))}),
                "dict": _user({"type": key, key: grid}),
            }
        else:
            requests = _requests(app, _hidden(model))
        out[app] = (str(model), requests)
    return out


# -- the reference (run in a subprocess) --------------------------------------------------------


def _render_app(model: str) -> Any:
    from vllm import AsyncEngineArgs
    from vllm.config import VllmConfig
    from vllm.entrypoints.launchers.app import build_app
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.entrypoints.launchers.render.app_state import init_render_app_state
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    argv = ["--model", model, "--served-model-name", "m", "--dtype", "bfloat16",
            "--max-model-len", str(MAX_MODEL_LEN), "--mm-processor-cache-gb", "0",
            "--enable-mm-embeds", "--limit-mm-per-prompt", json.dumps(LIMITS)]  # fmt: skip
    template = _template(pathlib.Path(model))
    if template is not None:
        argv += ["--chat-template", template]
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(argv)
    engine_args = AsyncEngineArgs.from_cli_args(args)
    config = VllmConfig(
        model_config=engine_args.create_model_config(),
        structured_outputs_config=engine_args.create_structured_outputs_config(),
    )
    app = build_app(args, ("render",))
    asyncio.run(init_render_app_state(config, app.state, args))
    return app


def _reference(source: pathlib.Path, out: pathlib.Path) -> None:
    from starlette.testclient import TestClient
    from vllm.entrypoints.scale_out.token_in_token_out.mm_serde import decode_mm_kwargs_item
    from vllm.multimodal.processing.processor import BaseMultiModalProcessor

    lean_render_apps()
    # The render response leaves out which placeholder positions take embeddings: keep the
    # processor's last output to read them from.
    applied: list[Any] = []
    apply = BaseMultiModalProcessor.apply

    def recording_apply(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = apply(self, *args, **kwargs)
        applied.append(result)
        return result

    BaseMultiModalProcessor.apply = recording_apply  # type: ignore[method-assign]
    everything = pickle.loads(source.read_bytes())
    results: dict[tuple[str, str], Any] = {}
    for app_name, (model, requests) in everything.items():
        app = _render_app(model)
        with TestClient(app, raise_server_exceptions=False) as client:
            for name, body in requests.items():
                applied.clear()
                r = client.post("/v1/chat/completions/render", json={"model": "m", **body})
                if r.status_code != 200:
                    results[app_name, name] = {"status": r.status_code, "body": r.json()}
                    continue
                data = r.json()
                features = data.get("features") or {}
                is_embed = {}
                if applied:
                    for modality, ranges in applied[-1]["mm_placeholders"].items():
                        is_embed[modality] = [
                            None if p.is_embed is None else p.is_embed.tolist() for p in ranges
                        ]
                items = []
                for modality in features.get("mm_hashes", {}):
                    for index, (hash_, place, encoded) in enumerate(zip(
                        features["mm_hashes"][modality], features["mm_placeholders"][modality],
                        features["kwargs_data"][modality], strict=True,
                    )):  # fmt: skip
                        item = decode_mm_kwargs_item(encoded)
                        fields = {
                            key: (str(e.data.dtype).removeprefix("torch."), tuple(e.data.shape),
                                  e.data.float().numpy(), type(e.field).__name__,
                                  e.field.keep_on_cpu,
                                  [[(s.start, s.stop, s.step) for s in item]
                                   for item in e.field.slices]
                                  if hasattr(e.field, "slices") else None)
                            for key, e in item.items()
                        }  # fmt: skip
                        embed = is_embed.get(modality, [None] * (index + 1))[index]
                        items.append(
                            (modality, hash_, place["offset"], place["length"], embed, fields)
                        )
                results[app_name, name] = {"status": 200, "ids": data["token_ids"], "items": items}
    out.write_bytes(pickle.dumps(results))


@pytest.fixture(scope="module")
def requests_() -> dict[str, tuple[str, dict[str, dict[str, Any]]]]:
    return _all_requests()


@pytest.fixture(scope="module")
def reference(
    tmp_path_factory: pytest.TempPathFactory,
    requests_: dict[str, tuple[str, dict[str, dict[str, Any]]]],
) -> dict[tuple[str, str], Any]:
    """vLLM's answers, computed once per change of their inputs (an app's requests and tiny
    model, this module's reference code, vLLM's version) and kept in the test cache, per app
    (building vLLM's render app for a model takes about a minute)."""
    import vllm

    code = [inspect.getsource(_render_app).encode(), inspect.getsource(_reference).encode(),
            TEMPLATE.encode(), vllm.__version__.encode()]  # fmt: skip
    targets = {}
    for app, (model, requests) in requests_.items():
        files = [f.read_bytes() for f in sorted(pathlib.Path(model).iterdir()) if f.is_file()]
        # vLLM's item hashes carry the model's path
        key = inputs_hash(app.encode(), str(model).encode(), pickle.dumps(requests), *files, *code)
        targets[app] = cache_root() / f"tensor-embeds-reference-{app}-{key}.pkl"
    missing = {app: requests_[app] for app, target in targets.items() if not target.is_file()}
    if missing:
        tmp = tmp_path_factory.mktemp("tensor-embeds")
        (tmp / "requests.pkl").write_bytes(pickle.dumps(missing))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([VLM_PYTHONPATH, str(ROOT)]))
        env.pop("VLLM_USE_RUST_FRONTEND", None)
        subprocess.run([sys.executable, __file__, str(tmp / "requests.pkl"),
                        str(tmp / "reference.pkl")], check=True, env=env, cwd=ROOT,
                       timeout=1200)  # fmt: skip
        computed = pickle.loads((tmp / "reference.pkl").read_bytes())
        for app in missing:
            mine = {k: v for k, v in computed.items() if k[0] == app}
            (tmp / f"{app}.pkl").write_bytes(pickle.dumps(mine))
            shutil.move(tmp / f"{app}.pkl", targets[app])
    out: dict[tuple[str, str], Any] = {}
    for target in targets.values():
        out |= pickle.loads(target.read_bytes())
    return out


# -- ours ----------------------------------------------------------------------------------------


class _Client:
    """An engine stand-in: records each request's features as sent and finishes it with one
    token."""

    def __init__(self) -> None:
        self.registrations = {0: SimpleNamespace(dtype="bfloat16")}
        self.engine_indices = [0]
        self.sent: list[Any] = []
        self.features: list[list[Any]] = []

    async def _outputs(self, request_id: str) -> AsyncIterator[Any]:
        from vllm_frontend.engine.protocol import EngineCoreOutput, FinishReason

        yield EngineCoreOutput(request_id, [100], finish_reason=FinishReason.LENGTH)

    def add_request(self, request: Any) -> Any:
        self.sent.append(request)
        self.features.append(list(request.mm_features or []))
        return self._outputs(request.request_id)

    def abort_requests(self, request_ids: Sequence[str]) -> int:
        return len(request_ids)


def _ours(model: pathlib.Path) -> tuple[Any, _Client]:
    from tests.support.generation_app import generation_app
    from vllm_frontend.cmd.assemble import load_model_resources, multimodal_facade
    from vllm_frontend.cmd.config import config_from_args

    config = config_from_args({
        "model_tag": str(model), "served_model_name": ["m"], "max_model_len": MAX_MODEL_LEN,
        "limit_mm_per_prompt": LIMITS, "mm_processor_cache_gb": 0, "enable_mm_embeds": True,
    })  # fmt: skip
    client = _Client()
    resources = load_model_resources(config)
    make = multimodal_facade(config, resources, client)  # type: ignore[arg-type]
    assert make is not None
    app = generation_app(model, client, max_model_len=MAX_MODEL_LEN, multimodal=make,
                         tokenizer=resources.tokenizer)  # fmt: skip
    return app, client


def _post(app: Any, body: dict[str, Any]) -> tuple[int, Any]:
    from tests.support.responses import body as body_of
    from vllm_frontend.server.transport import Request

    request = Request("POST", "/v1/chat/completions", b"",
                      {b"content-type": b"application/json"},
                      json.dumps({"model": "m", "max_tokens": 1, **body}).encode())  # fmt: skip

    async def run() -> tuple[int, bytes]:
        response = await app(request)
        return response.status, await body_of(response)

    status, raw = asyncio.run(run())
    return status, json.loads(raw)


@pytest.fixture(scope="module")
def ours(
    tmp_path_factory: pytest.TempPathFactory,
    requests_: dict[str, tuple[str, dict[str, dict[str, Any]]]],
) -> dict[str, Any]:
    out = {}
    for app, (model, _) in requests_.items():
        path = pathlib.Path(model)
        if _template(path) is not None:
            # a copy of the model with the template of vLLM's --chat-template (only refusals
            # are compared for these: the hashes, which name the model's path, do not matter)
            copy = tmp_path_factory.mktemp(app)
            for f in path.iterdir():
                (copy / f.name).symlink_to(f)
            (copy / "chat_template.jinja").write_text(TEMPLATE)
            path = copy
        out[app] = _ours(path)
    return out


def _normalized(body: dict[str, Any]) -> dict[str, Any]:
    # vLLM names sets of fields in a Python set's order (it varies between processes).
    def sort(match: re.Match[str]) -> str:
        return "{" + ", ".join(sorted(match.group(1).split(", "))) + "}"

    message = re.sub(r"\{('[^{}]*')\}", sort, body["error"]["message"])
    return {**body, "error": {**body["error"], "message": message}}


def _hashes(app: str, model: str, item: dict[str, Any]) -> list[str]:
    """A dictionary item's possible vLLM hashes: its fields in either order (vLLM takes a set's
    order); a bare tensor's one hash."""
    import itertools

    import torch
    from vllm.multimodal.hasher import MultiModalHasher

    tensors = {}
    for key, elem in item.items():
        tensor = torch.from_numpy(np.array(elem.data.numpy()))
        tensors[key] = tensor.bfloat16() if elem.data.dtype == "bfloat16" else tensor
    modality = {"qwen2_audio": "audio", "qwen3_vl": "video"}.get(app, "image")
    if len(tensors) == 1:
        return []  # a bare tensor: compared with vLLM's hash directly
    return [
        MultiModalHasher.hash_kwargs(
            "blake3", model_id=model, **{modality: {k: tensors[k] for k in order}}
        )
        for order in itertools.permutations(tensors)
    ]


# Cases whose vLLM 400 quotes the tensor it failed on (its processor took it for media), or
# names a different cause: the status is compared, not the message.
_OWN_MESSAGE = {"1-D tensor", "two items in one tensor", "second one 1-D", "dict payload",
                "mixed with an image", "garbage bytes", "dict, nested count"}  # fmt: skip
# Refusals whose vLLM message comes from a different step of its processing (Gemma 3's and
# Llama 4's parsers count several embedding tensors as more images than the limit).
_STATUS_ONLY = {("gemma3", "two of different lengths"), ("llama4", "two of different lengths")}
# What vLLM answers 500 for, or passes to the engine though the engine cannot use it: ours is a
# 400 with nothing sent (the vLLM status checked, so a change in vLLM shows here).
_REFUSED: dict[tuple[str, str], int] = {
    ("qwen2_5_vl", "hidden size"): 200,
    ("qwen2_audio", "dict, hidden size"): 200,
}


def _cases() -> list[tuple[str, str]]:
    # The names only (the payloads are built by the fixture, once).
    names = {
        "qwen2_5_vl": ["one", "three, text between", "uuid", "hidden size"],
        "qwen3_vl": [
            "one",
            "two, text between",
            "without timestamps",
            "bare tensor",
            "timestamps of the wrong length",
        ],
        "internvl": ["video embeds", "video embeds dict"],
        **{app: ["one", "two of different lengths", "hidden size", "dict"] for app in REFUSING},
    }
    out = []
    common = ["one", "two of different lengths, text between", "three of one length",
              "(1, n, hidden)", "torch.save bfloat16", "torch.save float16 and float32, one length",
              "float16 and float32, different lengths", "repeated, with a uuid", "hidden size",
              "hidden size of the second", "bad base64", "pickle naming os.system",
              "garbage bytes", "1-D tensor", "two items in one tensor", "second one 1-D",
              "no rows", "mixed with an image"]  # fmt: skip
    audio = ["dict with counts", "dict with counts of one length", "dict, count as a tensor",
             "dict without counts", "dict, count off by one", "dict, count of zero",
             "dict, count of floats", "dict, nested count", "dict, two counts",
             "dict, no embeddings", "dict, different keys", "dict, hidden size",
             "an .npy payload"]  # fmt: skip
    for app in BARE:
        extra = audio if app == "qwen2_audio" else ["dict payload"]
        out += [(app, name) for name in common + extra]
    for app, listed in names.items():
        out += [(app, name) for name in listed]
    return out


@pytest.mark.parametrize(("app", "name"), _cases())
def test_engine_request_equals_vllms(
    reference: dict[tuple[str, str], Any],
    ours: dict[str, Any],
    requests_: dict[str, tuple[str, dict[str, dict[str, Any]]]],
    app: str,
    name: str,
) -> None:
    want = reference[app, name]
    model, requests = requests_[app]
    server, client = ours[app]
    before = len(client.sent)
    MARKER.unlink(missing_ok=True)
    status, body = _post(server, requests[name])
    assert not MARKER.exists()
    if want["status"] != 200 or (app, name) in _REFUSED:
        if (app, name) in _REFUSED:
            assert want["status"] == _REFUSED[app, name]
            assert status == 400, body
            assert body["error"]["type"] == "BadRequestError"
        elif name in _OWN_MESSAGE or want["status"] != 400 or (app, name) in _STATUS_ONLY:
            assert want["status"] in (400, 500), want
            assert status == 400, body
            assert body["error"]["type"] == "BadRequestError"
        else:
            assert (status, _normalized(body)) == (want["status"], _normalized(want["body"]))
        assert len(client.sent) == before  # the engine untouched
        return
    assert status == 200, body
    [request] = client.sent[before:]
    assert request.prompt_token_ids == want["ids"]
    features = client.features[-1]
    assert len(features) == len(want["items"])
    for feature, (modality, hash_, offset, length, is_embed, fields) in zip(
        features, want["items"], strict=True
    ):
        assert feature.modality == modality
        mine = feature.data or {}
        if len(mine) == 1 or hash_ == "emb-1":
            assert feature.mm_hash == hash_
        else:  # a dictionary item: vLLM hashes its fields in a set's order
            hashes = _hashes(app, model, mine)
            assert feature.mm_hash == hashes[0] and hash_ in hashes
        assert feature.identifier == feature.mm_hash
        assert (feature.mm_position.offset, feature.mm_position.length) == (offset, length)
        got_embed = feature.mm_position.is_embed
        assert (None if got_embed is None else got_embed.numpy().tolist()) == is_embed
        assert set(mine) == set(fields)
        for key, (dtype, shape, values, kind, keep_on_cpu, slices) in fields.items():
            elem = mine[key]
            factory, options = elem.field
            assert kind.lower() == f"multimodal{factory}field", key
            assert options.get("keep_on_cpu") == keep_on_cpu, key
            if slices is not None:
                assert [[tuple(s) for s in item] for item in options["slices"]] == slices, key
            assert (elem.data.dtype, elem.data.shape) == (dtype, shape), key
            assert np.array_equal(elem.data.numpy().astype(np.float32), values), key


def test_the_cases_are_not_vacuous(reference: dict[tuple[str, str], Any]) -> None:
    # Stacked items take the first one's dtype, items apart keep their own; InternVL's
    # placeholders wrap the rows; the hostile payload fails in vLLM too.
    def dtypes(app: str, name: str) -> list[str]:
        return [fields[f"{m}_embeds"][0] for m, *_, fields in reference[app, name]["items"]]

    assert dtypes("llava", "torch.save float16 and float32, one length") == ["float16"] * 2
    assert dtypes("llava", "float16 and float32, different lengths") == ["float16", "float32"]
    [item] = reference["internvl", "one"]["items"]
    assert item[3] == 7 and item[4] is not None and item[4].count(True) == 5
    for app in BARE:
        assert reference[app, "pickle naming os.system"]["status"] == 500  # ours: 400
        assert reference[app, "one"]["status"] == 200
    assert reference["qwen2_audio", "dict with counts"]["status"] == 200
    assert reference["qwen2_5_vl", "three, text between"]["status"] == 200
    for name in ("one", "two, text between"):  # timestamped placeholders, longer than the rows
        want = reference["qwen3_vl", name]
        assert want["status"] == 200 and all(
            item[3] > item[4].count(True) for item in want["items"]
        )
    assert reference["internvl", "video embeds"]["status"] == 500  # ours: 400


if __name__ == "__main__":
    share_rust_tokenizers()
    _reference(pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]))

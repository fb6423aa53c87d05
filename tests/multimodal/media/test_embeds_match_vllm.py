"""Embedding payloads read as vLLM 0.32 reads them (torch.load with weights_only, or numpy):
the same values, dtype and shape, and its status for payloads it refuses."""

from __future__ import annotations

import asyncio
import base64
import io
import pickle
from typing import Any

import numpy as np
import pytest

from tests.multimodal.media.vllm_reference import our_error, vllm_connector, vllm_outcome
from vllm_frontend.multimodal.media import MediaError, MediaLoader, MediaPolicy

pytestmark = pytest.mark.oracle  # imports vLLM and torch as the reference


def saved(obj: Any) -> str:
    import torch

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return base64.b64encode(buffer.getvalue()).decode()


def ours(payload: str) -> Any:
    async def run() -> Any:
        loader = MediaLoader(MediaPolicy.from_env())
        try:
            return await loader.load_embeds(payload, "image")
        finally:
            await loader.aclose()

    try:
        return "ok", asyncio.run(run())
    except MediaError as exc:
        return "error", our_error(exc)


def theirs(payload: str) -> Any:
    return vllm_outcome(vllm_connector().fetch_image_embedding_async(payload))


def tensors() -> dict[str, Any]:
    import torch

    g = torch.Generator().manual_seed(0)
    base = torch.randn(6, 10, generator=g)
    return {
        "float32": base,
        "float16": base.half(),
        "bfloat16": base.bfloat16(),
        "float64": base.double(),
        "int64": torch.arange(12).reshape(3, 4),
        "int8": torch.arange(-5, 5, dtype=torch.int8),
        "uint8": torch.arange(200, 210, dtype=torch.uint8),
        "bool": base > 0,
        "scalar": torch.tensor(3.5),
        "empty": torch.empty(0, 4),
        "strided view": base[1:5:2, ::3],
        "transposed": base.t(),
        "offset slice": base.flatten()[7:19].reshape(3, 4),
        "3d": torch.randn(2, 3, 4, generator=g),
    }


@pytest.mark.parametrize("name", list(tensors()))
def test_torch_saved_tensors_read_as_torch_reads_them(name: str) -> None:
    import torch

    tensor = tensors()[name]
    payload = saved(tensor)
    (ok, mine), (their_ok, reference) = ours(payload), theirs(payload)
    assert ok == their_ok == "ok"
    assert mine.dtype == str(reference.dtype).removeprefix("torch.")
    assert mine.array.shape == tuple(reference.shape)
    if reference.dtype == torch.bfloat16:
        expected = reference.contiguous().view(torch.int16).numpy().view(np.uint16)
    else:
        expected = reference.numpy()
    assert np.array_equal(mine.array, expected)


def test_npy_payloads_read_as_vllm_reads_them() -> None:
    buffer = io.BytesIO()
    np.save(buffer, np.arange(12, dtype=np.float32).reshape(3, 4))
    payload = base64.b64encode(buffer.getvalue()).decode()
    (_, mine), (_, reference) = ours(payload), theirs(payload)
    assert np.array_equal(mine.array, reference.numpy())


class Evil:
    def __reduce__(self) -> Any:
        return (print, ("pwned",))


def test_payloads_vllm_refuses_are_refused_with_its_status(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for payload in [
        saved({"a": 1}),
        saved(7),
        "**not base64**",
        base64.b64encode(b"garbage bytes" * 10).decode(),
        base64.b64encode(pickle.dumps(Evil())).decode(),
    ]:
        mine, reference = ours(payload), theirs(payload)
        assert mine[0] == reference[0] == "error"
        assert mine[1][0] == reference[1][0], (mine, reference)  # the status
        if not mine[1][2].startswith("File is not a zip file"):  # torch.load's own wording
            assert mine == reference
    import torch

    monkeypatch.setenv("VLLM_MAX_EMBED_DECODE_BYTES", "100")
    payload = saved(torch.zeros(5, 10))
    assert ours(payload) == theirs(payload)

"""Running transformers' torchvision-only image processors as the reference of ours: one
subprocess per CPU capability on tests/fixtures/torchvision_stub (see
``torchvision_image_reference``)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import numpy as np
from PIL import Image

from tests.multimodal.random_images import image_cases
from tests.support.fixtures import FIXTURES

ROOT = pathlib.Path(__file__).resolve().parents[2]


def image_batches(seed: int, count: int) -> list[list[Image.Image]]:
    """Each of ``count`` random images alone, then three batches of three; the modes whose array
    turns back into the same image (RGB, RGBA, L, LA)."""
    images = image_cases(seed, count, modes=["RGB", "RGB", "RGB", "RGBA", "L", "LA"])
    images = [Image.fromarray(np.asarray(image)) for image in images]
    return [[image] for image in images] + [images[i : i + 3] for i in range(0, 9, 3) if images[i:]]


def reference_outputs(
    tmp_path: pathlib.Path,
    settings: list[dict[str, Any]],
    batches: list[list[list[Image.Image]]],
    capability: str | None = None,
) -> dict[str, np.ndarray]:
    """transformers' outputs for ``batches[n][b]`` under ``settings[n]``, keyed as
    ``torchvision_image_reference`` writes them; ``capability`` sets torch's CPU capability
    (``ATEN_CPU_CAPABILITY``), which picks torchvision's bilinear path for ``uint8``."""
    source = tmp_path / f"in-{capability}.npz"
    target = tmp_path / f"out-{capability}.npz"
    arrays = {
        f"image_{n}_{b:03d}_{i:02d}": np.asarray(image)
        for n, per_setting in enumerate(batches)
        for b, batch in enumerate(per_setting)
        for i, image in enumerate(batch)
    }
    np.savez(source, settings=np.array(json.dumps(settings)), **arrays)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(FIXTURES / "torchvision_stub"), str(ROOT)])
    if capability:
        env["ATEN_CPU_CAPABILITY"] = capability
    subprocess.run(
        [sys.executable, "-m", "tests.multimodal.torchvision_image_reference", source, target],
        check=True,
        env=env,
        cwd=ROOT,
    )
    return dict(np.load(target))


def native_bilinear_is_uint8() -> bool:
    """Whether torchvision resizes ``uint8`` bilinearly on the bytes in this process's torch (its
    CPU capability is AVX2); otherwise it resizes a float32 copy and rounds."""
    import torch

    return "AVX2" in torch.backends.cpu.get_cpu_capability()


def vllm_model_source(name: str) -> str:
    """The path of vLLM's ``model_executor/models/<name>`` (found without importing vLLM)."""
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    assert spec is not None and spec.submodule_search_locations
    return str(pathlib.Path(spec.submodule_search_locations[0]) / "model_executor/models" / name)

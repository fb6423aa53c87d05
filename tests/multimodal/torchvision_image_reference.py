"""Runs transformers' torchvision-only image processors (Llama 4, Phi-4-multimodal) on images from
a file (a subprocess: it needs the torchvision stand-in of tests/fixtures/torchvision_stub on
``sys.path``, which must not leak into the test process's transformers).

    python -m tests.multimodal.torchvision_image_reference IN.npz OUT.npz

``IN.npz`` holds ``settings`` (a JSON list of ``{"processor", "config", "kwargs"}``) and
``image_<n>_<b>_<i>`` arrays (``uint8 [H, W]`` or ``[H, W, C]``): batch ``b`` of settings ``n``
is processed in one call. ``OUT.npz`` gets ``<output>_<n>_<b>`` (bfloat16 tensors as float32,
which holds them exactly, and ``<output>_<n>_<b>_bfloat16`` set), or ``error_<n>_<b>``.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict

import numpy as np


def _classes() -> dict[str, type]:
    from transformers.models.llama4.image_processing_llama4 import Llama4ImageProcessor
    from transformers.models.phi4_multimodal.image_processing_phi4_multimodal import (
        Phi4MultimodalImageProcessor,
    )

    return {"llama4": Llama4ImageProcessor, "phi4_multimodal": Phi4MultimodalImageProcessor}


def main(source: str, target: str) -> None:
    """Process every batch of ``source`` into ``target``."""
    import torch
    from PIL import Image

    classes = _classes()
    data = np.load(source)
    settings = json.loads(str(data["settings"]))
    batches: dict[str, list[str]] = defaultdict(list)
    for key in sorted(k for k in data.files if k.startswith("image_")):
        _, n, b, _ = key.split("_")
        batches[f"{n}_{b}"].append(key)
    out: dict[str, np.ndarray] = {}
    for index, keys in batches.items():
        setting = settings[int(index.split("_")[0])]
        processor = classes[setting["processor"]](**setting["config"])
        images = [Image.fromarray(data[key]) for key in keys]
        try:
            result = processor(images, return_tensors="pt", **setting["kwargs"])
        except Exception as error:
            out[f"error_{index}"] = np.array(repr(error))
            continue
        for name, value in result.items():
            if isinstance(value, torch.Tensor):
                if value.dtype == torch.bfloat16:
                    out[f"{name}_{index}_bfloat16"] = np.array(True)
                    value = value.float()
                out[f"{name}_{index}"] = value.numpy()
            else:
                out[f"{name}_{index}"] = np.asarray(value)
    np.savez(target, **out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

"""Where one image request's CPU goes in our multimodal pipeline, stage by stage.

    .venv/bin/python bench/mm_stages.py [--images 64]

Runs our own functions on the benchmark's images (bench/multimodal.py: 1024x768 JPEGs of
~110 KB as data URLs, the tiny Qwen2-VL's processor settings, bfloat16 as the engine's dtype) in
one thread and reports each stage's CPU time (``time.thread_time``, so other load on the machine
does not count) per image: base64 decode, JPEG decode, resize, patchify+normalise, hashing, and
encoding the engine request (MessagePack with the tensors as out-of-band frames).
"""

from __future__ import annotations

import argparse
import collections
import pathlib
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from frontends import REPO
from multimodal import data_url, photo_like_jpeg

_T = TypeVar("_T")


def main(argv: list[str] | None = None) -> int:
    """Print a markdown table of the stages' CPU per image."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=64)
    args = parser.parse_args(argv)

    import json

    import numpy as np

    from vllm_frontend.multimodal.hashing import image_hash_value, image_id, item_hash
    from vllm_frontend.multimodal.media import dataurl
    from vllm_frontend.multimodal.media.image import ImageOptions, decode_image
    from vllm_frontend.multimodal.processors.qwen2_vl import Qwen2VLImageProcessor

    sys.path.insert(0, str(REPO))
    from tests.support.tiny_vlm import tiny_vlm_dir

    model = tiny_vlm_dir()
    config = json.loads((model / "preprocessor_config.json").read_text())
    # vLLM 0.32's default for this family: the engine rescales and normalises (raw pixels sent)
    raw = {"do_rescale": False, "do_normalize": False}
    processor = Qwen2VLImageProcessor.from_config(config).with_kwargs(raw)
    urls = [data_url(photo_like_jpeg(5000 + i)) for i in range(args.images)]
    cost: collections.Counter[str] = collections.Counter()

    def hash_image(algorithm: str, model_id: str, value: object) -> str:
        return item_hash(
            algorithm,  # type: ignore[arg-type]
            model_id=model_id,
            modality="image",
            value=value,
            uuid=None,
            media_io_kwargs=None,
            mm_processor_kwargs=None,
        )

    def timed(stage: str, fn: Callable[..., _T], *a: Any) -> _T:
        t0 = time.thread_time()
        out = fn(*a)
        cost[stage] += time.thread_time() - t0
        return out

    for url in urls:
        _, payload = timed("data URL split", dataurl.split_data_url, url)
        data = timed("base64 decode (pybase64)", dataurl.b64decode, payload)

        item = timed("JPEG decode (decode_image)", decode_image, data, ImageOptions(), 0)
        image = item.image
        h, w = processor.resized_size(image.height, image.width)
        resized = timed("resize bicubic (Pillow)", image.resize, (w, h), processor.resample)
        pixels = timed("to numpy", np.asarray, resized)
        out = timed("patchify (+ bfloat16)", processor._patchify, pixels[None], "bfloat16")
        value = timed("EXIF ImageID lookup", image_id, image)
        timed(
            "hash (blake3)",
            hash_image,
            "blake3",
            str(model),
            image_hash_value(data, None, value),
        )
        assert out.pixel_values.dtype == np.uint16
    total = sum(cost.values())
    print(f"{args.images} images, {len(urls[0]) * 3 // 4 // 1000} KB JPEG each\n")
    print("| stage | CPU ms per image | share |\n|---|---:|---:|")
    for stage, seconds in cost.items():
        print(f"| {stage} | {1000 * seconds / len(urls):.2f} | {100 * seconds / total:.0f}% |")
    print(f"| total | {1000 * total / len(urls):.2f} | 100% |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

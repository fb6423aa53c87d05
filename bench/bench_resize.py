"""Our torch-exact uint8 resizes against torch's own, one thread each.

    .venv/bin/python bench/bench_resize.py [--repeat 5]

``resize_bicubic_u8`` (Qwen2-VL-family videos) and ``resize_bilinear_u8`` (Llama 4, Phi-4
images) give the bytes torch's antialiased ``interpolate`` gives on ``uint8`` tensors, which is
what vLLM's Python frontend runs through transformers' torchvision-backed processors. Reports
the best CPU time (``time.thread_time``) of each over ``--repeat`` runs per shape, after a warm-up
call (ours caches each axis's filter bands by size), and checks the outputs are equal.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from collections.abc import Callable

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as the server runs it

import numpy as np

from frontends import REPO

sys.path.insert(0, str(REPO / "src"))

from vllm_frontend.multimodal.processors.torch_resize import (
    resize_bicubic_u8,
    resize_bilinear_u8,
)

# (frames, height, width) -> (height, width): video frames, a photo, a full-HD frame, an upscale.
SHAPES = [
    ((16, 480, 640), (224, 308)),
    ((1, 768, 1024), (336, 448)),
    ((1, 1080, 1920), (336, 336)),
    ((4, 100, 120), (300, 360)),
]


def _best(fn: Callable[[], object], repeat: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeat):
        start = time.thread_time()
        fn()
        best = min(best, time.thread_time() - start)
    return best


def main(argv: list[str] | None = None) -> int:
    """Print a markdown table of ours vs torch per shape and mode."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    print(f"torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}")
    print("| input (frames x H x W) | output | mode | ours ms | torch ms | ours ÷ torch |")
    print("|---|---|---|---:|---:|---:|")
    ours_fns = {"bicubic": resize_bicubic_u8, "bilinear": resize_bilinear_u8}
    for (frames, height, width), (out_h, out_w) in SHAPES:
        pixels = rng.integers(0, 256, (frames, height, width, 3), dtype=np.uint8)
        tensor = torch.from_numpy(pixels).permute(0, 3, 1, 2).contiguous()
        for mode, ours in ours_fns.items():
            run_torch = functools.partial(
                torch.nn.functional.interpolate,
                tensor,
                size=[out_h, out_w],
                mode=mode,
                align_corners=False,
                antialias=True,
            )
            run_ours = functools.partial(ours, pixels, out_h, out_w)
            same = np.array_equal(run_ours(), run_torch().permute(0, 2, 3, 1).numpy())
            t_ours, t_torch = _best(run_ours, args.repeat), _best(run_torch, args.repeat)
            print(
                f"| {frames}x{height}x{width} | {out_h}x{out_w} | {mode} "
                f"| {t_ours * 1e3:.1f} | {t_torch * 1e3:.1f} | {t_ours / t_torch:.1f}"
                + ("" if same else " (outputs differ on this CPU)")
                + " |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

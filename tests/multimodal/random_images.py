"""Seeded random test images for the processor differentials: many sizes and aspect ratios (tiny,
large, 1 x N, N x 1) and the Pillow modes a processor meets (RGB, RGBA, L, LA, P, CMYK, 1, I;16)."""

from __future__ import annotations

import numpy as np
from PIL import Image

# (width, height): degenerate, tiny, thin, odd, square, landscape, portrait, large.
SIZES = [
    (1, 1),
    (2, 3),
    (1, 97),
    (113, 1),
    (5, 640),
    (777, 3),
    (17, 29),
    (64, 48),
    (48, 64),
    (224, 224),
    (336, 336),
    (363, 365),
    (364, 364),
    (365, 364),
    (640, 480),
    (480, 640),
    (1024, 768),
    (799, 1201),
    (1456, 1456),
    (1500, 97),
    (97, 1500),
    (2049, 1023),
    (3001, 57),
]
MODES = ["RGB", "RGB", "RGB", "RGBA", "L", "LA", "P", "CMYK", "1", "I;16"]


def random_image(
    rng: np.random.Generator, width: int, height: int, mode: str = "RGB"
) -> Image.Image:
    """A ``mode`` image of noise over smooth gradients, so that every filter tap matters."""
    ys = np.linspace(0, 1, height, dtype=np.float32)[:, None, None]
    xs = np.linspace(0, 1, width, dtype=np.float32)[None, :, None]
    phase = rng.uniform(0, 6.3, size=(1, 1, 4)).astype(np.float32)
    smooth = 127.5 + 127.5 * np.sin(6 * xs + 4 * ys + phase)
    noise = rng.normal(0, 40, size=(height, width, 4))
    rgba = np.clip(smooth + noise, 0, 255).astype(np.uint8)
    base = Image.fromarray(rgba, "RGBA")
    if mode == "RGBA":
        return base
    if mode == "I;16":
        return Image.fromarray(rgba[..., 0].astype(np.uint16) * 257)
    return base.convert("RGB").convert(mode)


def image_cases(seed: int, count: int, modes: list[str] | None = None) -> list[Image.Image]:
    """``count`` images: every size of :data:`SIZES` once (while ``count`` allows), then random
    sizes and aspect ratios, in modes drawn from ``modes`` (RGB-heavy by default)."""
    rng = np.random.default_rng(seed)
    modes = modes or MODES
    images = []
    for index in range(count):
        if index < len(SIZES):
            width, height = SIZES[index]
        else:
            area = rng.uniform(1, 1_200_000)
            ratio = float(np.exp(rng.uniform(-3, 3)))
            width = max(1, int((area * ratio) ** 0.5))
            height = max(1, int((area / ratio) ** 0.5))
        images.append(random_image(rng, width, height, modes[int(rng.integers(len(modes)))]))
    return images

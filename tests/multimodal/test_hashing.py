"""Item hashes against vLLM 0.32's own ``MultiModalHasher`` (the engine's cache keys must be the
ones vLLM's frontend computes): nested values, images loaded from bytes (converted or not, with
an EXIF ImageID), request uuids with and without processor / media-io options."""

from __future__ import annotations

import io
import uuid

import numpy as np
import pytest
from PIL import Image

from vllm_frontend.multimodal.hashing import (
    hash_kwargs,
    image_hash_value,
    image_id,
    item_hash,
    video_hash_value,
)
from vllm_frontend.multimodal.media.image import ImageOptions
from vllm_frontend.multimodal.media.image import decode_image as decode

pytestmark = pytest.mark.oracle

VALUES = [
    None,
    b"abc",
    "text",
    7,
    -1.5,
    True,
    [1, "a", None],
    (1, 2),
    {"a": 1, "b": [2.0, {"c": b"x"}]},
    {},
    [],
    np.arange(12, dtype=np.int64).reshape(3, 4),
    np.arange(6, dtype=np.float32)[::2],
    np.array(3.5),
]


@pytest.mark.parametrize("algorithm", ["blake3", "sha256", "sha512"])
def test_hash_kwargs_matches_vllm(algorithm: str) -> None:
    from vllm.multimodal.hasher import MultiModalHasher

    for i, value in enumerate(VALUES):
        kwargs = {"model_id": "m", "zeta": value, "alpha": VALUES[i - 1]}
        assert hash_kwargs(algorithm, **kwargs) == MultiModalHasher.hash_kwargs(
            algorithm, **kwargs
        ), value


def _encoded(mode: str, seed: int, exif_id: uuid.UUID | None = None) -> bytes:
    rng = np.random.default_rng(seed)
    image = Image.fromarray(rng.integers(0, 256, (20, 30, 4), dtype=np.uint8), "RGBA")
    image = image.convert(mode)
    out = io.BytesIO()
    if exif_id is not None:
        exif = Image.Exif()
        exif[0xA420] = str(exif_id)
        image.save(out, "PNG", exif=exif)
    else:
        image.save(out, "PNG")
    return out.getvalue()


@pytest.mark.parametrize("mode", ["RGB", "RGBA", "L", "P", "LA"])
def test_image_items_match_vllm(mode: str) -> None:
    from vllm.multimodal.hasher import MultiModalHasher
    from vllm.multimodal.media.image import ImageMediaIO

    data = _encoded(mode, 1)
    for io_kwargs in ({}, {"rgba_background_color": [0, 0, 0]}):
        theirs = ImageMediaIO(**io_kwargs).load_bytes(data)
        ours = decode(data, ImageOptions.from_kwargs(io_kwargs), 0)
        assert np.array_equal(np.asarray(ours.image), np.asarray(theirs.media))
        assert ours.io_config == theirs.io_config
        value = image_hash_value(ours.original_bytes, ours.io_config, image_id(ours.image))
        for processor_kwargs in ({}, {"max_pixels": 1000, "images_kwargs": {"x": 1}}):
            factors = {"mm_processor_kwargs": processor_kwargs} if processor_kwargs else {}
            expected = MultiModalHasher.hash_kwargs(
                "blake3", model_id="/models/x", image=theirs, **factors
            )
            got = item_hash(
                "blake3",
                model_id="/models/x",
                modality="image",
                value=value,
                uuid=None,
                media_io_kwargs=None,
                mm_processor_kwargs=processor_kwargs,
            )
            assert got == expected


def test_uuid_is_the_hash_without_options_and_hashed_with_them() -> None:
    from vllm.multimodal.hasher import MultiModalHasher

    plain = item_hash(
        "blake3",
        model_id="m",
        modality="image",
        value=b"x",
        uuid="u-1",
        media_io_kwargs=None,
        mm_processor_kwargs=None,
    )
    assert plain == "u-1"
    got = item_hash(
        "blake3",
        model_id="m",
        modality="image",
        value=b"x",
        uuid="u-1",
        media_io_kwargs={"image_mode": "L"},
        mm_processor_kwargs=None,
    )
    assert got == MultiModalHasher.hash_kwargs(
        "blake3", model_id="m", image="u-1", media_io_kwargs={"image": {"image_mode": "L"}}
    )


def test_image_with_exif_matches_vllm() -> None:
    from vllm.multimodal.hasher import MultiModalHasher
    from vllm.multimodal.media.image import ImageMediaIO

    data = _encoded("RGB", 2, exif_id=uuid.UUID(int=12345))
    theirs = ImageMediaIO().load_bytes(data)
    ours = decode(data, ImageOptions(), 0)
    value = image_hash_value(ours.original_bytes, ours.io_config, image_id(ours.image))
    assert hash_kwargs("blake3", model_id="m", image=value) == MultiModalHasher.hash_kwargs(
        "blake3", model_id="m", image=theirs
    )


@pytest.mark.parametrize("frames_smaller", [False, True])
@pytest.mark.parametrize("with_metadata", [False, True])
def test_video_hash_matches_vllm(frames_smaller: bool, with_metadata: bool) -> None:
    # A video hashes by its bytes, or by its frames when they are smaller, with the loader's
    # metadata beside them when there is some (vLLM's VideoProcessorItems.get_item_for_hash).
    from vllm.multimodal.hasher import MultiModalHasher
    from vllm.multimodal.media import MediaWithBytes

    rng = np.random.default_rng(5)
    frames = rng.integers(0, 256, (2, 4, 6, 3), dtype=np.uint8)
    original = rng.bytes(100 if frames_smaller else 200)
    metadata = {"total_num_frames": 9, "fps": 7.5, "duration": 1.2, "video_backend": "opencv",
                "frames_indices": [0, 8], "do_sample_frames": False}  # fmt: skip
    media = MediaWithBytes(frames, original)
    theirs: object = (media, metadata) if with_metadata else media
    ours = video_hash_value(original, frames, metadata if with_metadata else None)
    for algorithm in ("blake3", "sha256"):
        expected = MultiModalHasher.hash_kwargs(algorithm, model_id="m", video=theirs)
        assert hash_kwargs(algorithm, model_id="m", video=ours) == expected

"""Whatever bytes a request carries, loading ends in media or a MediaError with a 4xx/5xx
status vLLM uses, never another exception."""

from __future__ import annotations

import asyncio
import base64

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.multimodal.media.images import encode, noise
from tests.multimodal.media.videos import make_video
from vllm_frontend.multimodal.media import MediaError, MediaLoader, MediaPolicy

PNG = encode(noise("RGB", (16, 16)), "PNG")
VIDEO = make_video(frames=6, fps=5.0, size=(16, 16))


def mutate(data: bytes, edits: list[tuple[int, int]], cut: int) -> bytes:
    out = bytearray(data)
    for position, value in edits:
        out[position % len(out)] = value
    return bytes(out[: max(cut % (len(out) + 1), 1)])


async def outcome(loader: MediaLoader, kind: str, url: str) -> object:
    loads = {
        "image": loader.load_image,
        "video": loader.load_video,
        "audio": loader.load_audio,
    }
    try:
        return await loads[kind](url)
    except MediaError as exc:
        assert exc.status in (400, 422, 501), exc
        return exc


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(["image", "video", "audio"]),
    base=st.sampled_from([PNG, VIDEO, b"RIFF\x00\x00\x00\x00WAVEfmt ", b""]),
    edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=8),
    cut=st.integers(0, 100_000),
    media_type=st.sampled_from(["image/png", "video/jpeg", "audio/wav", ""]),
)
def test_mutated_payloads_never_escape_as_other_errors(
    kind: str, base: bytes, edits: list[tuple[int, int]], cut: int, media_type: str
) -> None:
    data = mutate(base, edits, cut) if base else b""
    url = f"data:{media_type};base64,{base64.b64encode(data).decode()}"

    async def run() -> None:
        loader = MediaLoader(MediaPolicy())
        try:
            await outcome(loader, kind, url)
        finally:
            await loader.aclose()

    asyncio.run(run())

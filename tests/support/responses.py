"""Read a route's response in-process, without a socket: iterated and pushed bodies alike."""

from __future__ import annotations

from vllm_frontend.server.transport import (
    AnyResponse,
    PushedStreamingResponse,
    Response,
    StreamingResponse,
    StreamSink,
)


class BufferSink(StreamSink):
    """A sink that keeps every chunk sent to it, as the server would frame them."""

    __slots__ = ("chunks",)

    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    def send(self, chunk: bytes) -> None:
        """Keep ``chunk`` (empty chunks are skipped, as on a connection)."""
        if chunk:
            self.chunks.append(chunk)


async def body_chunks(response: AnyResponse) -> list[bytes]:
    """The body's chunks in order (one for a plain response)."""
    if isinstance(response, Response):
        return [response.body]
    if isinstance(response, StreamingResponse):
        return [chunk async for chunk in response.body]
    assert isinstance(response, PushedStreamingResponse)
    sink = BufferSink()
    await response.produce(sink)
    return sink.chunks


async def body(response: AnyResponse) -> bytes:
    """The whole body."""
    return b"".join(await body_chunks(response))

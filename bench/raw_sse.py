"""A cheap load client for streamed chat requests: pre-encoded HTTP/1.1 POSTs over raw asyncio
streams, one keep-alive connection per in-flight request, and just enough parsing of the chunked
SSE reply to time the first chunk carrying ``"content"`` and to check that ``data: [DONE]`` came.

It measures what ``bench/multimodal.py``'s aiohttp client measured (same bodies, same concurrency,
same TTFT and completion criteria, every frontend alike) for a fraction of its CPU, which matters
on a 2-core machine where the client shares the cores with the frontend under test.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

__all__ = ["Timing", "drive_raw"]

_CONTENT = b'"content"'
_DONE = b"data: [DONE]"
_CARRY = max(len(_CONTENT), len(_DONE))


@dataclass
class Timing:
    """One request's TTFT and latency (s), and whether it ended well."""

    ttft: float
    latency: float
    ok: bool


def _request(port: int, path: str, body: bytes) -> bytes:
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def _read_reply(reader: asyncio.StreamReader, t0: float) -> tuple[Timing, bool]:
    """Read one reply; its timing and whether the connection may be reused."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    lower = head.lower()
    keep = b"connection: close" not in lower
    ttft, done, tail = 0.0, False, b""
    if b"transfer-encoding: chunked" in lower:
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")  # no trailers: the empty line
                break
            data = await reader.readexactly(size + 2)
            window = tail + data
            if not ttft and _CONTENT in window:
                ttft = time.perf_counter() - t0
            done = done or _DONE in window
            tail = data[-_CARRY:]
    else:
        length = next(
            (int(line.split(b":", 1)[1]) for line in lower.split(b"\r\n")
             if line.startswith(b"content-length:")),
            None,
        )  # fmt: skip
        if length is None:
            await reader.read()
            keep = False
        else:
            await reader.readexactly(length)
    ok = status == 200 and done
    return Timing(ttft, time.perf_counter() - t0, ok), keep


async def _drive(port: int, path: str, bodies: list[bytes], concurrency: int) -> list[Timing]:
    requests = [_request(port, path, b) for b in bodies]
    requests.reverse()
    out: list[Timing] = []

    async def worker() -> None:
        conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            while requests:
                request = requests.pop()
                t0 = time.perf_counter()  # a new connection's setup counts, as in aiohttp's
                if conn is None:
                    conn = await asyncio.open_connection("127.0.0.1", port, limit=2**20)
                reader, writer = conn
                writer.write(request)
                timing, keep = await _read_reply(reader, t0)
                out.append(timing)
                if not keep:
                    writer.close()
                    conn = None
        finally:
            if conn is not None:
                conn[1].close()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return out


def drive_raw(port: int, bodies: list[bytes], concurrency: int) -> list[Timing]:
    """POST ``bodies`` to ``/v1/chat/completions`` with ``concurrency`` requests in flight."""
    return asyncio.run(_drive(port, "/v1/chat/completions", bodies, concurrency))

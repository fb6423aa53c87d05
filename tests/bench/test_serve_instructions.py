"""bench/serve_instructions.py's closed-loop client and dump reading, against a hand-made server
and dump files."""

from __future__ import annotations

import asyncio
import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.serve_instructions import closed_loop, dumped_total, request_bytes  # noqa: E402


async def _serve(statuses: list[int], seen: list[bytes]) -> tuple[asyncio.Server, int]:
    """A keep-alive HTTP/1.1 server: each request's body recorded, answered with the next status
    of ``statuses`` (200 once they run out), its head and body in separate writes."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                seen.append(await reader.readexactly(length))
                status = statuses.pop(0) if statuses else 200
                body = b'{"ok": true}'
                writer.write(b"HTTP/1.1 %d X\r\ncontent-length: %d\r\n\r\n" % (status, len(body)))
                await writer.drain()
                writer.write(body)
        except asyncio.IncompleteReadError:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def test_closed_loop_sends_exactly_n_requests_round_robin() -> None:
    async def run() -> list[bytes]:
        seen: list[bytes] = []
        server, port = await _serve([], seen)
        async with server:
            await closed_loop(port, "/v1/completions", [b'{"a": 1}', b'{"b": 22}'], 7, 3)
        return seen

    seen = asyncio.run(run())
    assert len(seen) == 7
    assert sorted(seen) == sorted([b'{"a": 1}', b'{"b": 22}'] * 3 + [b'{"a": 1}'])


def test_closed_loop_raises_on_a_refusal() -> None:
    async def run() -> None:
        server, port = await _serve([200, 503], [])
        async with server:
            await closed_loop(port, "/v1/completions", [b"{}"], 4, 1)

    with pytest.raises(RuntimeError, match="status 503"):
        asyncio.run(run())


def test_dumped_total_reads_the_newest_new_dump(tmp_path: pathlib.Path) -> None:
    prefix = str(tmp_path / "callgrind-x")
    (tmp_path / "callgrind-x.1").write_text("events: Ir\nsummary: 100\n")
    before = {prefix + ".1"}
    (tmp_path / "callgrind-x.2").write_text("events: Ir\nfn=(1) f\n3 5\ntotals: 250\n")
    (tmp_path / "callgrind-x.10").write_text("events: Ir\nsummary: 777\n")
    assert dumped_total(prefix, before) == 777


def test_request_bytes_frame_a_post_or_a_bodiless_get() -> None:
    assert request_bytes("/v1/completions", b'{"a": 1}') == (
        b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b'Content-Length: 8\r\n\r\n{"a": 1}'
    )
    assert request_bytes("/health", b"") == b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"

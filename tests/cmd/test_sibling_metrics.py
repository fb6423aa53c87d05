"""SiblingMetrics over real Unix sockets, several "processes" in one event loop.

Each stands in for an API server: its app answers ``/metrics`` from its own registry. Whichever
one takes a scrape answers for all; one that is missing or stalled costs at most the timeout.
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import os
import pathlib
import re

import pytest
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from tests.support.exposition import without_created_values

from vllm_frontend.metrics import series
from vllm_frontend.metrics.registry import MetricsRegistry
from vllm_frontend.server.app import ServerSettings
from vllm_frontend.server.routes import Services, build_app
from vllm_frontend.server.sibling_metrics import SiblingMetrics, snapshot_path
from vllm_frontend.server.transport import AnyResponse, Request, Response, StreamingResponse

TIMEOUT_S = 0.3


class FakeServer:
    """One process: a counter, and an app serving it on ``/metrics`` (others answer 204)."""

    def __init__(self, directory: str, index: int, count: int) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("served", "Requests served.", registry=self.registry)
        self.stalled = asyncio.Event()
        self.stalled.set()
        self.siblings = SiblingMetrics(directory, index, count, timeout_s=TIMEOUT_S)
        self.app = self.siblings.wrap(self.own_app)

    async def own_app(self, request: Request) -> AnyResponse:
        if request.path != "/metrics":
            return Response(b"", 204)
        await self.stalled.wait()
        return Response(generate_latest(self.registry), 200, CONTENT_TYPE_LATEST.encode())

    async def scrape(self) -> float:
        response = await self.app(Request("GET", "/metrics", b"", {}, b""))
        assert isinstance(response, Response) and response.status == 200
        assert (b"content-type", CONTENT_TYPE_LATEST.encode()) in response.headers
        found = re.search(rb"^served_total (\S+)$", response.body, re.M)
        assert found is not None, response.body
        return float(found.group(1))


def test_any_process_answers_for_all_and_missing_or_stalled_ones_cost_only_the_timeout(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="vllm_frontend.server.sibling_metrics")

    async def run() -> None:
        servers = [FakeServer(str(tmp_path), i, 4) for i in range(4)]
        for i, s in enumerate(servers[:3]):  # API server 3 never comes up
            await s.siblings.start(s.own_app)
            s.requests.inc(10**i)
        try:
            assert [await s.scrape() for s in servers[:3]] == [111.0] * 3
            # Not a scrape: passed through, untouched.
            other = await servers[0].app(Request("GET", "/health", b"", {}, b""))
            assert other.status == 204

            # API server 2 stalls: its last snapshot stands in, after the timeout.
            servers[2].requests.inc(1000)
            servers[2].stalled.clear()
            loop = asyncio.get_running_loop()
            start = loop.time()
            assert await servers[0].scrape() == 111.0
            assert TIMEOUT_S <= loop.time() - start < TIMEOUT_S + 1
            servers[2].stalled.set()
            assert await servers[0].scrape() == 1111.0
            assert await servers[1].scrape() == 1111.0
        finally:
            for s in servers[:3]:
                await s.siblings.close()
        assert os.listdir(tmp_path) == []

    asyncio.run(run())
    messages = [r.getMessage() for r in caplog.records]
    # API server 3: one warning per scraping process, then quiet (debug) while it stays away.
    assert sum("API server 3 left out of /metrics" in m for m in messages) == 3
    assert any(
        re.match(r"metrics: API server 2: no answer within the timeout; /metrics uses its "
                 r"snapshot from \d+\.\d s ago", m)
        for m in messages
    ), messages  # fmt: skip
    assert any("API server 2 answers again" in m for m in messages), messages


def test_a_broken_sibling_answer_is_left_out(tmp_path: pathlib.Path) -> None:
    async def run() -> None:
        server = FakeServer(str(tmp_path), 0, 2)
        server.requests.inc(5)
        await server.siblings.start(server.own_app)

        async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(b"\xc1 not msgpack")
            writer.close()

        broken = await asyncio.start_unix_server(garbage, snapshot_path(str(tmp_path), 1))
        try:
            assert await server.scrape() == 5.0
        finally:
            broken.close()
            await server.siblings.close()

    asyncio.run(run())


def test_the_negotiating_mount_answers_for_all_too(tmp_path: pathlib.Path) -> None:
    """``/metrics/`` (vLLM's prometheus_client mount) with OpenMetrics and gzip: the merged
    series, as prometheus_client writes one counter holding their sum."""
    reference = CollectorRegistry()
    Counter("served", "Requests served.", ["engine"], registry=reference).labels("0").inc(111)
    expected = generate_openmetrics(reference)

    async def run() -> None:
        processes, everyone = [], []
        for i in range(3):
            registry = MetricsRegistry()
            served = series.Counter("served", "Requests served.", ("engine",))
            served.child(("0",)).inc(10**i)
            registry.register(series.SeriesCollector([served]))
            app = build_app(ServerSettings(http_metrics=False), Services(metrics_registry=registry))
            siblings = SiblingMetrics(str(tmp_path), i, 3, timeout_s=TIMEOUT_S)
            await siblings.start(app)
            everyone.append(siblings)
            processes.append(siblings.wrap(app))
        headers = {b"accept": b"application/openmetrics-text", b"accept-encoding": b"gzip"}
        try:
            for app in processes:
                response = await app(Request("GET", "/metrics/", b"", headers, b""))
                assert isinstance(response, StreamingResponse) and response.status == 200
                assert (b"content-encoding", b"gzip") in response.headers
                page = gzip.decompress(b"".join([chunk async for chunk in response.body]))
                assert without_created_values(page) == without_created_values(expected)
        finally:
            for siblings in everyone:
                await siblings.close()

    asyncio.run(run())

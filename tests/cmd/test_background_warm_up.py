"""Work the server does after /health turns ready (the detokenizer's table fill) runs in slices:
requests that arrive meanwhile are served between them, and a failure only costs the warm-up."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest

from vllm_frontend.cmd.runner import _run_in_slices


def test_other_callbacks_run_between_the_slices() -> None:
    order: list[str] = []

    def slices() -> Iterator[None]:
        for i in range(3):
            order.append(f"slice {i}")
            yield

    async def main() -> None:
        loop = asyncio.get_running_loop()
        _run_in_slices(loop, slices())
        loop.call_soon(order.append, "request")
        for _ in range(6):
            await asyncio.sleep(0)

    asyncio.run(main())
    assert order[0] == "slice 0"
    assert order.index("request") < order.index("slice 2")
    assert [x for x in order if x != "request"] == ["slice 0", "slice 1", "slice 2"]


def test_a_failing_slice_is_logged_and_ends_the_warm_up(caplog: pytest.LogCaptureFixture) -> None:
    ran: list[int] = []

    def slices() -> Iterator[None]:
        ran.append(0)
        yield
        raise RuntimeError("broken table")

    async def main() -> None:
        _run_in_slices(asyncio.get_running_loop(), slices())
        for _ in range(4):
            await asyncio.sleep(0)

    with caplog.at_level(logging.ERROR):
        asyncio.run(main())
    assert ran == [0]
    assert "background warm-up failed" in caplog.text
    assert "broken table" in caplog.text

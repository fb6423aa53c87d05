"""``App.aclose``: what the handlers hold is released once the server stops serving."""

from __future__ import annotations

import asyncio

from vllm_frontend.server.app import App, ServerSettings


def test_closers_run_in_order_once_and_a_failure_does_not_stop_the_rest() -> None:
    app = App(ServerSettings())
    ran: list[str] = []

    async def first() -> None:
        ran.append("first")
        raise RuntimeError("boom")

    async def second() -> None:
        ran.append("second")

    app.on_close(first)
    app.on_close(second)
    asyncio.run(app.aclose())
    asyncio.run(app.aclose())
    assert ran == ["first", "second"]

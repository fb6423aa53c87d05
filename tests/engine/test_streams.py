"""A request stream's queue on its own: what a push consumer sees when outputs pile up before its
callback runs (as they do on a loaded machine, where the engine's next step arrives first)."""

from __future__ import annotations

import asyncio

import pytest

from vllm_frontend.engine.protocol import EngineCoreOutput, FinishReason
from vllm_frontend.engine.streams import Notifier, RequestState, RequestStream


class _Owner:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.aborted: list[str] = []

    def abort_state(self, state: RequestState) -> None:
        self.aborted.append(state.request_id)

    def abort_later(self, request_id: str) -> None:
        self.aborted.append(request_id)


def _out(token: int, finish: FinishReason | None = None) -> EngineCoreOutput:
    return EngineCoreOutput("r", [token], finish_reason=finish)


def test_outputs_after_a_raising_handler_do_not_hide_its_error() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        state = RequestState("r", 0, Notifier(loop))
        stream = RequestStream(_Owner(loop), state)
        seen: list[object] = []

        def handler(out: EngineCoreOutput) -> bool:
            raise ValueError("consumer bug")

        def ready() -> None:
            try:
                seen.append(stream.take())
            except ValueError as e:
                seen.append(e)

        stream.on_ready(ready)
        stream.on_output(handler)
        # Three engine steps and the final output land before the callback's loop iteration.
        state.put(_out(1))
        state.put(_out(2))
        state.put(_out(3))
        state.finish(_out(4, FinishReason.LENGTH))
        await asyncio.sleep(0)
        assert len(seen) == 1 and isinstance(seen[0], ValueError)
        assert stream.finished and stream.finish_reason is None
        assert stream.take() == []

    asyncio.run(main())


@pytest.mark.parametrize("steps", [0, 1, 3])
def test_a_handler_that_declines_keeps_every_output_in_order(steps: int) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        state = RequestState("r", 0, Notifier(loop))
        stream = RequestStream(_Owner(loop), state)
        taken: list[int] = []
        stream.on_ready(lambda: taken.extend(t for o in stream.take() for t in o.new_token_ids))
        stream.on_output(lambda out: False)
        for token in range(steps):
            state.put(_out(token))
        state.finish(_out(steps, FinishReason.STOP))
        await asyncio.sleep(0)
        assert taken == list(range(steps + 1))
        assert stream.finish_reason is FinishReason.STOP

    asyncio.run(main())


def test_a_push_consumer_taking_outputs_queued_before_a_failure_is_called_again_for_it() -> None:
    # A FINAL_ONLY consumer keeps running outputs to itself and waits for the next call: the
    # engine's death behind them must still reach it.
    async def main() -> None:
        loop = asyncio.get_running_loop()
        state = RequestState("r", 0, Notifier(loop))
        stream = RequestStream(_Owner(loop), state)
        seen: list[object] = []

        def ready() -> None:
            try:
                seen.append(stream.take())
            except RuntimeError as e:
                seen.append(e)

        stream.on_ready(ready)
        state.put(_out(1))
        state.fail(RuntimeError("engine died"))
        for _ in range(3):
            await asyncio.sleep(0)
        assert len(seen) == 2
        assert [o.new_token_ids for o in seen[0]] == [[1]]  # type: ignore[attr-defined]
        assert isinstance(seen[1], RuntimeError)

    asyncio.run(main())

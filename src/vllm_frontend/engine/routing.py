"""The output router: every message on the output socket, decoded once, handed out in one pass.

It runs from the output socket's reader callback (no task resumes per engine message): each
``EngineCoreOutputs`` message's outputs go to their request streams (running ones with ``put``,
final ones with ``finish``), and what else the message carries to its owner: finished-elsewhere
ids to the request table, scheduler stats to the stats board, a utility reply to its call, a
completed wave to the balancer. No task, future or queue per output. This is the per-token path:
keep its work per message and per output as it is.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Container
from functools import partial

from vllm_frontend.engine import codec
from vllm_frontend.engine.balance import EngineBalancer
from vllm_frontend.engine.errors import EngineDeadError, EngineDeadSignal, ProtocolError
from vllm_frontend.engine.liveness import Liveness
from vllm_frontend.engine.protocol import EngineCoreOutputs
from vllm_frontend.engine.requests import RequestSender
from vllm_frontend.engine.scheduler_stats import StatsBoard
from vllm_frontend.engine.transport import EngineSockets, recv_ready, watch_readable
from vllm_frontend.engine.utility import UtilityCalls
from vllm_frontend.engine.zmtp_sockets import ZmtpPull

__all__ = ["OutputRouter", "StepObserver"]

logger = logging.getLogger(__name__)

StepObserver = Callable[[EngineCoreOutputs, Container[str]], None]
"""Called with every outputs message and the request ids still streamed, before the message's
outputs go to their streams."""


class OutputRouter:
    """Reads the output socket and delivers each message's parts to their owners."""

    __slots__ = (
        "_balancer",
        "_coordinated",
        "_finished_elsewhere",
        "_in_flight",
        "_liveness",
        "_record_stats",
        "_recv",
        "_sockets",
        "_sources_known",
        "_stopped",
        "_streams",
        "_utility_reply",
        "step_observer",
        "weight_version",
    )

    def __init__(
        self,
        sockets: EngineSockets,
        requests: RequestSender,
        stats: StatsBoard,
        utility: UtilityCalls,
        balancer: EngineBalancer,
        liveness: Liveness,
    ) -> None:
        self._sockets = sockets
        output = sockets.output
        # The output socket's "next message or None", chosen once (ours or libzmq's).
        self._recv = (
            output.recv_ready if isinstance(output, ZmtpPull) else partial(recv_ready, output)
        )
        self._streams = requests.streams
        self._in_flight = requests.in_flight
        self._finished_elsewhere = requests.finished_elsewhere
        self._record_stats = stats.record
        self._utility_reply = utility.reply
        self._balancer = balancer
        self._coordinated = sockets.coordinator is not None
        self._liveness = liveness
        self._sources_known = sockets.output_sources_known()
        self._stopped: asyncio.Future[None] | None = None
        self.step_observer: StepObserver | None = None
        """See :data:`StepObserver`; None for none."""
        self.weight_version: str | None = None
        """The weight version the latest outputs message named (None: none named yet)."""

    async def run(self) -> None:
        """Deliver outputs until cancelled or the engines die."""
        # This task only holds the watch for as long as the client lives.
        self._stopped = stopped = asyncio.get_running_loop().create_future()
        output = self._sockets.output
        if isinstance(output, ZmtpPull):
            unwatch = output.watch(self._read)
        else:
            unwatch = watch_readable(output, self._read)
        try:
            await stopped
        finally:
            unwatch()

    def _read(self) -> None:
        # Everything queued on the output socket, in order.
        sockets = self._sockets
        recv = self._recv
        decode = codec.decode_outputs
        in_flight = self._in_flight
        streams = self._streams
        liveness = self._liveness
        try:
            while liveness.dead is None:
                frames = recv()
                if frames is None:
                    return
                try:
                    msg = decode(frames)
                except EngineDeadSignal:
                    liveness.die(EngineDeadError("engine core died (it sent ENGINE_CORE_DEAD)"))
                    break
                except ProtocolError as exc:
                    # Which requests it carried is unknown; failing beats hanging them.
                    liveness.die(EngineDeadError(f"undecodable message from an engine: {exc}"))
                    break
                if not self._sources_known:
                    sockets.note_output_source(frames[0], msg.engine_index)
                    self._sources_known = sockets.output_sources_known()
                if self.step_observer is not None:
                    self.step_observer(msg, streams)
                if msg.weight_version is not None:
                    self.weight_version = msg.weight_version
                for out in msg.outputs:
                    stream = streams.get(out.request_id)
                    if stream is None:
                        continue  # already finished or aborted here
                    if out.finish_reason is None:
                        # RequestState.put, its common case inline (a running output offered to
                        # its consumer's direct handler: a call less per output)
                        direct = stream.direct
                        if direct is None or stream.items or stream.done:
                            stream.put(out)
                        else:
                            try:
                                if not direct(out):
                                    stream.queue(out)
                            except Exception as e:  # the request fails, not the loop
                                stream.direct_failed(e)
                    else:
                        del streams[out.request_id]
                        in_flight[stream.engine_index] -= 1
                        stream.served_by = msg.engine_index
                        stream.finish(out)
                if msg.finished_requests:
                    self._finished_elsewhere(msg.finished_requests)
                if msg.scheduler_stats is not None:
                    self._record_stats(msg.engine_index, msg.scheduler_stats, msg.timestamp)
                if msg.utility_output is not None:
                    self._utility_reply(msg.engine_index, msg.utility_output)
                if msg.wave_complete is not None and not self._coordinated:
                    self._balancer.wave_complete(msg.wave_complete)
                # Drop the message now: each output's last reference is then its stream's queue,
                # so it is freed right after its consumer has used it (while in cache), not when
                # the next message replaces this one (~5% of a 5 ms-step profile went there).
                del msg
        except Exception as exc:  # a bug here must not leave every stream hanging
            logger.exception("engine output loop failed")
            liveness.die(EngineDeadError(f"engine output loop failed: {exc!r}"))
        stopped = self._stopped
        if stopped is not None and not stopped.done():
            stopped.set_result(None)

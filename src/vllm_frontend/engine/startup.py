"""The two ways an engine client gets its connected sockets (engine protocol §3), and the options
both ways share.

Mode A (:func:`handshake_sockets`): this process owns the handshake socket and brings the engines
up itself. Mode B (:func:`adopted_sockets`): ``vllm serve`` ran the handshake and handed over
listening sockets, which are adopted. Either way the result is the same
:class:`~vllm_frontend.engine.transport.EngineSockets`, every engine registered.
"""

from __future__ import annotations

from typing import TypedDict

from vllm_frontend.engine.liveness import ProcessWatcher
from vllm_frontend.engine.protocol import EngineZmqAddresses
from vllm_frontend.engine.transport import (
    BoundHandshake,
    EngineSockets,
    SocketOptions,
    adopt_listeners,
    bind_handshake,
)
from vllm_frontend.engine.validate import RequestLimits

__all__ = ["ClientOptions", "adopted_sockets", "handshake_sockets", "registered_limits"]

DEFAULT_READY_TIMEOUT_S = 600.0


class ClientOptions(TypedDict, total=False):
    """The keyword options every way of starting an engine client takes (all optional)."""

    ready_timeout_s: float
    """How long to wait for every engine to register (default 600 s)."""
    socket_options: SocketOptions | None
    """Socket tuning (default :class:`SocketOptions`'s)."""
    process_watcher: ProcessWatcher | None
    """Reports managed engine processes exiting, during startup and after."""
    vocab_size: int | None
    """Token ids are validated against it, if given."""
    max_logprobs: int | None
    """Requests asking for more logprobs are refused, if given."""
    query_supported_tasks: bool
    """Ask the engines for their supported tasks before returning (default True)."""
    client_index: int
    """This frontend's position among ``client_count`` sharing the engines (default 0, §8.1)."""
    client_count: int
    """How many frontends share the engines (``--api-server-count``; default 1)."""
    sampling_prechecked: bool
    """Every request's sampling parameters were checked on their way (the text layer lowers
    them with ``validate_sampling_params``): the request check skips them (default False)."""


async def handshake_sockets(
    address: str | BoundHandshake,
    engines: range,
    *,
    local: bool,
    advertise_host: str | None,
    coordinator: EngineZmqAddresses | None,
    parallel_config: dict[str, object] | None,
    options: ClientOptions,
) -> EngineSockets:
    """Mode A: own the handshake at ``address`` (``tcp://HOST:PORT``) until ``engines`` have
    registered.

    ``address`` may instead be a :func:`~vllm_frontend.engine.transport.bind_handshake` result,
    bound earlier so that the engines join while the caller loads its model; it fixes the
    engines, their locality, the coordinator, the parallel config and the socket options, so
    those arguments stay at their defaults. It is owned (and on failure closed) from here on.
    """
    socket_options = options.get("socket_options")
    if isinstance(address, BoundHandshake):
        bound = address
        binding = (engines, local, advertise_host, coordinator)
        if binding != (range(1), True, None, None) or parallel_config or socket_options:
            bound.close()
            raise ValueError("a bound handshake already fixes the engines and sockets")
    else:
        bound = bind_handshake(
            address,
            engines,
            local=local,
            advertise_host=advertise_host,
            parallel_config=parallel_config,
            coordinator=coordinator,
            options=socket_options,
        )
    return await bound.run(
        timeout_s=options.get("ready_timeout_s", DEFAULT_READY_TIMEOUT_S),
        abort=options.get("process_watcher"),
    )


async def adopted_sockets(
    input_listener_fd: int,
    output_listener_fd: int,
    engines: range,
    *,
    coordinator_address: str | None,
    options: ClientOptions,
) -> EngineSockets:
    """Mode B: adopt the listeners ``vllm serve`` passed and wait until ``engines`` have
    registered."""
    return await adopt_listeners(
        input_listener_fd,
        output_listener_fd,
        engines,
        coordinator_address=coordinator_address,
        timeout_s=options.get("ready_timeout_s", DEFAULT_READY_TIMEOUT_S),
        options=options.get("socket_options"),
        abort=options.get("process_watcher"),
    )


def registered_limits(sockets: EngineSockets, options: ClientOptions) -> RequestLimits:
    """What requests to these engines are validated against, from their registrations (a check
    is skipped where no engine reported the value) and ``options``."""
    regs = [r for r in sockets.registrations.values() if r is not None]
    lens = [r.max_model_len for r in regs if r.max_model_len is not None]
    return RequestLimits(
        client_index=options.get("client_index", 0),
        engine_count=len(sockets.engine_indices),
        max_model_len=min(lens) if lens else None,
        vocab_size=options.get("vocab_size"),
        max_logprobs=options.get("max_logprobs"),
        supports_lora=(all(bool(r.supports_lora) for r in regs) if regs else None),
        max_loras=next((r.max_loras for r in regs if r.max_loras is not None), None),
        check_sampling=not options.get("sampling_prechecked", False),
    )

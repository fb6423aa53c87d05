"""Sans-IO encoders and decoders for every EngineCore message (engine-protocol.md §2–§8).

Frames are plain buffers; nothing here touches a socket. Frame lists follow §2.2 as seen by the
*peer's* socket after ZMQ strips/adds routing identities:

* frontend → engine request: ``[type byte, payload, aux1, aux2, …]`` (a ROUTER sender puts the
  engine identity in front; a DEALER receiver gets exactly this list);
* engine → frontend output: ``[payload, aux1, …]`` or ``[b"ENGINE_CORE_DEAD"]``;
* registration, handshake and coordinator messages: one payload frame.

Encoding returns the payload as ``bytes`` owned by the caller and every out-of-band buffer as a
``memoryview`` of the caller's array memory (send with ``copy=False``; do not mutate the array
until sent, or send with ``track=True``). Decoding never copies aux frames: arrays are
``numpy.frombuffer`` views over them (keep the frames alive as long as the arrays). Inline array
bytes (< 256 bytes by vLLM's policy) are copied by msgspec into a small ``bytes`` object; that is
cheaper than a Python hook per array and keeps the output hot path native.

Every decoder raises :class:`ProtocolError` and nothing else for truncated, garbled or mis-shaped
input. Array contents (dtype, length against shape) are validated lazily by ``NdArray.numpy()`` /
``Tensor.numpy()``, which raise ``ProtocolError`` too.

Encoders and decoders are reusable and may be shared between threads; the module-level functions
use one shared instance each.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

import msgspec

from vllm_frontend.engine.errors import EngineDeadSignal, ProtocolError
from vllm_frontend.engine.protocol import (
    ENGINE_CORE_DEAD,
    CoordinatorFirstRequest,
    CoordinatorPublish,
    EngineCoreOutputs,
    EngineCoreReadyResponse,
    EngineCoreRequest,
    EngineHandshakeMetadata,
    HandshakeStatus,
    MultiModalFeatureSpec,
    MultiModalFieldElem,
    RequestType,
    StartDpWave,
    UtilityRequest,
)
from vllm_frontend.engine.tensors import RAW_VIEW_EXT_CODE, NdArray, Tensor, raw_bytes
from vllm_frontend.lazy import LazyModule, loaded

if TYPE_CHECKING:
    import numpy as np
else:
    np = LazyModule("numpy", globals(), "np")  # imported by the first use (vllm_frontend.lazy)

__all__ = [
    "ZERO_COPY_THRESHOLD",
    "Buffer",
    "MessageEncoder",
    "OutputDecoder",
    "RequestDecoder",
    "RequestPayload",
    "decode_coordinator_first_request",
    "decode_coordinator_publish",
    "decode_handshake_init",
    "decode_handshake_status",
    "decode_mm_item",
    "decode_outputs",
    "decode_registration",
    "decode_request",
    "encode_abort",
    "encode_coordinator_first_request",
    "encode_coordinator_publish",
    "encode_handshake_init",
    "encode_handshake_status",
    "encode_outputs",
    "encode_registration",
    "encode_request",
    "encode_start_dp_wave",
    "encode_utility",
    "is_engine_dead",
]

ZERO_COPY_THRESHOLD = 256
"""Arrays of at least this many bytes travel out-of-band (vLLM's default, §6.4)."""

Buffer: TypeAlias = bytes | bytearray | memoryview
"""An outgoing frame. Incoming frames may be any buffer-protocol object (``zmq.Frame`` too)."""

RequestPayload: TypeAlias = EngineCoreRequest | list[str] | UtilityRequest | StartDpWave
"""What :func:`decode_request` returns for ADD, ABORT, UTILITY and START_DP_WAVE."""

_T = TypeVar("_T")
_ADD = RequestType.ADD.value  # a plain constant: an enum member's .value is a Python property
_Ext = msgspec.msgpack.Ext


# --------------------------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------------------------


class MessageEncoder:
    """Encodes any protocol struct into ``(payload, aux buffers)`` with vLLM's tensor policy.

    Array/tensor ``data`` given as a numpy array goes inline (ext type 3) when smaller than
    ``zero_copy_threshold`` bytes and out-of-band otherwise; aux buffers are numbered from 1 in
    the order msgspec meets them (depth-first, declaration order), exactly like vLLM's encoder.
    Safe to share between threads.
    """

    def __init__(self, zero_copy_threshold: int = ZERO_COPY_THRESHOLD) -> None:
        self._threshold = zero_copy_threshold
        # The aux list of the encode call in progress, per thread: enc_hook runs Python code,
        # so another thread sharing this encoder (the mock engine's DP ranks) may interleave.
        self._calls = threading.local()
        self._encoder = msgspec.msgpack.Encoder(enc_hook=self._enc_hook)
        # Without a hook: what it encodes, it encodes to the same bytes, and it refuses
        # exactly the values the hook would be asked about (arrays).
        self._plain = msgspec.msgpack.Encoder()

    def _enc_hook(self, obj: object) -> object:
        numpy = loaded("numpy")  # an array means numpy is imported
        if numpy is not None and isinstance(obj, numpy.ndarray):
            raw = raw_bytes(obj)
            # vLLM: 0-d numpy arrays always inline; otherwise inline iff below the threshold.
            if obj.ndim == 0 or raw.nbytes < self._threshold:
                return _Ext(RAW_VIEW_EXT_CODE, raw)
            aux: list[memoryview] = self._calls.aux
            aux.append(raw)
            return len(aux)
        if isinstance(obj, (set, frozenset)):
            return list(obj)
        raise TypeError(f"cannot encode {type(obj).__name__} in an EngineCore message")

    def encode(self, message: object) -> tuple[bytes, list[memoryview]]:
        """Encode one message; returns the msgpack payload and its aux buffers (index 1, 2, …)."""
        try:  # the usual message has no array: no aux list to set up for the hook
            return self._plain.encode(message), []
        except TypeError:
            pass
        calls = self._calls
        aux: list[memoryview] = []
        calls.aux = aux
        try:
            return self._encoder.encode(message), aux
        finally:
            calls.aux = None

    def encode_request(self, request: EngineCoreRequest) -> list[Buffer]:
        """ADD frames: ``[b"\\x00", payload, aux…]`` (prepend the identity for a ROUTER)."""
        payload, aux = self.encode(request)
        return [_ADD, payload, *aux]

    def encode_abort(self, request_ids: Sequence[str]) -> list[Buffer]:
        """ABORT frames: ``[b"\\x01", msgpack array of request ids]``."""
        return [RequestType.ABORT.value, self._encoder.encode(list(request_ids))]

    def encode_utility(
        self, client_index: int, call_id: int, method: str, args: Sequence[Any] = ()
    ) -> list[Buffer]:
        """UTILITY frames: ``[b"\\x03", [client_index, call_id, method, args]]`` (§4.9)."""
        payload, aux = self.encode(UtilityRequest(client_index, call_id, method, list(args)))
        if aux:  # the engine resolves aux frames only for ADD; keep utility args inline
            raise ValueError("utility arguments must not contain large arrays")
        return [RequestType.UTILITY.value, payload]

    def encode_start_dp_wave(
        self, wave: int, exclude_engine_index: int | bytes | None = None
    ) -> list[Buffer]:
        """START_DP_WAVE frames: ``[b"\\x02", [wave, exclude_engine_index]]`` (§8.5)."""
        return [
            RequestType.START_DP_WAVE.value,
            self._encoder.encode(StartDpWave(wave, exclude_engine_index)),
        ]

    def encode_outputs(self, outputs: EngineCoreOutputs) -> list[Buffer]:
        """Engine side: output frames ``[payload, aux…]`` for a PUSH socket."""
        payload, aux = self.encode(outputs)
        return [payload, *aux]


# --------------------------------------------------------------------------------------------
# Decoding helpers
# --------------------------------------------------------------------------------------------


def _fail(what: str, exc: BaseException) -> ProtocolError:
    return ProtocolError(f"malformed {what}: {exc}")


def _decode(decoder: msgspec.msgpack.Decoder[_T], frame: object, what: str) -> _T:
    try:
        return decoder.decode(frame)  # type: ignore[arg-type]
    except ProtocolError:
        raise
    except Exception as exc:  # msgspec errors, hook errors, buffer errors: all "bad bytes"
        raise _fail(what, exc) from None


class _AuxFrames:
    """Resolves out-of-band indices of one message to views of its frames."""

    __slots__ = ("_frames",)

    def __init__(self, frames: Sequence[object]) -> None:
        self._frames = frames

    def resolve(self, triple: NdArray | Tensor | None) -> None:
        if triple is None:
            return
        data = triple.data
        if isinstance(data, int) and not isinstance(data, bool):
            triple.data = self.frame(data)

    def frame(self, index: int) -> np.ndarray:
        # Index 0 would be the payload itself; vLLM never references it.
        if not 0 < index < len(self._frames):
            raise ProtocolError(
                f"array refers to aux frame {index}, but the message has "
                f"{len(self._frames) - 1} aux frame(s)"
            )
        try:
            return np.frombuffer(self._frames[index], dtype=np.uint8)  # type: ignore[call-overload]
        except Exception as exc:
            raise _fail(f"aux frame {index}", exc) from None


def _nested_tensors(value: object, aux: _AuxFrames, depth: int = 0) -> object:
    """Multimodal nested tensors: lists whose first element is a str are tensor triples."""
    if depth > 32:
        raise ProtocolError("multimodal tensor nesting too deep")
    if isinstance(value, list):
        if value and isinstance(value[0], str):
            if len(value) != 3 or not isinstance(value[1], list):
                raise ProtocolError(f"malformed tensor triple in multimodal data: {value!r:.80}")
            dtype, shape, data = value
            if not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
                raise ProtocolError(f"malformed tensor shape {shape!r:.80}")
            if isinstance(data, int) and not isinstance(data, bool):
                data = aux.frame(data)
            elif not isinstance(data, _Ext):
                raise ProtocolError("tensor data must be an ext value or an aux index")
            return Tensor(dtype, tuple(shape), data)
        return [_nested_tensors(v, aux, depth + 1) for v in value]
    if isinstance(value, (int, float, Tensor)) and not isinstance(value, bool):
        return value
    raise ProtocolError(f"unexpected {type(value).__name__} in multimodal tensor data")


def _resolve_mm_features(features: list[MultiModalFeatureSpec], aux: _AuxFrames) -> None:
    for feature in features:
        aux.resolve(feature.mm_position.is_embed)
        if feature.data is None:
            continue
        for elem in feature.data.values():
            elem.data = _nested_tensors(elem.data, aux)


_MM_ITEM = msgspec.msgpack.Decoder(dict[str, MultiModalFieldElem])


def decode_mm_item(payload: Buffer) -> dict[str, MultiModalFieldElem]:
    """One multimodal item (a ``MultiModalKwargsItem``) as vLLM's msgpack encoder writes it
    alone with every tensor inline (the render routes' ``kwargs_data``); each tensor's bytes
    become a numpy byte array, so that sending the item again follows the inline / out-of-band
    policy. Raises ProtocolError for anything else."""
    item = _decode(_MM_ITEM, payload, "multimodal item")
    no_aux = _AuxFrames(())
    for elem in item.values():
        elem.data = _inline_arrays(_nested_tensors(elem.data, no_aux))
    return item


def _inline_arrays(value: object) -> object:
    if isinstance(value, Tensor):
        if isinstance(value.data, _Ext):
            value.data = np.frombuffer(bytes(value.data.data), dtype=np.uint8)
        return value
    if isinstance(value, list):
        return [_inline_arrays(v) for v in value]
    return value


# --------------------------------------------------------------------------------------------
# Decoding
# --------------------------------------------------------------------------------------------


class OutputDecoder:
    """Frontend side: decodes output-socket messages (the hot path, one call per engine step)."""

    def __init__(self) -> None:
        self._decoder = msgspec.msgpack.Decoder(EngineCoreOutputs)

    def decode(self, frames: Sequence[Any]) -> EngineCoreOutputs:
        """Decode ``[payload, aux…]``.

        Raises :class:`EngineDeadSignal` for the ``ENGINE_CORE_DEAD`` sentinel and
        :class:`ProtocolError` for anything malformed.
        """
        if not frames:
            raise ProtocolError("empty output message")
        payload = frames[0]
        if len(frames) == 1 and is_engine_dead(payload):
            raise EngineDeadSignal()
        outputs = _decode(self._decoder, payload, "engine outputs")
        if len(frames) > 1:
            aux = _AuxFrames(frames)
            resolve = aux.resolve
            for out in outputs.outputs:
                if (lp := out.new_logprobs) is not None:
                    resolve(lp.logprob_token_ids)
                    resolve(lp.logprobs)
                    resolve(lp.sampled_token_ranks)
                if (plp := out.new_prompt_logprobs_tensors) is not None:
                    resolve(plp.logprob_token_ids)
                    resolve(plp.logprobs)
                    resolve(plp.selected_token_ranks)
                    resolve(plp.cu_num_generated_tokens_tensor)
                if (mask := out.new_sampling_mask) is not None:
                    resolve(mask.token_ids)
                    resolve(mask.offsets)
                resolve(out.pooling_output)
                resolve(out.routed_experts)
                resolve(out.prompt_token_id_logprobs)
        return outputs


class RequestDecoder:
    """Engine side (mock engine, tests): decodes request frames as an engine's DEALER gets them."""

    def __init__(self) -> None:
        self._add = msgspec.msgpack.Decoder(EngineCoreRequest)
        self._abort = msgspec.msgpack.Decoder(list[str] | str)
        self._utility = msgspec.msgpack.Decoder(UtilityRequest)
        self._wave = msgspec.msgpack.Decoder(StartDpWave)

    def decode(self, frames: Sequence[Any]) -> tuple[RequestType, RequestPayload]:
        """Decode ``[type, payload, aux…]`` into the request type and its payload object.

        ABORT yields the list of request ids (a single string is accepted, as the engine does).
        EXECUTOR_FAILED/WAKEUP and unknown type bytes raise ProtocolError.
        """
        if len(frames) < 2:
            raise ProtocolError(f"request needs a type frame and a payload, got {len(frames)}")
        try:
            kind = RequestType(bytes(frames[0]))
        except (ValueError, TypeError):
            raise ProtocolError(f"unknown request type {bytes(frames[0])[:8]!r}") from None
        payload = frames[1]
        if kind is RequestType.ADD:
            request = _decode(self._add, payload, "ADD request")
            # Not a hot path: resolve (and so validate) every aux index eagerly.
            aux = _AuxFrames(frames[1:])
            aux.resolve(request.prompt_embeds)
            if request.sampling_params is not None:
                aux.resolve(request.sampling_params.prompt_logprob_token_ids)
            if request.mm_features:
                _resolve_mm_features(request.mm_features, aux)
            return kind, request
        if kind is RequestType.ABORT:
            ids = _decode(self._abort, payload, "ABORT request")
            return kind, [ids] if isinstance(ids, str) else ids
        if kind is RequestType.UTILITY:
            return kind, _decode(self._utility, payload, "UTILITY request")
        if kind is RequestType.START_DP_WAVE:
            return kind, _decode(self._wave, payload, "START_DP_WAVE request")
        raise ProtocolError(f"request type {kind.name} must never be sent to an engine")


def is_engine_dead(frame: object) -> bool:
    """Whether ``frame`` is the ``ENGINE_CORE_DEAD`` sentinel (check before decoding)."""
    if type(frame) is bytes:
        return frame == ENGINE_CORE_DEAD
    try:
        if len(frame) != len(ENGINE_CORE_DEAD):  # type: ignore[arg-type]
            return False  # an outputs message (zmq.Frame has a cheap len(); a memoryview is not)
    except TypeError:
        pass
    try:
        view = memoryview(frame)  # type: ignore[arg-type]
    except TypeError:
        return False
    return view.nbytes == len(ENGINE_CORE_DEAD) and view.tobytes() == ENGINE_CORE_DEAD


def _payload_codec(
    cls: type[_T], what: str
) -> tuple[Callable[[_T], bytes], Callable[[Buffer], _T]]:
    encoder = msgspec.msgpack.Encoder()
    decoder = msgspec.msgpack.Decoder(cls)

    def decode(payload: Buffer) -> _T:
        return _decode(decoder, payload, what)

    return encoder.encode, decode


# --------------------------------------------------------------------------------------------
# Module-level API (shared instances; single event-loop thread)
# --------------------------------------------------------------------------------------------

_message_encoder = MessageEncoder()
_output_decoder = OutputDecoder()
_request_decoder = RequestDecoder()

encode_request = _message_encoder.encode_request
encode_abort = _message_encoder.encode_abort
encode_utility = _message_encoder.encode_utility
encode_start_dp_wave = _message_encoder.encode_start_dp_wave
encode_outputs = _message_encoder.encode_outputs
decode_outputs = _output_decoder.decode
decode_request = _request_decoder.decode

encode_handshake_status, decode_handshake_status = _payload_codec(
    HandshakeStatus, "handshake HELLO/READY"
)
encode_handshake_init, decode_handshake_init = _payload_codec(
    EngineHandshakeMetadata, "handshake INIT"
)
encode_coordinator_publish, decode_coordinator_publish = _payload_codec(
    CoordinatorPublish, "coordinator publish"
)
encode_coordinator_first_request, decode_coordinator_first_request = _payload_codec(
    CoordinatorFirstRequest, "coordinator first-request"
)
_encode_ready, _decode_ready = _payload_codec(EngineCoreReadyResponse, "engine registration")


def encode_registration(response: EngineCoreReadyResponse) -> bytes:
    """Engine side: the registration payload an engine's DEALER sends first (§3.3)."""
    return _encode_ready(response)


def decode_registration(payload: Buffer) -> EngineCoreReadyResponse | None:
    """Decode a registration payload; None for the empty payload older engines send."""
    try:
        empty = memoryview(payload).nbytes == 0
    except TypeError:
        raise ProtocolError("registration payload is not a buffer") from None
    return None if empty else _decode_ready(payload)

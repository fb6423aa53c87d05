"""Server-sent events of the generation routes: compact JSON ``data:`` events, pre-encoded
templates of text-only chunks, and :func:`push_sequences`, which streams the facades' text
updates into a connection push-style (the per-token path)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import msgspec

from vllm_frontend.text.output import SequenceProcessor
from vllm_frontend.text.sequence_stream import Update, UpdateSource

from . import errors
from .transport import StreamSink

__all__ = [
    "DONE",
    "ChoiceTemplates",
    "RequestTemplates",
    "SseTemplate",
    "TextEvent",
    "TextEvents",
    "push_sequences",
    "send_text_event",
    "sse",
]

DONE = b"data: [DONE]\n\n"
"""The last event of every stream."""

_json = msgspec.json.Encoder()
_encode_str = _json.encode
# A string no real chunk field holds (NUL bytes; JSON escapes them).
_MARK = "\x00chunk-text\x00"
_MARK_JSON = _json.encode(_MARK)


def sse(payload: Any) -> bytes:
    """One ``data:`` event with ``payload`` as compact JSON."""
    return b"data: " + _json.encode(payload) + b"\n\n"


class SseTemplate:
    """The ``data:`` event of a chunk whose only changing field is one string, pre-encoded.

    Most events of a stream differ from the previous one only in their new text; encoding the
    rest once and splicing each new text's JSON in gives the bytes :func:`sse` would produce,
    for a fraction of the cost.
    """

    __slots__ = ("head", "tail")

    def __init__(self, head: bytes, tail: bytes) -> None:
        self.head = head
        """The event's bytes before the text's JSON string."""
        self.tail = tail
        """The event's bytes after it."""

    @classmethod
    def of(cls, make: Callable[[str], Any]) -> SseTemplate | None:
        """The template of ``sse(make(text))``; None if ``make``'s other fields defeat it."""
        parts = sse(make(_MARK)).split(_MARK_JSON)
        return cls(parts[0], parts[1]) if len(parts) == 2 else None

    def render(self, text: str) -> bytes:
        """``sse(make(text))``."""
        return self.head + _encode_str(text) + self.tail


# Markers for a request's id and created time (a Unix time is never negative).
_ID_MARK_JSON = _json.encode("\x00chunk-id\x00")
_CREATED_MARK = -48_271_931_170_113
_CREATED_MARK_JSON = b"%d" % _CREATED_MARK


class RequestTemplates:
    """:meth:`SseTemplate.of` for chunks that differ from request to request only in their id
    and created time besides the text: ``make(request_id, created, key, text)`` is encoded once
    per ``key`` (e.g. model and choice index) with markers in those three places, and each
    request's template is spliced from the pieces, without encoding a chunk per request.

    Where the markers do not split the event cleanly (``make``'s other fields hold one), every
    request's template comes from :meth:`SseTemplate.of`, as before.
    """

    __slots__ = ("_make", "_pieces")

    _LIMIT = 256  # keys kept (model names come from requests)

    def __init__(self, make: Callable[[str, int, Any, str], Any]) -> None:
        self._make = make
        self._pieces: dict[Hashable, tuple[bytes, bytes, bytes, bytes] | None] = {}

    def template(self, request_id: str, created: int, key: Hashable) -> SseTemplate | None:
        """``SseTemplate.of(lambda text: make(request_id, created, key, text))``."""
        try:
            pieces = self._pieces[key]
        except KeyError:
            # Past the limit a key is not split at all: a template per request, as before.
            full = len(self._pieces) >= self._LIMIT
            pieces = None if full else self._split(key)
            if not full:
                self._pieces[key] = pieces
        if pieces is None or type(created) is not int:
            make = self._make
            return SseTemplate.of(lambda text: make(request_id, created, key, text))
        before_id, before_created, before_text, tail = pieces
        return SseTemplate(
            before_id + _encode_str(request_id) + before_created + b"%d" % created + before_text,
            tail,
        )

    def _split(self, key: Hashable) -> tuple[bytes, bytes, bytes, bytes] | None:
        # The event with every marker once, in the order id, created, text; else None.
        event = sse(self._make("\x00chunk-id\x00", _CREATED_MARK, key, _MARK))
        if not (
            event.count(_ID_MARK_JSON) == event.count(_CREATED_MARK_JSON) == 1
            and event.count(_MARK_JSON) == 1
        ):
            return None
        before_id, rest = event.split(_ID_MARK_JSON)
        if _CREATED_MARK_JSON not in rest or _MARK_JSON not in rest:
            return None
        before_created, rest = rest.split(_CREATED_MARK_JSON)
        if _MARK_JSON not in rest:
            return None
        before_text, tail = rest.split(_MARK_JSON)
        return before_id, before_created, before_text, tail


class ChoiceTemplates:
    """Each choice's :class:`SseTemplate`, made on first use by ``make(choice index)`` (which
    returns None where the chunk's shape defeats a template)."""

    __slots__ = ("_make", "_templates")

    def __init__(self, make: Callable[[int], SseTemplate | None]) -> None:
        self._make = make
        self._templates: dict[int, SseTemplate | None] = {}

    def get(self, index: int) -> SseTemplate | None:
        """Choice ``index``'s template (None when its chunks' shape defeats one)."""
        templates = self._templates
        try:
            return templates[index]
        except KeyError:
            template = templates[index] = self._make(index)
            return template

    def render(self, index: int, text: str) -> bytes | None:
        """Choice ``index``'s text-only event for ``text``; None when it has no template."""
        template = self.get(index)
        return None if template is None else template.render(text)


TextEvent = tuple[SseTemplate, list[int]]
"""A running choice's text-only event: its template, and the per-choice output token counts
that sending it adds to (the handler's, for usage)."""


def send_text_event(
    event: TextEvent | None, sink: StreamSink, index: int, text: str, num_tokens: int
) -> bool:
    """Send choice ``index``'s event for ``text`` from ``event`` and add ``num_tokens`` to its
    count; False, doing nothing, without an event or without text."""
    if event is None or not text:
        return False
    template, counts = event
    counts[index] += num_tokens
    sink.send(template.render(text))
    return True


TextEvents = Callable[[int], TextEvent | None]
"""``text_event(choice index)``: the choice's :data:`TextEvent` once its running updates that
are new text alone can go out as that event (as ``render`` would send them), else None."""


async def push_sequences(
    sink: StreamSink,
    make_sources: Callable[[], Sequence[UpdateSource]],
    render: Callable[[StreamSink, int, Update], None],
    trailer: Callable[[], bytes | None],
    text_event: TextEvents | None = None,
    counts_unused: bool = False,
) -> None:
    """Stream the sources ``make_sources()`` builds (one per prompt) into ``sink`` as SSE,
    push-style, then ``[DONE]``. The head of the response is out already, so every failure from
    here on, building the sources included, becomes an SSE error event.

    Each engine step's outputs run through ``render(sink, prompt index, update)`` (which sends
    the update's events) from the engine client's notification callback, straight into the
    connection's buffer: no task resumes per chunk. While the client is not reading, nothing is
    taken (outputs queue up in the engine client and go out merged on resume). After the last
    update comes ``trailer()`` (e.g. the usage chunk); an error becomes an SSE error event.
    Every source is closed on the way out (aborting what still runs when the client went away).
    With one source, its plain running updates are rendered as the engine client reads them,
    new text alone straight from ``text_event(0)``'s template once it has one. With
    ``counts_unused`` (``render`` makes nothing of an update's cached-token count: no prompt
    token details), its first output is too, the prefill accounted there (the count, unseen,
    rides on a later update).
    """
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    pump = _Pump(sink, render, text_event, done, counts_unused)
    sources: Sequence[UpdateSource] = ()
    try:
        sources = pump.sources = make_sources()
        pump.single = sources[0] if len(sources) == 1 else None
        for source in sources:
            source.on_ready(pump)
        if pump.single is not None:
            pump.proc = pump.single.on_tokens(pump)
        pump()
        await done
        tail = trailer()
        if tail is not None:
            sink.send(tail)
    except Exception as e:
        sink.send(errors.error_sse_event(e))
    finally:
        for source in sources:
            await source.aclose()
    sink.send(DONE)


class _Pump:
    """push_sequences' notification callback: renders whatever the sources have now into the
    sink, and resolves ``done`` when they have all finished (or with the error that stopped it).

    One object with slots rather than a closure: its state is one cache line or two, not a cell
    per variable, and this runs for every stream at every engine step. For the same reason the
    single source's text event, once the handler has one, is kept here in parts (``head``,
    ``tail``, ``counts``): a plain token's event is then made without visiting the handler.
    """

    __slots__ = (
        "counts",
        "done",
        "head",
        "proc",
        "quiet",
        "render",
        "single",
        "sink",
        "sources",
        "tail",
        "text_event",
    )

    def __init__(
        self,
        sink: StreamSink,
        render: Callable[[StreamSink, int, Update], None],
        text_event: TextEvents | None,
        done: asyncio.Future[None],
        quiet: bool = False,
    ) -> None:
        self.sink = sink
        self.render = render
        self.text_event = text_event
        self.done = done
        self.sources: Sequence[UpdateSource] = ()
        self.single: UpdateSource | None = None
        self.proc: SequenceProcessor | None = None  # the single source's, for tokens()
        self.head = self.tail = b""
        self.counts: list[int] | None = None  # set with head and tail by _arm()
        self.quiet = quiet
        """The cached-token count of an update is not rendered: the engine client may offer
        :meth:`tokens` a first output (``GenerationStream.on_tokens``)."""

    def __call__(self) -> None:
        done = self.done
        if done.done():
            return
        sink = self.sink
        if sink.paused:
            sink.on_resume(self)
            return
        render = self.render
        try:
            single = self.single
            if single is not None:  # the common case, without the loops
                for update in single.take():
                    render(sink, 0, update)
                finished = single.finished
                if self.counts is None and not finished:
                    self._arm()
            else:
                sources = self.sources
                for p, source in enumerate(sources):
                    for update in source.take():
                        render(sink, p, update)
                finished = all(source.finished for source in sources)
            if finished:
                done.set_result(None)
        except Exception as e:
            done.set_exception(e)

    def _arm(self) -> None:
        # Keep the single source's text event at hand once the handler has one (after its first
        # update, typically); it stays valid while the sequence runs.
        text_event = self.text_event
        if text_event is None or self.proc is None:
            return
        event = text_event(0)
        if event is not None:
            template, self.counts = event
            self.head = template.head
            self.tail = template.tail

    def tokens(self, token_ids: list[int]) -> bool:
        """The single source's plain new tokens, straight from the engine client's read loop:
        rendered now when nothing stands in the way (as ``__call__`` would render them; new
        text alone straight from the text event), else False and they go the usual way.
        """
        done = self.done
        proc = self.proc
        if proc is None or done.done() or self.sink.paused:
            return False
        text = proc.take_text(token_ids)
        if text is None:
            return False
        try:
            counts = self.counts
            if counts is not None and text:  # send_text_event, inline: this runs per token
                counts[0] += len(token_ids)
                self.sink.send(self.head + _encode_str(text) + self.tail)
            else:
                self.render(self.sink, 0, (0, proc.plain_output(text, token_ids), None))
                if counts is None:
                    self._arm()
        except Exception as e:
            done.set_exception(e)
        return True

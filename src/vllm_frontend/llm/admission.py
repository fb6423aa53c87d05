"""Admission limits: vLLM's ``--max-num-queued-reqs`` and ``--max-num-queued-tokens``.

vLLM's frontend enforces both itself (``AsyncLLM.check_admission``, vLLM 0.32), before a request
reaches an engine, and refuses with HTTP 503 so that a load balancer or the client retries
elsewhere:

- ``max_num_queued_reqs`` caps the engine requests in flight (waiting or running), counted
  where the frontend tracks them: from when a request is sent until its last output (or its
  abort). A request with ``n`` samples needs ``n`` places. With several API servers the count
  is their sum.
- ``max_num_queued_tokens`` caps the prefill backlog: the prompt tokens of requests that have
  not had their first output yet, counted in full (the engine does not report prefill progress).
  A request is refused once the backlog has reached the limit; its own prompt is not added
  first. This count is per API server, as in vLLM.

The check runs twice, as in vLLM: when a request is validated (before a streamed response has
begun) and again right before its engine requests are sent.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable

__all__ = [
    "BACKLOG_FULL_MESSAGE",
    "QUEUE_FULL_MESSAGE",
    "AdmissionControl",
    "AdmissionRejected",
    "SharedRequestCounts",
]

#: vLLM's ``QueueOverflowError`` message.
QUEUE_FULL_MESSAGE = (
    "The engine is currently busy and cannot accept new requests. "
    "Please try again later or on a different instance."
)
#: vLLM's ``MaxQueuedTokensError`` message.
BACKLOG_FULL_MESSAGE = (
    "The engine has reached its prefill token backlog limit. "
    "Please try again later or on a different instance."
)

_SLOT_BYTES = 64  # one cache line per process: writers never share a line


class AdmissionRejected(Exception):
    """A request refused by an admission limit (HTTP 503)."""

    def __init__(self, reason: str, message: str) -> None:
        """``reason`` is the limit's name (``max_num_queued_reqs`` or ``max_num_queued_tokens``),
        the label of ``vllm:admission_rejections_total``."""
        super().__init__(message)
        self.reason = reason
        self.message = message


class SharedRequestCounts:
    """In-flight request counts of sibling API servers, one 64-byte slot each in a shared file.

    Every process writes only its own slot; a reader sums them (a count read mid-update is off
    by one request at most, as in vLLM's shared counters).
    """

    def __init__(self, path: str | os.PathLike[str], index: int, count: int) -> None:
        """Map ``path`` (created if missing) with ``count`` slots; this process writes slot
        ``index``."""
        if not 0 <= index < count:
            raise ValueError(f"slot {index} is not in 0..{count - 1}")
        size = count * _SLOT_BYTES
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size < size:
                os.ftruncate(fd, size)  # zero-filled; siblings may do the same
            self._map = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self._view = memoryview(self._map).cast("q")
        self._stride = _SLOT_BYTES // 8
        self._own = index * self._stride
        self._slots = range(0, count * self._stride, self._stride)

    def publish(self, value: int) -> None:
        """Set this process's count."""
        self._view[self._own] = value

    def total(self) -> int:
        """The sum over all processes."""
        view = self._view
        return sum(view[i] for i in self._slots)

    def close(self) -> None:
        """Unmap the file (the count stays in it for the others until they overwrite it)."""
        self._view.release()
        self._map.close()


class AdmissionControl:
    """The two limits, and the counts they are checked against."""

    __slots__ = ("max_prefill_tokens", "max_requests", "on_reject", "prefill_tokens", "requests",
                 "shared")  # fmt: skip

    def __init__(
        self,
        max_requests: int | None = None,
        max_prefill_tokens: int | None = None,
        *,
        shared: SharedRequestCounts | None = None,
        on_reject: Callable[[str], None] | None = None,
    ) -> None:
        """Limits (None: none); ``shared`` adds sibling API servers' counts to this process's;
        ``on_reject(reason)`` is called for every refusal (the rejection counter)."""
        self.max_requests = max_requests
        self.max_prefill_tokens = max_prefill_tokens
        self.shared = shared
        self.on_reject = on_reject
        self.requests = 0
        """Engine requests of this process in flight."""
        self.prefill_tokens = 0
        """Prompt tokens of this process's engine requests without a first output yet."""

    @property
    def enabled(self) -> bool:
        """Whether any limit is set."""
        return self.max_requests is not None or self.max_prefill_tokens is not None

    def check(self, n: int = 1) -> None:
        """Raise :class:`AdmissionRejected` if a request of ``n`` samples may not start now."""
        if self.max_requests is not None:
            current = self.shared.total() if self.shared is not None else self.requests
            if current + n > self.max_requests:
                self._reject("max_num_queued_reqs", QUEUE_FULL_MESSAGE)
        if self.max_prefill_tokens is not None and self.prefill_tokens >= self.max_prefill_tokens:
            self._reject("max_num_queued_tokens", BACKLOG_FULL_MESSAGE)

    def _reject(self, reason: str, message: str) -> None:
        if self.on_reject is not None:
            self.on_reject(reason)
        raise AdmissionRejected(reason, message)

    def started(self, prompt_len: int) -> None:
        """An engine request was sent, with a prompt of ``prompt_len`` tokens."""
        self.requests += 1
        self.prefill_tokens += prompt_len
        if self.shared is not None:
            self.shared.publish(self.requests)

    def prefilled(self, prompt_len: int) -> None:
        """An engine request's first output arrived (or it ended without one)."""
        self.prefill_tokens -= prompt_len

    def finished(self) -> None:
        """An engine request had its last output, or was aborted."""
        self.requests -= 1
        if self.shared is not None:
            self.shared.publish(self.requests)

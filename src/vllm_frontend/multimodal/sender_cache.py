"""vLLM 0.32's processor-cache protocol with the engine, sender side: items the engine already
holds go as ``data=None`` (engine-protocol §4.6).

The engine keeps the items it receives in an LRU bounded by ``--mm-processor-cache-gb`` (GiB,
item size = the bytes of its tensors), and accepts ``data=None`` for an item it still holds. The
sender keeps a mirror of that LRU (sizes and order only, not the data), updated exactly as the
engine updates its own for every request, in the order the engine receives them: first every
item of the request is touched (moved to the most recent end), then each item in turn is looked
up — a hit moves it to the end and its data is dropped from the request; a miss is inserted
(evicting from the least recent end) unless it is larger than the whole cache. This is what
vLLM's ``LruKeyReplicatedSenderCache`` and the engine's ``LruKeyReplicatedReceiverCache`` do.

The mirror is applied when a request is actually sent (:meth:`SenderCache.apply`, called by the
llm layer right before the engine client sends it), so requests refused before that never drift
it. Should the two drift anyway, the engine answers with ``mm_cache_miss_hashes``; those are
dropped from the mirror (:meth:`invalidate`) so the next request sends their data again.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["GIB", "SenderCache", "item_nbytes"]

GIB = 1 << 30


def _nbytes(data: Any) -> int:
    if isinstance(data, list | tuple):
        return sum(_nbytes(d) for d in data)
    nbytes = getattr(data, "nbytes", None)
    if isinstance(nbytes, int):
        return nbytes
    # Python scalars (Qwen3-VL's timestamps): vLLM's cache counts sys.getsizeof of each, as
    # the engine's receiver cache does on the floats it decodes.
    return sys.getsizeof(data) if isinstance(data, int | float) else 0


def item_nbytes(fields: dict[str, Any]) -> int:
    """An item's size as the engine's cache counts it: its tensors' bytes."""
    return sum(_nbytes(elem.data) for elem in fields.values())


class SenderCache:
    """The mirror of one engine's multimodal processor cache (sizes and LRU order)."""

    __slots__ = ("_entries", "_size", "capacity")

    def __init__(self, capacity_gb: float) -> None:
        self.capacity = GIB * capacity_gb
        """Bytes the engine's cache holds (``--mm-processor-cache-gb`` GiB)."""
        self._entries: OrderedDict[str, int] = OrderedDict()
        self._size = 0

    def __contains__(self, mm_hash: str) -> bool:
        return mm_hash in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def _put_if_fits(self, mm_hash: str, size: int) -> bool:
        if size > self.capacity:
            return False
        entries = self._entries
        while self._size + size > self.capacity and entries:
            _, evicted = entries.popitem(last=False)
            self._size -= evicted
        entries[mm_hash] = size
        self._size += size
        return True

    def apply(self, features: Iterable[Any], fill: Callable[[Any], Any] | None = None) -> None:
        """Update the mirror for one request's ``MultiModalFeatureSpec`` list as the engine
        will, and drop the data of the items the engine will find in its cache.

        An item without data that the engine will not find (evicted before, or by an earlier
        item of this very request) gets its data from ``fill`` (the feature -> its fields)."""
        features = list(features)
        entries = self._entries
        for feature in features:
            if feature.mm_hash in entries:
                entries.move_to_end(feature.mm_hash)
        for feature in features:
            mm_hash = feature.mm_hash
            if mm_hash in entries:
                entries.move_to_end(mm_hash)
                feature.data = None
                continue
            if feature.data is None and fill is not None:
                feature.data = fill(feature)
            if feature.data is not None:
                self._put_if_fits(mm_hash, item_nbytes(feature.data))

    def record(self, features: Iterable[Any]) -> None:
        """Update the mirror for a request whose items all carry their data (vLLM's processor
        sends a request with embeddings so): the engine touches every item, then stores each
        one again in place of what it held under its hash."""
        features = list(features)
        entries = self._entries
        for feature in features:
            if feature.mm_hash in entries:
                entries.move_to_end(feature.mm_hash)
        for feature in features:
            size = entries.pop(feature.mm_hash, None)
            if size is not None:
                self._size -= size
            if feature.data is not None:
                self._put_if_fits(feature.mm_hash, item_nbytes(feature.data))

    def invalidate(self, mm_hashes: Iterable[str]) -> None:
        """Forget items the engine reported missing (their data goes with the next request)."""
        for mm_hash in mm_hashes:
            size = self._entries.pop(mm_hash, None)
            if size is not None:
                self._size -= size

    def clear(self) -> None:
        """Forget everything (the engine's cache was reset)."""
        self._entries.clear()
        self._size = 0

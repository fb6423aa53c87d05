"""Records where a let-go ``tokenizers`` object is loaded again (text.Tokenizer's reload)."""

from __future__ import annotations

import threading
from typing import Any


def record_reloads(tokenizer: Any) -> list[int]:
    """The ids of the threads that load ``tokenizer``'s ``tokenizers`` object again, from now
    on (appended as each load happens)."""
    threads: list[int] = []
    reload = tokenizer._reload_backend

    def recording_reload() -> Any:
        threads.append(threading.get_ident())
        return reload()

    tokenizer._reload_backend = recording_reload
    return threads

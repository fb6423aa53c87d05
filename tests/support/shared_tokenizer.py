"""One frontend :class:`Tokenizer` per model directory for a whole test process.

A server loads its tokenizer once and serves every request with it; the in-process app tests
(tests/support/generation_app.py and the server modules building their own apps) loaded a fresh
one for each app instead: ~1.1 CPU-s each for the tiny Llama 3's 128k pieces (the file's load,
fastokens' check and the ``tokenizers`` object's release on a thread, the vocabulary's bounds,
and the reload that the first decode then needs), dozens of times per module. Tests about the
tokenizer's own loading, release or fastokens build theirs with ``Tokenizer.from_dir``.

The environment variables that change what ``Tokenizer.from_dir`` builds are part of the key, so
a test that sets one gets a tokenizer built under it.
"""

from __future__ import annotations

import os
import pathlib
import threading

from vllm_frontend.text.tokenizer import Tokenizer

__all__ = ["shared_tokenizer"]

_ENV = (
    "VLLM_USE_FASTOKENS",
    "VLLM_FRONTEND_KEEP_TOKENIZERS",
    "VLLM_FRONTEND_TOKENIZER_CACHE",
    "VLLM_FRONTEND_CACHE_ROOT",
    "FASTOKENS_BPE_THREADS",
)
_LOADED: dict[tuple[str, bool | None, tuple[str | None, ...]], Tokenizer] = {}
_LOCK = threading.Lock()


def shared_tokenizer(
    model_dir: str | pathlib.Path, *, use_fastokens: bool | None = None
) -> Tokenizer:
    """``Tokenizer.from_dir(model_dir, use_fastokens=use_fastokens)``, loaded once per process
    (and environment)."""
    path = str(pathlib.Path(model_dir).resolve())
    key = (path, use_fastokens, tuple(os.environ.get(n) for n in _ENV))
    with _LOCK:
        tokenizer = _LOADED.get(key)
        if tokenizer is None:
            tokenizer = Tokenizer.from_dir(model_dir, use_fastokens=use_fastokens)
            _LOADED[key] = tokenizer
        return tokenizer

"""One frontend :class:`Tokenizer` per model directory for a whole test process.

A server loads its tokenizer once and serves every request with it; the in-process app tests
(tests/support/generation_app.py and the server modules building their own apps) loaded a fresh
one for each app instead: ~1.1 CPU-s each for the tiny Llama 3's 128k pieces (the file's load,
fastokens' check and the ``tokenizers`` object's release on a thread, the vocabulary's bounds,
and the reload that the first decode then needs), dozens of times per module. Tests about the
tokenizer's own loading, release or fastokens build theirs with ``Tokenizer.from_dir``.

The environment variables that change what ``Tokenizer.from_dir`` builds are part of the key, so
a test that sets one gets a tokenizer built under it. One holds ~350 MB (the ``tokenizers`` and
fastokens objects and the detokenizer's tables): the tiny Llama 3's are kept for the process (most
modules use it); of the others (the multimodal models', tokenizers saved in a temporary directory)
only the :data:`OTHERS_KEPT` used last are kept, and none past a module's end
(:func:`release_shared_tokenizers`, tests/conftest.py).
"""

from __future__ import annotations

import functools
import os
import pathlib
import threading
from collections import OrderedDict

from tests.support.tiny_model import tiny_model_dir
from vllm_frontend.text.tokenizer import Tokenizer

__all__ = ["release_shared_tokenizers", "shared_tokenizer"]

_ENV = (
    "VLLM_USE_FASTOKENS",
    "VLLM_FRONTEND_KEEP_TOKENIZERS",
    "VLLM_FRONTEND_TOKENIZER_CACHE",
    "VLLM_FRONTEND_CACHE_ROOT",
)
OTHERS_KEPT = 3
"""How many tokenizers of models other than the tiny Llama 3 are kept at most."""

_Key = tuple[str, bool | None, tuple[str | None, ...]]
_LOADED: OrderedDict[_Key, Tokenizer] = OrderedDict()
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
            others = [k for k in _LOADED if k[0] != _kept_path()]
            for old in others[:-OTHERS_KEPT]:
                del _LOADED[old]
        _LOADED.move_to_end(key)
        return tokenizer


@functools.cache
def _kept_path() -> str:
    return str(tiny_model_dir().resolve())


def release_shared_tokenizers() -> int:
    """Let go of the shared tokenizers of every model but the tiny Llama 3; how many."""
    if not _LOADED:
        return 0
    kept = _kept_path()
    with _LOCK:
        gone = [key for key in _LOADED if key[0] != kept]
        for key in gone:
            del _LOADED[key]
    return len(gone)

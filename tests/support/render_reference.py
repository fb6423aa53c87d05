"""vLLM's render app and processors as a test reference builds them, less start-up costs that
change no output.

A reference that builds one render app per tiny model (tests/multimodal/test_llava_family.py,
test_tensor_embeds.py) spends most of each build on them:

- the tokenizer pool: vLLM's renderer makes its tokenizer thread-safe with a pool of deep copies,
  and later copies of the pooled tokenizer copy the pool again (most of a minute per app with the
  128k-token vocabulary); the references send one request at a time;
- the multimodal warm-up (vllm/renderers/base.py ``warmup_mm``): it processes dummy media of the
  model's largest size and then clears the processor cache it filled, to time the first request
  better; three quarters of an app's build on two cores (93 s to 24 s for Qwen2.5-VL);
- deep copies of the Rust tokenizer (:func:`share_rust_tokenizers`), in every reference process
  that builds vLLM's processors for the tiny multimodal models;
- loads of the same ``tokenizer.json`` (:func:`share_rust_tokenizers` too): vLLM's tokenizer,
  its processor, the processor it loads again for the chat template, each parses the tiny
  model's 128k-token file anew.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any


def lean_render_apps() -> None:
    """Patch vLLM (in the reference's own process) so that its render apps build without the
    tokenizer pool and the multimodal warm-up."""
    import vllm.renderers.base
    import vllm.renderers.hf

    vllm.renderers.hf.maybe_make_thread_pool = lambda tokenizer, copies=1: tokenizer  # type: ignore[assignment]
    vllm.renderers.base.BaseRenderer.warmup_mm = lambda self: None  # type: ignore[method-assign]


def share_rust_tokenizers() -> None:
    """Make ``copy.deepcopy`` of a ``tokenizers.Tokenizer`` (the Rust tokenizer inside every
    transformers fast tokenizer) return the object itself, in the reference's own process.

    Loading a processor or tokenizer, transformers deep-copies its keyword arguments twice (they
    carry vLLM's tokenizer object, and the copies are only read for an audio tokenizer or a
    second config file) and each freshly loaded Rust tokenizer once (dropping the original).
    With the tiny models' 128k-token vocabulary a copy costs about a third of a second, and these
    copies were more than half of a reference's CPU time (test_llava_family's: 47 to 20 CPU-s).
    A shared Rust tokenizer answers as a copy would: the references use one at a time, all the
    wrappers sharing one were loaded from the same files (the same added tokens), and every
    encoding call sets the truncation and padding it needs before it runs.

    Loads of a ``tokenizer.json`` (``tokenizers.Tokenizer.from_file``) parse each file once (by
    path, size and modification time) and hand out a :func:`tests.support.hf_tokenizer.rust_copy`
    of it: a tokenizer that serializes and encodes as a fresh load does, whose changes (added
    tokens, truncation, padding...) stay its own; only the model (vocabulary and merges) is
    shared. Half of test_tensor_embeds' reference was these loads (four to five per render app).
    """
    import copy

    import tokenizers

    copy._deepcopy_dispatch[tokenizers.Tokenizer] = lambda tokenizer, memo: tokenizer  # type: ignore[attr-defined]
    if not isinstance(vars(tokenizers.Tokenizer).get("from_file"), _LoadOnce):
        tokenizers.Tokenizer.from_file = _LoadOnce(tokenizers.Tokenizer.from_file)  # type: ignore[method-assign]


@contextlib.contextmanager
def rust_tokenizers_shared() -> Iterator[None]:
    """:func:`share_rust_tokenizers` for a ``with`` block, for a reference computed in the test
    process itself (deep copies are real again afterwards)."""
    import copy

    import tokenizers

    dispatch = copy._deepcopy_dispatch  # type: ignore[attr-defined]
    before = dispatch.get(tokenizers.Tokenizer)
    from_file = vars(tokenizers.Tokenizer)["from_file"]
    share_rust_tokenizers()
    try:
        yield
    finally:
        tokenizers.Tokenizer.from_file = from_file  # type: ignore[method-assign]
        if before is None:
            del dispatch[tokenizers.Tokenizer]
        else:
            dispatch[tokenizers.Tokenizer] = before


class _LoadOnce:
    """``tokenizers.Tokenizer.from_file`` parsing each file once: later loads of an unchanged
    file get a :func:`~tests.support.hf_tokenizer.rust_copy` of the first (never handed out)."""

    def __init__(self, load: Callable[..., Any]) -> None:
        self._load = load
        self._loaded: dict[tuple[str, int, int], Any] = {}

    def __get__(self, instance: object, owner: type | None = None) -> _LoadOnce:
        return self  # reached as a static method of the class

    def __call__(self, path: str, *args: Any, **kwargs: Any) -> Any:
        from tests.support.hf_tokenizer import rust_copy

        if args or kwargs:
            return self._load(path, *args, **kwargs)
        stat = os.stat(path)
        key = (os.path.realpath(path), stat.st_size, stat.st_mtime_ns)
        if key not in self._loaded:
            self._loaded[key] = self._load(path)
        return rust_copy(self._loaded[key])

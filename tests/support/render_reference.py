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
  that builds vLLM's processors for the tiny multimodal models.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


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
    """
    import copy

    import tokenizers

    copy._deepcopy_dispatch[tokenizers.Tokenizer] = lambda tokenizer, memo: tokenizer  # type: ignore[attr-defined]


@contextlib.contextmanager
def rust_tokenizers_shared() -> Iterator[None]:
    """:func:`share_rust_tokenizers` for a ``with`` block, for a reference computed in the test
    process itself (deep copies are real again afterwards)."""
    import copy

    import tokenizers

    dispatch = copy._deepcopy_dispatch  # type: ignore[attr-defined]
    before = dispatch.get(tokenizers.Tokenizer)
    share_rust_tokenizers()
    try:
        yield
    finally:
        if before is None:
            del dispatch[tokenizers.Tokenizer]
        else:
            dispatch[tokenizers.Tokenizer] = before

"""vLLM's render app as a test reference builds it, less two start-up costs that change no output.

A reference that builds one render app per tiny model (tests/multimodal/test_llava_family.py,
test_tensor_embeds.py) spends most of each build on them:

- the tokenizer pool: vLLM's renderer makes its tokenizer thread-safe with a pool of deep copies,
  and later copies of the pooled tokenizer copy the pool again (most of a minute per app with the
  128k-token vocabulary); the references send one request at a time;
- the multimodal warm-up (vllm/renderers/base.py ``warmup_mm``): it processes dummy media of the
  model's largest size and then clears the processor cache it filled, to time the first request
  better; three quarters of an app's build on two cores (93 s to 24 s for Qwen2.5-VL).
"""

from __future__ import annotations


def lean_render_apps() -> None:
    """Patch vLLM (in the reference's own process) so that its render apps build without the
    tokenizer pool and the multimodal warm-up."""
    import vllm.renderers.base
    import vllm.renderers.hf

    vllm.renderers.hf.maybe_make_thread_pool = lambda tokenizer, copies=1: tokenizer  # type: ignore[assignment]
    vllm.renderers.base.BaseRenderer.warmup_mm = lambda self: None  # type: ignore[method-assign]

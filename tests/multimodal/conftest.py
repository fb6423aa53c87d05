"""The multimodal tests' frontends start no tokenizer-cache builders.

Each tiny multimodal model has its own ``tokenizer.json`` (tiny Llama 3's 128k pieces plus the
model's special tokens), and the first in-process load of each (``load_model_resources``) starts
a builder of its faster-loading copy (:mod:`vllm_frontend.text.tokenizer_cache`): ~13 builders
in the multimodal session, ~2.5 CPU-s each, in sessions of their own, so they take a full share
of the two cores beside the test workers. The copies saved these tests nothing: a model's
tokenizer is loaded a few times per session, each copy load ~0.3 s faster. The cache itself is
tested by tests/text/test_tokenizer_cache.py and tests/cmd/test_serve_startup.py (which set the
environment they need).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="package", autouse=True)
def no_tokenizer_cache_builders() -> Iterator[None]:
    """``VLLM_FRONTEND_TOKENIZER_CACHE=0`` while this package's tests run."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VLLM_FRONTEND_TOKENIZER_CACHE", "0")
        yield

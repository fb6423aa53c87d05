"""transformers tokenizers of the tests' tiny models, each loaded once per process and copied for
each use (tests add their markers to a copy)."""

from __future__ import annotations

import copy
import functools
import pathlib
from typing import Any

from tests.support.tiny_model import tiny_model_dir


@functools.cache
def _loaded(directory: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(directory)


def rust_copy(tokenizer: Any) -> Any:
    """A copy of ``tokenizer`` (a ``tokenizers.Tokenizer``) that serializes to the same JSON and
    can be changed (added tokens, normalizer, pre-tokenizer, post-processor, decoder, truncation,
    padding) without changing the original; only the model (the vocabulary and merges, which no
    setter of the library changes in place) is shared. ``copy.deepcopy`` goes through the whole
    JSON instead: ~0.6 CPU-s for the tiny Llama 3's 128k pieces, most of a chat oracle module's
    time where it copied one per family."""
    import tokenizers

    out = tokenizers.Tokenizer(tokenizer.model)
    for part in ("normalizer", "pre_tokenizer", "post_processor", "decoder"):
        value = getattr(tokenizer, part)
        if value is not None:
            setattr(out, part, copy.deepcopy(value))
    for _, token in sorted(tokenizer.get_added_tokens_decoder().items()):
        if token.special:
            out.add_special_tokens([token])
        else:
            out.add_tokens([token])
    out.encode_special_tokens = tokenizer.encode_special_tokens
    if tokenizer.truncation is not None:
        out.enable_truncation(**tokenizer.truncation)
    if tokenizer.padding is not None:
        out.enable_padding(**tokenizer.padding)
    return out


def copy_rust_tokenizers_cheaply() -> None:
    """Make ``copy.deepcopy`` of a ``tokenizers.Tokenizer`` a :func:`rust_copy` in this (test)
    process. transformers deep-copies the Rust tokenizer it has just loaded inside every
    ``from_pretrained`` (``TokenizersBackend.__init__``, dropping the original) and in the
    keyword arguments of every processor load (which carry the tokenizer): ~0.6 CPU-s each with
    the tiny models' 128k pieces, for vLLM's tokenizer of each family, template and parser the
    oracle modules load. A copy stays a copy (changing it changes neither the original nor
    another copy); only the model, which neither library changes after the load, is shared."""
    import tokenizers

    copy._deepcopy_dispatch[tokenizers.Tokenizer] = lambda tokenizer, memo: rust_copy(tokenizer)  # type: ignore[attr-defined]


def fresh_tokenizer(directory: pathlib.Path | None = None) -> Any:
    """A copy of ``AutoTokenizer.from_pretrained(directory)`` (the tiny Llama 3's by default)
    that the caller may change. A load parses the 128k-token tokenizer.json and then deep-copies
    what it parsed: twice a copy's cost, seconds a load on the loaded 2-core machine, and the
    chat oracle modules load one per tool or reasoning family. The copy's Rust tokenizer is a
    :func:`rust_copy` in the test processes (:func:`copy_rust_tokenizers_cheaply`, installed by
    tests/conftest.py), the rest of the wrapper a deep copy."""
    return copy.deepcopy(_loaded(str(directory or tiny_model_dir())))

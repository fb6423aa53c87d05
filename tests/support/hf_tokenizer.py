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


def fresh_tokenizer(directory: pathlib.Path | None = None) -> Any:
    """A copy of ``AutoTokenizer.from_pretrained(directory)`` (the tiny Llama 3's by default)
    that the caller may change. A load parses the 128k-token tokenizer.json and then deep-copies
    what it parsed: twice a copy's cost, seconds a load on the loaded 2-core machine, and the
    chat oracle modules load one per tool or reasoning family."""
    return copy.deepcopy(_loaded(str(directory or tiny_model_dir())))

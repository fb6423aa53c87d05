"""The Harmony encoding of gpt-oss models, from the library vLLM 0.32 uses (``openai_harmony``,
distribution ``oss-harmony``).

vLLM renders gpt-oss chat prompts with this encoding instead of a Jinja template and reads the
output channels back with its streaming parser; this frontend does both with the same library.
``oss-harmony`` carries the ``o200k_harmony`` vocabulary inside its extension module, so loading
it reads no file and needs no network (unlike ``openai-harmony``, which downloads
``o200k_base.tiktoken`` into ``TIKTOKEN_RS_CACHE_DIR`` unless ``TIKTOKEN_ENCODINGS_BASE`` names a
local copy). The module is imported by the first gpt-oss model, never otherwise.
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["GPT_OSS_MODEL_TYPE", "harmony", "harmony_encoding", "is_harmony_model"]

GPT_OSS_MODEL_TYPE = "gpt_oss"
"""``config.json`` ``model_type`` of the models vLLM serves through Harmony."""


def is_harmony_model(config: Any) -> bool:
    """Whether a model's ``config.json`` makes vLLM use Harmony (``model_type`` ``gpt_oss``)."""
    return isinstance(config, dict) and config.get("model_type") == GPT_OSS_MODEL_TYPE


@functools.cache
def harmony() -> Any:
    """The ``openai_harmony`` module (imported on first use)."""
    import openai_harmony

    return openai_harmony


@functools.cache
def harmony_encoding() -> Any:
    """The ``HARMONY_GPT_OSS`` encoding, loaded once per process."""
    module = harmony()
    return module.load_harmony_encoding(module.HarmonyEncodingName.HARMONY_GPT_OSS)

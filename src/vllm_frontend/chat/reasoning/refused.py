"""``--reasoning-parser`` names of vLLM 0.32 this frontend refuses at startup, with the reason.

Serving them with a behaviour that differs from vLLM's would be silent; refusing names them.
"""

from __future__ import annotations

__all__ = ["REFUSED_REASONING_PARSERS"]

REFUSED_REASONING_PARSERS: dict[str, str] = {
    "hf": "it parses with the response template of the tokenizer's chat template "
    "(vllm/parser/response_template.py), which vllm-frontend does not reproduce",
}
"""Name -> why it is refused."""

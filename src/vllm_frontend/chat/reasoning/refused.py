"""``--reasoning-parser`` names of vLLM 0.32 this frontend refuses at startup, with the reason.

Serving them with a behaviour that differs from vLLM's would be silent; refusing names them.
Every name of vLLM 0.32's registry is served today: the dict is empty.
"""

from __future__ import annotations

__all__ = ["REFUSED_REASONING_PARSERS"]

REFUSED_REASONING_PARSERS: dict[str, str] = {}
"""Name -> why it is refused."""

"""Whether vLLM 0.32's input processor takes a request's ``thinking_token_budget``: only when its
``ReasoningConfig`` is enabled, which needs reasoning start and end strings, from
``--reasoning-config`` or else from the ``--reasoning-parser`` class (``reasoning_start_str`` /
``reasoning_end_str``, read when vLLM builds its config)."""

from __future__ import annotations

__all__ = ["UNMARKED_REASONING_PARSERS", "thinking_budget_enabled"]

UNMARKED_REASONING_PARSERS = frozenset(
    {
        "deepseek_v3",  # (thinking is off when vLLM builds its config: the identity parser)
        "granite",
        "hunyuan_a13b",
        "minimax_m2_append_think",
        "muse_glimmer",
        "openai_gptoss",
        "poolside_v1",  # (as deepseek_v3)
    }
)
"""``--reasoning-parser`` names whose vLLM class gives no reasoning start and end strings when
vLLM builds its config: alone, they leave its reasoning config disabled."""


def thinking_budget_enabled(parser: str | None, start: str, end: str) -> bool:
    """Whether vLLM's reasoning config is enabled for ``--reasoning-parser`` ``parser`` and
    ``--reasoning-config``'s ``reasoning_start_str`` / ``reasoning_end_str`` (``""``: unset)."""
    marked = parser is not None and parser not in UNMARKED_REASONING_PARSERS
    return marked or bool(start and end)

"""Fixtures for chat-template tests: the template fixtures and a frozen clock."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterator

import pytest

from tests.support.fixtures import CHAT_TEMPLATES

TEMPLATES_DIR = CHAT_TEMPLATES
TEMPLATE_FILES = sorted(TEMPLATES_DIR.glob("*.jinja"))

FROZEN_NOW = _dt.datetime(2024, 2, 29, 13, 5, 9)


class _FrozenDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz: _dt.tzinfo | None = None) -> _FrozenDatetime:  # type: ignore[override]
        return cls.fromtimestamp(FROZEN_NOW.timestamp(), tz)


@pytest.fixture
def frozen_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[_dt.datetime]:
    """Both renderers see the same fixed "now" in ``strftime_now``."""
    import transformers.utils.chat_template_utils as hf_utils

    from vllm_frontend.chat import template as ours

    monkeypatch.setattr(ours, "_time_ns", lambda: int(FROZEN_NOW.timestamp()) * 1_000_000_000)
    monkeypatch.setattr(hf_utils, "datetime", _FrozenDatetime)
    yield FROZEN_NOW

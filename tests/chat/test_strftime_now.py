"""``strftime_now`` keeps its text for the second it was made in: it must still follow the clock."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from vllm_frontend.chat import template as chat_template


@pytest.mark.parametrize("fmt", ["%d %b %Y", "%H:%M:%S", "%Y-%m-%d %H:%M:%S.%f", "%s"])
def test_strftime_now_follows_the_clock_across_seconds(
    fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    start = datetime(2026, 12, 31, 23, 59, 58, 999_000)
    # into the next second, later in that second (kept, bar %f), into the next day, and back
    for step in (0, 500, 1_000, 2_000, 0):
        now = start + timedelta(microseconds=step * 1000)
        monkeypatch.setattr(chat_template, "_now", lambda now=now: now)
        assert chat_template._strftime_now(fmt) == now.strftime(fmt)

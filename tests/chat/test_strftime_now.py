"""``strftime_now`` keeps its text for the second it was made in: it must still follow the clock."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from vllm_frontend.chat import template as chat_template


def _epoch_ns(now: datetime) -> int:
    # exact: whole seconds from the naive local time, then its microseconds, then a few
    # nanoseconds that datetime.now() floors away
    return int(now.replace(microsecond=0).timestamp()) * 1_000_000_000 + now.microsecond * 1000 + 7


@pytest.mark.parametrize("fmt", ["%d %b %Y", "%H:%M:%S", "%Y-%m-%d %H:%M:%S.%f", "%s"])
def test_strftime_now_follows_the_clock_across_seconds(
    fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    start = datetime(2026, 12, 31, 23, 59, 58, 999_999)
    # into the next second, later in that second (kept, bar %f), into the next day, and back
    for step in (0, 1, 500, 1_001, 2_000, 0):
        now = start + timedelta(milliseconds=step)
        monkeypatch.setattr(chat_template, "_time_ns", lambda now=now: _epoch_ns(now))
        assert chat_template._strftime_now(fmt) == now.strftime(fmt)


def test_strftime_now_reads_the_clock_datetime_now_reads() -> None:
    # the real clock: the text datetime.now() gives just before or just after (ISO order sorts)
    before = datetime.now()
    kept = chat_template._strftime_now("%d %b %Y %H:%M:%S")
    exact = chat_template._strftime_now(iso := "%Y-%m-%d %H:%M:%S.%f")
    after = datetime.now()
    assert kept in (before.strftime("%d %b %Y %H:%M:%S"), after.strftime("%d %b %Y %H:%M:%S"))
    assert before.strftime(iso) <= exact <= after.strftime(iso)

"""Timestamps are written as the reference writes them: UTC, milliseconds, ``Z``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from oma.timeutil import format_iso, now_iso, parse_iso


def test_format_is_millisecond_utc_z() -> None:
    moment = datetime(2026, 8, 8, 1, 2, 3, 456789, tzinfo=timezone(timedelta(hours=2)))
    assert format_iso(moment) == "2026-08-07T23:02:03.456Z"
    assert format_iso(datetime(2026, 1, 1)) == "2026-01-01T00:00:00.000Z"
    assert len(now_iso()) == 24 and now_iso().endswith("Z")


def test_parse_round_trips_and_rejects_non_timestamps() -> None:
    parsed = parse_iso("2026-08-08T00:00:00.000Z")
    assert parsed == datetime(2026, 8, 8, tzinfo=UTC)
    assert parse_iso("2026-08-08T00:00:00") == datetime(2026, 8, 8, tzinfo=UTC)
    assert parse_iso("yesterday") is None

"""Timestamps as the reference writes them: UTC, millisecond precision, ``Z`` suffix."""

from __future__ import annotations

from datetime import UTC, datetime


def format_iso(moment: datetime) -> str:
    """``2026-08-08T00:00:00.000Z`` for any aware datetime (naive ones are taken as UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    utc = moment.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def now_iso() -> str:
    return format_iso(datetime.now(UTC))


def parse_iso(text: str) -> datetime | None:
    """Parse an ISO-8601 timestamp; ``None`` when it is not one (callers decide what that means)."""
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def is_iso_timestamp(text: str) -> bool:
    return parse_iso(text) is not None

"""A run journal file as the reference's ``JsonlRunJournal`` writes it: one event per line.

Read as the reference reads it: empty lines are skipped; only a last line with no newline
after it (an append a crash cut short) may be invalid or not an event, and is then left out;
any other bad line is an error that names it. A missing file is an empty journal.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson

from oma.errors import OmaError
from oma.journal.events import is_run_event


class JournalReadError(OmaError):
    """A journal file that cannot be read as one: a line in the middle is not an event."""

    code = "JOURNAL_UNREADABLE"


def read_jsonl_journal(path: Path) -> list[dict[str, Any]]:
    """The events of the JSON-lines journal at ``path`` (none if it does not exist)."""
    if not path.exists():
        return []
    try:
        # As Node reads it: a byte that is not UTF-8 (a crash cut a character) becomes U+FFFD.
        text = path.read_bytes().decode("utf-8", "replace")
    except OSError as exc:
        raise JournalReadError(f'cannot read journal "{path}": {exc}') from exc
    lines = text.split("\n")
    events: list[dict[str, Any]] = []
    for index, line in enumerate(lines):
        if not line:
            continue
        trailing = index == len(lines) - 1  # no newline after it: an append cut short
        try:
            value = _strict_json(line)
        except ValueError:
            if trailing:
                break
            raise JournalReadError(f'line {index + 1} of "{path}" is not valid JSON') from None
        if not is_run_event(value):
            if trailing:
                break
            raise JournalReadError(f'line {index + 1} of "{path}" is not a run event')
        if type(value["seq"]) is float:
            value["seq"] = int(value["seq"])
        events.append(value)
    return events


def _strict_json(line: str) -> Any:
    """JSON as ``JSON.parse`` reads it: no ``NaN`` or ``Infinity``; lone surrogates and big
    integers through the standard library."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        pass
    return json.loads(line, parse_constant=_refuse)


def _refuse(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")

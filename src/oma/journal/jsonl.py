"""A run journal file as the reference's ``JsonlRunJournal`` writes it: one event per line.

Read as the reference reads it: empty lines are skipped; only the last line may be cut short
(a crash mid-append) or not an event, and is then left out; any other bad line is an error that
names it. A missing file is an empty journal.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from oma import jsonutil
from oma.errors import OmaError
from oma.journal.events import is_run_event


class JournalReadError(OmaError):
    """A journal file that cannot be read as one: a line in the middle is not an event."""

    code = "JOURNAL_UNREADABLE"


def read_jsonl_journal(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    try:
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise JournalReadError(f'cannot read journal "{path}": {exc}') from exc
    lines = text.split("\n")
    numbered = [(number, line) for number, line in enumerate(lines, start=1) if line.strip()]
    events: list[dict[str, Any]] = []
    for position, (number, line) in enumerate(numbered):
        last = position == len(numbered) - 1
        try:
            value = jsonutil.loads(line)
        except ValueError:
            if last:
                break  # a write cut short by a crash
            raise JournalReadError(f'line {number} of "{path}" is not valid JSON') from None
        if not is_run_event(value):
            if last:
                break
            raise JournalReadError(f'line {number} of "{path}" is not a run event')
        events.append(value)
    return events

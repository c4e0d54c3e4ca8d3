"""The run event journal, as the TypeScript reference defines it (its ``docs/run-journal.md``):
events with a strictly increasing ``seq`` across attempts, read from the reference's JSONL files
(``jsonl``), and checked offline as its ``verifyRun()`` checks them (``verify``)."""

from oma.journal.events import EVENT_TYPES, is_run_event
from oma.journal.jsonl import JournalReadError, read_jsonl_journal
from oma.journal.verify import (
    JournalShapeError,
    VerifyRunFailure,
    VerifyRunGap,
    VerifyRunResult,
    verify_run,
)

__all__ = [
    "EVENT_TYPES",
    "JournalReadError",
    "JournalShapeError",
    "VerifyRunFailure",
    "VerifyRunGap",
    "VerifyRunResult",
    "is_run_event",
    "read_jsonl_journal",
    "verify_run",
]

"""The run event journal, as the TypeScript reference defines it (its ``docs/run-journal.md``):
events with a strictly increasing ``seq`` across attempts, written by a run given a
``RunJournal`` (``OpenMultiAgent(journal=...)``: in memory, a JSONL file, or a store), read from
the reference's JSONL files (``jsonl``), and checked offline as its ``verifyRun()`` checks them
(``verify``)."""

from oma.journal.blocks import JournalLineageError
from oma.journal.events import EVENT_TYPES, is_run_event
from oma.journal.jsonl import JournalReadError, read_jsonl_journal
from oma.journal.recorder import JournalRecorder, RunJournal
from oma.journal.sinks import InMemoryRunJournal, JournalClosedError, JsonlRunJournal
from oma.journal.store_sink import (
    JournalConflictError,
    StoredJournalError,
    StoreRunJournal,
    events_key,
)
from oma.journal.verify import (
    JournalShapeError,
    VerifyRunFailure,
    VerifyRunGap,
    VerifyRunResult,
    verify_run,
)

__all__ = [
    "EVENT_TYPES",
    "InMemoryRunJournal",
    "JournalClosedError",
    "JournalConflictError",
    "JournalLineageError",
    "JournalReadError",
    "JournalRecorder",
    "JournalShapeError",
    "JsonlRunJournal",
    "RunJournal",
    "StoreRunJournal",
    "StoredJournalError",
    "VerifyRunFailure",
    "VerifyRunGap",
    "VerifyRunResult",
    "events_key",
    "is_run_event",
    "read_jsonl_journal",
    "verify_run",
]

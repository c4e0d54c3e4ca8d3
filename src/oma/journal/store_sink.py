"""``StoreRunJournal``: a run journal kept in a store that keeps journals (Redis, PostgreSQL,
in-memory), beside the run's checkpoint: ``__oma_checkpoint__/<runId>/events``, one record
per event, appended a batch at a time.

Each append is compared against the version this writer last wrote, so two attempts of a run
that are both alive for a moment never interleave their numbers: a batch that finds events it
does not know, numbered at or above its own, is refused (``JournalConflictError``, reported by
the recorder; the older attempt is stopped at its next checkpoint save anyway).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from oma.errors import OmaError
from oma.journal.events import is_run_event
from oma.store.base import MemoryStore
from oma.store.journal import JournalStore, new_version, supports_journal
from oma.store.reserved import CHECKPOINT_KEY_PREFIX


class JournalConflictError(OmaError):
    """Another writer appended events numbered like this batch's: the batch is not kept."""

    code = "JOURNAL_CONFLICT"
    transient = False


class StoredJournalError(OmaError):
    """A record of a stored run journal that is not an event (damaged or written by another
    program)."""

    code = "JOURNAL_UNREADABLE"


def events_key(run_id: str) -> str:
    """Where the store keeps a run's event journal."""
    return f"{CHECKPOINT_KEY_PREFIX}{run_id}/events"


def is_events_key(key: str) -> bool:
    """Whether ``key`` is a run's event journal (beside its checkpoint, not one)."""
    return key.startswith(CHECKPOINT_KEY_PREFIX) and key.endswith("/events")


class StoreRunJournal:
    """Every run's events in ``store``, each run under its own key."""

    def __init__(self, store: MemoryStore) -> None:
        if not supports_journal(store):
            raise TypeError(
                f"StoreRunJournal needs a store that keeps journals (Redis, PostgreSQL, "
                f"in-memory); {type(store).__name__} does not: give a file store's runs a "
                "JsonlRunJournal instead"
            )
        self.store: JournalStore = store
        # Per run: the journal's version as this writer last read or wrote it. An append
        # expects it, so events another writer appended since are never numbered over.
        self._versions: dict[str, str | None] = {}

    async def append(self, events: Sequence[dict[str, Any]]) -> None:
        by_run: dict[str, list[dict[str, Any]]] = {}
        for event in events:
            by_run.setdefault(str(event["runId"]), []).append(event)
        for run_id, batch in by_run.items():
            await self._append(run_id, batch)

    async def _append(self, run_id: str, batch: list[dict[str, Any]]) -> None:
        key = events_key(run_id)
        records = [orjson.dumps(event).decode() for event in batch]
        for _ in range(2):
            if run_id not in self._versions:
                self._versions[run_id] = await self.store.journal_version(key)
            expected = self._versions[run_id]
            version = new_version()
            written = await self.store.journal_write(
                key, records, version=version, expected=expected, replace=expected is None
            )
            if written:
                self._versions[run_id] = version
                return
            # Someone else wrote: fine if all they wrote is numbered below this batch (the read
            # records the version to expect next).
            stored = await self.read_from(int(batch[0]["seq"]), run_id=run_id)
            if stored:
                raise JournalConflictError(
                    f"run {run_id}: another attempt appended events {stored[0]['seq']} and up "
                    f"to its journal ({key}); this attempt's events {batch[0]['seq']} to "
                    f"{batch[-1]['seq']} are not kept"
                )
        raise JournalConflictError(f"run {run_id}: its journal ({key}) keeps changing; not kept")

    async def read_from(self, seq: int, *, run_id: str) -> list[dict[str, Any]]:
        entry = await self.store.journal_get(events_key(run_id))
        self._versions[run_id] = entry.version if entry is not None else None
        if entry is None:
            return []
        events = []
        for number, record in enumerate(entry.records, start=entry.start):
            try:
                event = orjson.loads(record)
            except orjson.JSONDecodeError:
                event = None
            if not is_run_event(event):
                raise StoredJournalError(
                    f"record {number} of {events_key(run_id)} is not a run event"
                )
            if event["seq"] >= seq:
                events.append(event)
        return events

    def describe(self, run_id: str) -> dict[str, str] | None:
        return {"kind": "StoreRunJournal", "path": events_key(run_id)}

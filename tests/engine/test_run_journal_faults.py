"""A run journal under faults: a JSONL file a crash cut mid-line, a store that refuses or loses
appends, two attempts writing at once. The run never fails for its journal; what is kept is
never out of order."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from oma.journal import (
    InMemoryRunJournal,
    JournalClosedError,
    JournalConflictError,
    JournalRecorder,
    JsonlRunJournal,
    StoreRunJournal,
    read_jsonl_journal,
    verify_run,
)
from oma.orchestrator import OpenMultiAgent
from oma.store import InMemoryStore
from tests.engine.helpers import Events
from tests.engine.journal_kit import TASKS, Model, note_team


async def test_a_line_a_crash_cut_is_dropped_before_the_next_append(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    journal = JsonlRunJournal(path)
    recorder = JournalRecorder(journal, run_id="r", attempt=1)
    recorder.emit("run/start", {"mode": "runTasks"})
    recorder.emit("plan/set", {"revision": 0, "source": "initial", "tasks": []})
    await recorder.close()
    with path.open("ab") as cut:  # the next batch, cut short by a kill
        cut.write(b'{"seq":3,"timestampUnixMs":1,"runId":"r","attem')
    assert [e["seq"] for e in read_jsonl_journal(path)] == [1, 2]  # the reader leaves it out
    again = await JournalRecorder.open(journal, run_id="r", attempt=2)
    assert again.seq == 2  # numbered on from what was kept
    again.emit("run/start", {"mode": "restore"})
    await again.close()
    events = read_jsonl_journal(path)
    assert [(e["seq"], e["attempt"]) for e in events] == [(1, 1), (2, 1), (3, 2)]
    assert path.read_bytes().count(b"\n") == 3
    await journal.close()
    with pytest.raises(JournalClosedError):
        await journal.append(events)


class RefusingStore(InMemoryStore):
    """Every journal write fails, as a store that went away would."""

    async def journal_write(self, key: str, records: Sequence[str], **options: Any) -> bool:
        raise ConnectionError("store unreachable")


async def test_a_store_that_refuses_appends_never_fails_the_run() -> None:
    events = Events()
    engine = OpenMultiAgent(journal=StoreRunJournal(RefusingStore()), on_progress=events)
    result = await engine.run_tasks(note_team(Model(2), []), TASKS, run_id="lost")
    assert result.status.code == "ok"
    assert "journal_append_failed" in events.kinds()


async def test_two_attempts_writing_at_once_never_interleave_their_numbers() -> None:
    store = InMemoryStore()
    older = JournalRecorder(StoreRunJournal(store), run_id="twice", attempt=1)
    older.emit("run/start", {"mode": "runTasks"})
    await older.flush()
    newer = await JournalRecorder.open(StoreRunJournal(store), run_id="twice", attempt=2)
    older.emit("turn/start", {"turn": 1})  # seq 2, from the attempt still alive
    newer.emit("run/start", {"mode": "restore"})  # seq 2 as well
    await newer.flush()
    failures: list[Exception] = []
    older._on_error = failures.append  # what the engine reports as an event
    await older.flush()
    assert len(failures) == 1 and isinstance(failures[0], JournalConflictError)
    kept = await StoreRunJournal(store).read_from(0, run_id="twice")
    assert [(e["seq"], e["attempt"]) for e in kept] == [(1, 1), (2, 2)]
    assert verify_run(kept).ok


async def test_an_in_memory_journal_keeps_the_latest_events_only() -> None:
    journal = InMemoryRunJournal(max_events=5)
    engine = OpenMultiAgent(journal=journal)
    await engine.run_tasks(note_team(Model(2), []), TASKS, run_id="ring")
    kept = await journal.read_from(0, run_id="ring")
    assert journal.size == 5 and kept[-1]["type"] == "run/end"
    assert [e["seq"] for e in kept] == list(range(kept[0]["seq"], kept[0]["seq"] + 5))
    verdict = verify_run(kept)
    assert verdict.ok  # what it cannot see is a gap, not a failure
    with pytest.raises(ValueError, match="at least 1"):
        InMemoryRunJournal(max_events=0)

"""A run journal under faults: a JSONL file a crash cut mid-line, a store that refuses or loses
appends, two attempts writing at once. The run never fails for its journal; what is kept is
never out of order."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from oma.budget.limits import RunBudget
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
from oma.journal.events import is_run_event
from oma.journal.recorder import FLUSH_INTERVAL_SECONDS
from oma.orchestrator import CheckpointOptions, OpenMultiAgent
from oma.store import FileStore, InMemoryStore
from tests.engine.crashing import SimulatedCrash
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


def test_a_store_without_journals_is_refused_up_front(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="JsonlRunJournal instead"):
        StoreRunJournal(FileStore(tmp_path / "state.json"))


def test_hostile_events_are_judged_not_crashed_on() -> None:
    huge = {"seq": 2**64, "timestampUnixMs": 1, "runId": "r", "attempt": 1, "type": "run/end"}
    assert not is_run_event(huge) and is_run_event({**huge, "seq": 2**53 - 1})
    base = {"timestampUnixMs": 1, "runId": "r", "attempt": 1}
    block = {"messageIndex": 0, "blockIndex": 0, "sourceEventSeqs": [1]}
    for message, digest in (("text", "x"), ({"role": "user", "content": "x"}, ["a"])):
        events = [
            {**base, "seq": 1, "type": "user/message", "message": message, "origin": "input"},
            {
                **base,
                "seq": 2,
                "type": "llm/request",
                "turn": 1,
                "model": "m",
                "blocks": [{**block, "contentHash": digest}],
            },
        ]
        verdict = verify_run(events)
        assert [f.reason for f in verdict.failures] == ["not-reproducible"]


async def test_an_unreadable_journal_is_left_alone_for_the_attempt(tmp_path: Path) -> None:
    path, store, executed = tmp_path / "run.jsonl", InMemoryStore(), list[str]()
    options = CheckpointOptions(journal=False, store=store, run_id="bad")
    with pytest.raises(SimulatedCrash):
        await OpenMultiAgent(journal=JsonlRunJournal(path)).run_tasks(
            note_team(Model(3, fail_at=2), executed), TASKS, checkpoint=options, run_id="bad"
        )
    lines = path.read_bytes().split(b"\n")
    lines[1] = b"not json"  # a line in the middle, damaged
    path.write_bytes(b"\n".join(lines))
    events = Events()
    engine = OpenMultiAgent(journal=JsonlRunJournal(path), on_progress=events)
    result = await engine.restore(note_team(Model(3), executed), checkpoint=options)
    assert result.status.code == "ok"
    assert "journal_unreadable" in events.kinds()
    entry = await store.get("__oma_checkpoint__/bad/latest")
    assert entry is not None and '"version":4' in entry.value


class SlowJournal(InMemoryRunJournal):
    async def append(self, events: Sequence[dict[str, Any]]) -> None:
        await asyncio.sleep(0.05)
        await super().append(events)


async def test_closing_while_a_batch_is_being_appended_loses_nothing() -> None:
    journal = SlowJournal()
    recorder = JournalRecorder(journal, run_id="r", attempt=1)
    recorder.emit("run/start", {"mode": "runTasks"})
    await asyncio.sleep(FLUSH_INTERVAL_SECONDS + 0.02)  # the timer's flush is appending now
    recorder.emit("run/end", {"status": {"code": "ok"}})
    await recorder.close()
    assert [e["seq"] for e in await journal.read_from(0, run_id="r")] == [1, 2]


async def test_a_cancelled_append_never_truncates_the_file(tmp_path: Path) -> None:
    journal = JsonlRunJournal(tmp_path / "run.jsonl")
    big = [
        {
            "seq": n,
            "timestampUnixMs": 1,
            "runId": "r",
            "attempt": 1,
            "type": "memory/set",
            "key": "x" * 200_000,
        }
        for n in range(1, 101)
    ]
    task = asyncio.create_task(journal.append(big))
    await asyncio.sleep(0)  # its write has started in a thread
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await journal.append([{**big[0], "seq": 101, "key": "y"}])
    seqs = [e["seq"] for e in read_jsonl_journal(journal.path)]
    assert seqs == list(range(1, 102)) or seqs == [101]  # whole, or never started


async def test_a_refused_model_call_writes_no_request() -> None:
    journal = InMemoryRunJournal()
    engine = OpenMultiAgent(journal=journal, budget=RunBudget(model_calls=1))
    result = await engine.run_tasks(note_team(Model(2), []), TASKS, run_id="capped")
    assert result.status.code != "ok"
    kinds = [e["type"] for e in await journal.read_from(0, run_id="capped")]
    assert kinds.count("llm/request") == kinds.count("turn/start") == 1

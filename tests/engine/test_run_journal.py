"""The run event journal a run writes (the reference's ``docs/run-journal.md``): its vocabulary
and order, its links and lineage (``verify_run`` finds it ``ok``), checkpoint v5 beside it, and
numbering that goes on across attempts. Real runs of the engine; the journal kept in memory,
in a JSONL file, and in a store (memory, Redis, PostgreSQL)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from oma.approval import decide_approval
from oma.approval.gates import Suspend
from oma.checkpoint.keys import checkpoint_key
from oma.journal import read_jsonl_journal, verify_run
from oma.journal.recorder import RunJournal
from oma.journal.sinks import InMemoryRunJournal, JsonlRunJournal
from oma.journal.store_sink import StoreRunJournal, events_key
from oma.orchestrator import CheckpointOptions, OpenMultiAgent
from oma.store import InMemoryStore
from oma.store.base import MemoryStore
from oma.store.journal import supports_journal
from tests.engine.crashing import CrashingStore, SimulatedCrash
from tests.engine.helpers import Events
from tests.engine.journal_kit import TASKS, Model, note_team
from tests.engine.server_stores import server_store

# The reference's order for a one-task runTasks run with one tool call (docs/run-journal.md).
REFERENCE_ORDER = [
    "run/start",
    "plan/set",
    "task/status",
    "user/message",
    "turn/start",
    "llm/request",
    "assistant/message",
    "tool/call",
    "tool/result",
    "user/message",
    "turn/end",
    "turn/start",
    "llm/request",
    "assistant/message",
    "turn/end",
    "memory/set",
    "task/status",
    "run/end",
]


async def _events(journal: RunJournal, run_id: str) -> list[dict[str, Any]]:
    return await journal.read_from(0, run_id=run_id)


async def test_a_one_task_run_writes_the_reference_vocabulary_in_its_order() -> None:
    journal = InMemoryRunJournal()
    engine = OpenMultiAgent(journal=journal)
    result = await engine.run_tasks(note_team(Model(1), []), TASKS, run_id="order")
    assert result.status.code == "ok"
    events = await _events(journal, "order")
    assert [e["type"] for e in events] == REFERENCE_ORDER
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    by_type = {e["type"]: e for e in events}
    assert {e["runId"] for e in events} == {"order"} and {e["attempt"] for e in events} == {1}
    assert by_type["run/start"]["mode"] == "runTasks"
    assert by_type["plan/set"]["revision"] == 0 and by_type["plan/set"]["source"] == "initial"
    task_id = by_type["plan/set"]["tasks"][0]["taskId"]
    assert events[2] == {**events[2], "status": "in_progress", "taskId": task_id}
    assert events[-2]["status"] == "completed"
    assert by_type["memory/set"]["key"] == f"task:{task_id}:result"
    assert by_type["run/end"]["status"] == {"code": "ok"}
    # The links the reference's conventions name.
    request, answer, call, done, results = (events[i] for i in (5, 6, 7, 8, 9))
    assert answer["sourceEventSeqs"] == [request["seq"]]
    assert call["sourceEventSeqs"] == [answer["seq"]]
    assert done["sourceEventSeqs"] == [call["seq"]] and done["toolCallId"] == "c0"
    assert results["sourceEventSeqs"] == [done["seq"]] and results["origin"] == "tool_results"
    assert events[3]["origin"] == "input" and answer["origin"] == "response"
    assert answer["usage"] == {"input_tokens": 3, "output_tokens": 0}
    assert len(request["systemPromptHash"]) == 64 and len(request["toolsHash"]) == 64
    assert events[10] == {**events[10], "turn": 1, "outcome": "tool_use"}
    assert events[14] == {**events[14], "turn": 2, "outcome": "completed"}
    second = events[12]["blocks"]
    assert [(b["messageIndex"], b["role"], b["blockType"]) for b in second] == [
        (0, "user", "text"),
        (1, "assistant", "tool_use"),
        (2, "user", "tool_result"),
    ]
    assert [b["sourceEventSeqs"] for b in second] == [[4], [7], [10]]
    verdict = verify_run(events)
    assert verdict.ok and verdict.inconclusive == [], verdict.to_wire()
    assert (verdict.events, verdict.requests, verdict.blocks_checked) == (18, 2, 4)


async def test_checkpoints_are_v5_with_the_watermark_and_each_task_s_lineage() -> None:
    journal, store = InMemoryRunJournal(), InMemoryStore()
    saves: list[dict[str, Any]] = []
    engine = OpenMultiAgent(journal=journal)
    options = CheckpointOptions(journal=False, store=store, run_id="v5")
    original = store.set

    async def recording_set(key: str, value: str, *args: Any, **kwargs: Any) -> Any:
        if key == checkpoint_key("v5"):
            saves.append(orjson.loads(value))
        return await original(key, value, *args, **kwargs)

    store.set = recording_set  # type: ignore[method-assign]
    await engine.run_tasks(note_team(Model(2), []), TASKS, checkpoint=options, run_id="v5")
    events = await _events(journal, "v5")
    saved = [e for e in events if e["type"] == "checkpoint/saved"]
    assert saves and len(saved) == len(saves)
    for snapshot, event in zip(saves, saved, strict=True):
        assert snapshot["version"] == 5 and event["version"] == 5
        assert snapshot["journalWatermarkSeq"] == event["watermarkSeq"] == event["seq"] - 1
        assert snapshot["journalRef"] == {"kind": "InMemoryRunJournal"}
        for entry in snapshot["inFlightTasks"]:
            assert 0 < entry["journalSeq"] <= snapshot["journalWatermarkSeq"]
            lineage = entry["conversationLineage"]
            assert len(lineage) == len(entry["conversationMessages"])
            for message, sources in zip(entry["conversationMessages"], lineage, strict=True):
                assert len(sources) == len(message["content"])
                assert all(s is not None and s[0] <= entry["journalSeq"] for s in sources)
    assert any(s["inFlightTasks"] for s in saves)


async def test_a_run_without_a_journal_still_saves_v4_exactly() -> None:
    store = InMemoryStore()
    await OpenMultiAgent().run_tasks(
        note_team(Model(1), []),
        TASKS,
        checkpoint=CheckpointOptions(journal=False, store=store, run_id="v4"),
    )
    entry = await store.get(checkpoint_key("v4"))
    assert entry is not None
    snapshot = orjson.loads(entry.value)
    assert snapshot["version"] == 4
    assert "journalWatermarkSeq" not in snapshot and "journalRef" not in snapshot
    assert all("conversationLineage" not in e for e in snapshot["inFlightTasks"])


@pytest.fixture(params=["memory", "redis", "postgres", "jsonl"])
async def kept(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[MemoryStore, RunJournal]]:
    """A checkpoint store, and where the journal is kept: in that store, or a JSONL file."""
    if request.param in ("memory", "jsonl"):
        memory = InMemoryStore()
        if request.param == "jsonl":
            yield memory, JsonlRunJournal(tmp_path / "runs" / "run.jsonl")
        else:
            yield memory, StoreRunJournal(memory)
        return
    async with server_store(request, request.param, "events") as made:
        assert supports_journal(made)
        yield made, StoreRunJournal(made)


async def test_a_crashed_run_resumed_numbers_on_and_verifies(
    kept: tuple[MemoryStore, RunJournal],
) -> None:
    store, journal = kept
    executed: list[str] = []
    options = CheckpointOptions(store=store, run_id="again", fence=True, journal=True)
    team = note_team(Model(4, fail_at=2), executed)
    with pytest.raises(SimulatedCrash):
        await OpenMultiAgent(journal=journal).run_tasks(
            team, TASKS, checkpoint=options, run_id="again"
        )
    first = await _events(journal, "again")
    assert first and first[-1]["type"] == "run/end"
    assert first[-1]["status"]["code"] == "error"
    result = await OpenMultiAgent(journal=journal).restore(team, checkpoint=options)
    assert result.status.code == "ok"
    assert executed == ["c0", "c1", "c2", "c3"]  # nothing ran twice
    events = await _events(journal, "again")
    assert events[: len(first)] == first
    later = events[len(first) :]
    assert later[0]["type"] == "run/start" and later[0]["mode"] == "restore"
    assert {e["attempt"] for e in later} == {2}
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(set(seqs))  # strictly increasing across attempts
    verdict = verify_run(events)
    # The resumed task's restored blocks name the events of the first attempt: all found.
    assert verdict.ok and verdict.inconclusive == [], verdict.to_wire()
    if isinstance(journal, JsonlRunJournal):
        assert read_jsonl_journal(journal.path) == events
        assert journal.path.parent.name == "runs"
    elif isinstance(journal, StoreRunJournal):
        assert await store.get(events_key("again")) is None  # a journal, not an entry


async def test_enforce_lineage_refuses_a_request_a_v4_checkpoint_cannot_explain() -> None:
    store, executed = InMemoryStore(), list[str]()
    options = CheckpointOptions(journal=False, store=store, run_id="strict")
    team = note_team(Model(3, fail_at=1), executed)
    tasks = [{**TASKS[0], "maxRetries": 2}]  # retrying cannot help: not retried
    with pytest.raises(SimulatedCrash):
        await OpenMultiAgent().run_tasks(team, tasks, checkpoint=options, run_id="strict")
    engine = OpenMultiAgent(journal=InMemoryRunJournal(), enforce_lineage=True)
    result = await engine.restore(team, checkpoint=options)
    assert result.status.code == "error"  # the task failed: it never called the model
    failure = result.tasks[0].result or ""
    assert "no journal lineage" in failure, failure
    assert executed == ["c0"]  # no retry started the task over, running c0 again


async def test_a_v5_run_resumed_without_a_journal_saves_v4_without_its_marks() -> None:
    store, executed = InMemoryStore(), list[str]()
    options = CheckpointOptions(journal=False, store=store, run_id="back")
    with pytest.raises(SimulatedCrash):
        await OpenMultiAgent(journal=InMemoryRunJournal()).run_tasks(
            note_team(Model(4, fail_at=2), executed), TASKS, checkpoint=options, run_id="back"
        )
    entry = await store.get(checkpoint_key("back"))
    assert entry is not None and orjson.loads(entry.value)["version"] == 5
    with pytest.raises(SimulatedCrash):  # resumed without a journal, and stopped mid-task
        await OpenMultiAgent().restore(note_team(Model(4, fail_at=3), executed), checkpoint=options)
    entry = await store.get(checkpoint_key("back"))
    assert entry is not None
    saved = orjson.loads(entry.value)
    assert saved["version"] == 4 and "journalWatermarkSeq" not in saved
    assert saved["inFlightTasks"] and b"conversationLineage" not in entry.value.encode()
    assert "journalSeq" not in saved["inFlightTasks"][0]
    result = await OpenMultiAgent().restore(note_team(Model(4), executed), checkpoint=options)
    assert result.status.code == "ok" and executed == ["c0", "c1", "c2", "c3"]


def _crash_before_first_commit(snapshot: dict[str, Any]) -> bool:
    """Before the save that would hold the run's first committed tool result."""
    return any(
        call.get("commit") is not None
        for entry in snapshot.get("inFlightTasks") or []
        for call in entry.get("pendingToolCalls") or []
    )


async def test_a_result_the_journal_kept_but_the_checkpoint_missed_is_folded_not_run_again() -> (
    None
):
    store, journal, executed = CrashingStore(), InMemoryRunJournal(), list[str]()
    options = CheckpointOptions(journal=False, store=store, run_id="tail")
    store.crash_before = _crash_before_first_commit  # killed after the journal's append
    with pytest.raises(SimulatedCrash):
        await OpenMultiAgent(journal=journal).run_tasks(
            note_team(Model(2), executed), TASKS, checkpoint=options, run_id="tail"
        )
    assert executed == ["c0"]
    saved = store.checkpoint_writes[-1]
    tail = await journal.read_from(saved["journalWatermarkSeq"] + 1, run_id="tail")
    # The result is kept by the journal only (and the crashed attempt's end).
    assert [e["type"] for e in tail] == ["checkpoint/saved", "tool/result", "run/end"]
    events = Events()
    engine = OpenMultiAgent(journal=journal, on_progress=events)
    result = await engine.restore(note_team(Model(2), executed), checkpoint=options)
    assert result.status.code == "ok"
    assert executed == ["c0", "c1"]  # c0's result came from the journal: not run again
    assert not [e for e in events.items if e.type == "warning"]
    first = next(w for w in store.checkpoint_writes if w["identity"]["attempt"] == 2)
    assert "noted n0" in orjson.dumps(first["inFlightTasks"]).decode()  # its first save has it
    assert verify_run(await journal.read_from(0, run_id="tail")).ok


async def test_a_tail_the_fold_cannot_place_is_discarded_with_a_warning() -> None:
    store, journal, executed = CrashingStore(), InMemoryRunJournal(), list[str]()
    options = CheckpointOptions(journal=False, store=store, run_id="odd")
    store.crash_before = _crash_before_first_commit
    with pytest.raises(SimulatedCrash):
        await OpenMultiAgent(journal=journal).run_tasks(
            note_team(Model(2), executed), TASKS, checkpoint=options, run_id="odd"
        )
    kept = await journal.read_from(0, run_id="odd")
    assert kept[-2]["type"] == "tool/result"
    forged = {**kept[-2], "toolCallId": "never-asked"}  # a result for a call nobody made
    journal._events[-2] = forged  # the journal's tail, tampered
    events = Events()
    engine = OpenMultiAgent(journal=journal, on_progress=events)
    result = await engine.restore(note_team(Model(2), executed), checkpoint=options)
    assert result.status.code == "ok"
    assert executed == ["c0", "c0", "c1"]  # from the snapshot alone: c0 ran again (idempotent)
    warnings = [e.data for e in events.items if e.type == "warning"]
    assert [w["code"] for w in warnings] == ["JOURNAL_TAIL_DISCARDED"]
    assert "not pending" in warnings[0]["reason"]


class CrashOnCommit(InMemoryStore):
    """A fenced store killed, once armed, instead of writing the first save that holds a
    committed tool result (the journal was appended just before)."""

    armed = False

    async def compare_and_set(
        self, key: str, expected: str | None, value: str, metadata: Any = None
    ) -> bool:
        if (
            self.armed
            and key.endswith("/latest")
            and _crash_before_first_commit(orjson.loads(value))
        ):
            self.armed = False
            raise SimulatedCrash("killed before writing the commit")
        return await super().compare_and_set(key, expected, value, metadata)


async def test_an_approved_call_committed_only_in_the_journal_is_not_run_again() -> None:
    store, journal, executed = CrashOnCommit(), InMemoryRunJournal(), list[str]()
    options = CheckpointOptions(journal=False, store=store, run_id="gate", fence=True)
    gated = OpenMultiAgent(journal=journal, on_tool_call=lambda ctx: Suspend("review"))
    suspended = await gated.run_tasks(note_team(Model(1), executed), TASKS, checkpoint=options)
    assert suspended.status.code == "suspended" and executed == []
    (asked,) = suspended.pending_approvals
    await decide_approval(
        store,
        request_id=asked.id,
        request_hash=asked.request_hash,
        decision="approve",
        reviewer={"id": "rita"},
    )
    store.armed = True
    with pytest.raises(SimulatedCrash):
        await gated.restore(note_team(Model(1), executed), checkpoint=options)
    assert executed == ["c0"]
    events = Events()
    engine = OpenMultiAgent(journal=journal, on_progress=events)
    result = await engine.restore(note_team(Model(1), executed), checkpoint=options)
    assert result.status.code == "ok" and executed == ["c0"]  # folded from the journal
    assert not [e for e in events.items if e.type == "warning"]


class CountingJournal(InMemoryRunJournal):
    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    async def read_from(self, seq: int, *, run_id: str | None = None) -> list[dict[str, Any]]:
        self.reads += 1
        return await super().read_from(seq, run_id=run_id)


async def test_a_restore_reads_the_journal_once() -> None:
    """The fold's read numbers the next events too (a long run's journal is read once)."""
    store, journal, executed = InMemoryStore(), CountingJournal(), list[str]()
    options = CheckpointOptions(journal=False, store=store, run_id="once")
    with pytest.raises(SimulatedCrash):
        await OpenMultiAgent(journal=journal).run_tasks(
            note_team(Model(3, fail_at=2), executed), TASKS, checkpoint=options, run_id="once"
        )
    journal.reads = 0
    await OpenMultiAgent(journal=journal).restore(note_team(Model(3), executed), checkpoint=options)
    assert journal.reads == 1
    events = await InMemoryRunJournal.read_from(journal, 0, run_id="once")
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(set(seqs)) and verify_run(events).ok

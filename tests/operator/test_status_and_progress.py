"""Status math after an attempt (report, backoff) and progress read from a real store file."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import pytest

from oma.checkpoint.journal import JournalWriter
from oma.checkpoint.keys import checkpoint_key, segments_journal_key
from oma.errors import CheckpointValidationError
from oma.store import InMemoryStore, MemoryEntry
from oma.store.urls import open_store
from oma.timeutil import parse_iso
from oma_operator.approvals import sync as approvals
from oma_operator.approvals.sync import run_records
from oma_operator.resources.bodies import Condition, TeamRunStatus
from oma_operator.runs.rules.decisions import Decision, attempt_record
from oma_operator.runs.rules.outcomes import Outcome
from oma_operator.runs.rules.progress import (
    CheckpointTooLargeToPoll,
    Polled,
    changed,
    polled_conditions,
    read_progress,
)
from oma_operator.runs.rules.status import (
    POLLED,
    after_attempt,
    backoff_left,
    condition,
    merge_conditions,
)
from tests.conformance_data import require_conformance_dir
from tests.engine.approval_fixtures import CHARGE_REQUEST
from tests.operator.charge_runs import CountingReads, OlderRunnersHeads, suspend_at_the_charge

NEXT = Decision("next_attempt", {"failures": 1}, "Error", "starting the next one", 20)
DONE = Decision("succeeded", {}, "RunSucceeded", "the run completed")


def test_task_summary_comes_from_the_whole_report_even_past_1024_characters() -> None:
    report = json.dumps(
        {"status": "ok", "message": "x" * 2000, "tasks": {"total": 3, "completed": 3}}
    )
    outcome = Outcome("succeeded", "Completed", report, 0)
    record = attempt_record(1, outcome, "r-a1", "2026-12-01T10:00:00.000Z")
    assert len(record["message"]) == 1024  # the history keeps a bounded excerpt
    status = after_attempt({}, DONE, record, 1, None, outcome.report)
    assert status["taskSummary"] == "3/3"
    assert status["nextAttemptAfter"] is None  # merge patch: removed


def test_a_backoff_is_written_as_next_attempt_after_and_survives_a_restart() -> None:
    record = attempt_record(1, Outcome("crash", "Error", "boom", 1), "r-a1", "t")
    before = datetime.now(UTC)
    status = after_attempt({}, NEXT, record, 1, 2)
    after = parse_iso(status["nextAttemptAfter"])
    assert status["attempt"] == 2 and after is not None
    assert before + timedelta(seconds=19) < after <= datetime.now(UTC) + timedelta(seconds=20)
    # what a restarted operator computes before creating attempt 2's pod (the merge patch,
    # a dict[str, Any], read as the status it leaves)
    assert 0 < backoff_left(cast(TeamRunStatus, status), before) <= 20.01
    assert backoff_left(cast(TeamRunStatus, status), after + timedelta(seconds=1)) == 0
    assert backoff_left({}, before) == 0


async def test_progress_is_read_from_the_latest_checkpoint(tmp_path: Path) -> None:
    target = tmp_path / "store.json"
    shutil.copy(require_conformance_dir() / "b-crash-moment.store.json", target)
    store = open_store(f"file://{target}")
    progress = await read_progress(store, "conf-b")
    assert progress is not None
    assert progress["taskSummary"] == "1/2" and progress["turns"] == 1  # the one in flight
    assert parse_iso(progress["lastCheckpointAt"]) is not None
    assert await read_progress(store, "no-such-run") is None
    assert changed({"taskSummary": "1/2", "turns": 1}, progress) == {
        "lastCheckpointAt": progress["lastCheckpointAt"]
    }
    # the progress read (a dict[str, Any]) as the status it was written to
    assert changed(cast(TeamRunStatus, progress), progress) == {}


async def test_the_runs_approval_rows_are_read_by_id_from_its_checkpoint(tmp_path: Path) -> None:
    target = tmp_path / "store.json"
    shutil.copy(require_conformance_dir() / "c1-suspended.store.json", target)
    store = open_store(f"file://{target}")
    assert await run_records(store, "no-such-run") == []  # no checkpoint: every row is looked at
    # A row the checkpoint does not name is not even read (this one would not parse).
    await store.set("__oma_approval__/apr_" + "0" * 32, "not a ledger row")
    (record,) = await run_records(store, "conf-c")
    assert record.request.id == "apr_ae114847e935829ae1d26b8c56b0b88f"
    assert record.decision is None


@pytest.fixture(autouse=True)
def _no_ids_remembered() -> Iterator[None]:
    """Each test starts with the operator's memory of checkpoint ids empty (a module global)."""
    approvals._IDS_READ.clear()
    yield
    approvals._IDS_READ.clear()


def _checkpoint_reads(run_id: str) -> list[str]:
    """A checkpoint read whole: its journal and, at the same time, its segments journal."""
    return sorted([checkpoint_key(run_id), segments_journal_key(checkpoint_key(run_id))])


async def test_progress_of_a_journal_comes_from_its_head_not_its_records() -> None:
    store = CountingReads()
    writer = JournalWriter(store, checkpoint_key("j"), fenced=True)
    tasks = [{"id": "a", "status": "completed"}, {"id": "b", "status": "pending"}]
    wire = {"createdAt": "2026-12-03T10:00:00.000Z", "queue": {"tasks": tasks, "completed": ["a"]}}
    await writer.save(wire, {"createdAt": wire["createdAt"]}, 1)
    progress = await read_progress(store, "j")
    assert progress == {
        "lastCheckpointAt": "2026-12-03T10:00:00.000Z",
        "taskSummary": "1/2",
        "turns": 0,  # none in flight
    }
    assert store.reads == []
    running = {**wire, "inFlightTasks": [{"taskId": "b", "turns": 12}, {"turns": "x"}]}
    await writer.save(running, {"createdAt": wire["createdAt"]}, 1)
    assert (await read_progress(store, "j") or {})["turns"] == 12  # the task in flight
    # A head whose numbers make no sense (written by someone else) is not believed: the
    # journal itself is read, and here it is no snapshot at all.
    head = await store.journal_head(checkpoint_key("j"))
    assert head is not None
    forged = {"createdAt": "x", "progress": {"tasks": 1, "completed": 5}}
    assert await store.journal_write(
        checkpoint_key("j"),
        ["{}"],
        version="v2",
        expected=head.version,
        replace=True,
        metadata=forged,
    )
    with pytest.raises(CheckpointValidationError):
        await read_progress(store, "j")
    assert sorted(store.reads) == _checkpoint_reads("j")


async def test_a_waiting_runs_requests_come_from_its_journal_head_not_its_records() -> None:
    """The operator polls a run that waits for approvals every few seconds: with a checkpoint
    of 100 MB, reading it whole each time cost one tenant's two runs half a GB of the
    operator's memory. The runner writes the request ids into the journal's head; the poll
    reads that and the ledger rows, never the journal's records."""
    store = CountingReads()
    await suspend_at_the_charge(store, journal=True)
    head = await store.journal_head(checkpoint_key("conf-c"))
    assert head is not None and (head.metadata or {})["approvals"] == {
        "pending": [CHARGE_REQUEST],
        "decided": [],
    }
    store.reads.clear()
    (record,) = await run_records(store, "conf-c")
    assert record.request.id == CHARGE_REQUEST and record.decision is None
    assert store.reads == []  # the journal itself was not read


async def test_an_older_runners_journal_is_read_once_per_version_not_every_poll() -> None:
    """A run suspended by an older runner names its requests only in its checkpoint: the poll
    reads it once, then again only when the journal's version changes."""
    store = OlderRunnersHeads()
    await suspend_at_the_charge(store, journal=True)
    store.reads.clear()
    for _ in range(3):
        (record,) = await run_records(store, "conf-c")
        assert record.request.id == CHARGE_REQUEST and record.decision is None
    assert sorted(store.reads) == _checkpoint_reads("conf-c")  # the first poll only
    entry = await store.journal_get(checkpoint_key("conf-c"))
    assert entry is not None
    written = await store.journal_write(
        checkpoint_key("conf-c"),
        entry.records,
        version="b" * 32,
        expected=entry.version,
        replace=True,
        metadata=entry.metadata,
    )
    assert written
    store.reads.clear()
    (record,) = await run_records(store, "conf-c")
    assert sorted(store.reads) == _checkpoint_reads("conf-c")  # a new version is read again


class _CountingGets(InMemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    async def get(self, key: str) -> MemoryEntry | None:
        if key.startswith("__oma_checkpoint__/"):
            self.reads.append(key)
        return await super().get(key)


async def test_a_snapshot_layout_run_is_read_once_per_attempt_it_waits_in() -> None:
    """The snapshot layout has no head: the poll reads the checkpoint once per attempt that
    waits (a waiting run's requests do not change until the next attempt), keyed by the
    TeamRun's uid, so two tenants' runs of the same run id never share what was read."""
    store = _CountingGets()
    await suspend_at_the_charge(store, journal=False)
    store.reads.clear()
    for _ in range(3):
        (record,) = await run_records(store, "conf-c", "uid-a", waiting_in=1)
        assert record.request.id == CHARGE_REQUEST
    assert store.reads == [checkpoint_key("conf-c")]
    for owner, attempt in (("uid-b", 1), ("uid-a", 2)):  # another tenant's run, the next attempt
        store.reads.clear()
        (record,) = await run_records(store, "conf-c", owner, waiting_in=attempt)
        assert store.reads == [checkpoint_key("conf-c")], (owner, attempt)
    store.reads.clear()
    await run_records(store, "conf-c")  # not said to wait: read every time
    await run_records(store, "conf-c")
    assert len(store.reads) == 2


async def test_a_snapshot_too_large_to_poll_is_not_read_and_the_condition_says_so() -> None:
    """The snapshot layout has no head: the poll asks the store for the snapshot's size and
    reads it only under the limit. An attempt's end (no limit) still reads it."""
    store = _CountingGets()
    await suspend_at_the_charge(store, journal=False)
    size = await store.value_size(checkpoint_key("conf-c"))
    assert size is not None and size > 1000
    store.reads.clear()
    with pytest.raises(CheckpointTooLargeToPoll) as caught:
        await read_progress(store, "conf-c", read_limit=size - 1)
    assert "journal-layout checkpoint (the default) is polled whatever its size" in str(
        caught.value
    )
    assert store.reads == []  # asked its size only
    polled = await read_progress(store, "conf-c", read_limit=size)
    assert polled is not None and (polled["taskSummary"], polled["turns"]) == ("0/1", 1)
    assert await read_progress(store, "conf-c") == polled  # at an attempt's end: no limit

    status: TeamRunStatus = {"conditions": [{"type": "Progressing", "status": "True"}]}
    assert polled_conditions(status, Polled(), 3) is None  # never too large: no condition
    too_large = Polled(too_large=str(caught.value))
    conditions = polled_conditions(status, too_large, 3)
    assert conditions is not None
    found = {c["type"]: c for c in conditions}
    assert (found[POLLED]["status"], found[POLLED]["reason"]) == ("False", "CheckpointTooLarge")
    assert "Progressing" in found
    status = {"conditions": conditions}
    assert polled_conditions(status, too_large, 3) is None  # unchanged: no write
    # A store that did not answer says nothing of the checkpoint's size: no flapping.
    assert polled_conditions(status, Polled(answered=False), 3) is None
    again = polled_conditions(status, Polled(), 4)
    assert again is not None
    assert {c["type"]: c["status"] for c in again}[POLLED] == "True"
    # An attempt's end reads the checkpoint whatever its size: the condition turns True.
    record = attempt_record(1, Outcome("succeeded", "Completed", "{}", 0), "r-a1", "t")
    ended = after_attempt(status, DONE, record, 5, None)
    polled_now = next(c for c in ended["conditions"] if c["type"] == POLLED)
    assert (polled_now["status"], polled_now["reason"]) == ("True", "AttemptEnded")
    untouched = after_attempt({"conditions": []}, DONE, record, 5, None)
    assert POLLED not in {c["type"] for c in untouched["conditions"]}


def test_a_condition_keeps_its_transition_time_only_while_its_status_holds() -> None:
    old: list[Condition] = [
        {"type": "Reconciled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
        {"type": "Queued", "status": "True"},  # written without a time (by hand, or long ago)
    ]
    same = condition("Reconciled", True, "Done", "ok", 1)
    flipped = condition("Queued", False, "Started", "a slot was free", 1)
    merged = {c["type"]: c for c in merge_conditions(old, [same, flipped])}
    assert merged["Reconciled"]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert merged["Queued"]["lastTransitionTime"] == flipped["lastTransitionTime"]
    untimed = merge_conditions(old[1:], [condition("Queued", True, "Waiting", "no slot", 1)])
    assert untimed[0].get("lastTransitionTime")  # never written empty or null


def test_every_end_sets_ready_and_succeeded_and_its_time_and_a_retry_clears_them() -> None:
    """``kubectl wait --for=condition=Ready`` (or ``Succeeded``) has a condition to wait on
    whatever ended the run; ``startTime`` is the first attempt's, ``completionTime`` the end's."""
    from oma_operator.runs.rules.holds import held
    from oma_operator.runs.rules.status import retried, started

    def of(status: dict[str, Any], kind: str) -> str:
        return str(next(c["status"] for c in status["conditions"] if c["type"] == kind))

    first = started({}, 1, "run", 1, "sha256:x")
    assert first["startTime"] and "startTime" not in started(
        cast(TeamRunStatus, first), 2, "run", 1, "w"
    )
    record = attempt_record(1, Outcome("succeeded", "Completed", "", 0), "r-a1", "t")
    done = after_attempt(cast(TeamRunStatus, first), DONE, record, 1, None)
    assert (of(done, "Ready"), of(done, "Succeeded"), of(done, "Failed")) == (
        "True",
        "True",
        "False",
    )
    assert done["completionTime"]
    failing = Decision("failed", {"failures": 4}, "FailuresExhausted", "4 failures")
    failed = after_attempt(cast(TeamRunStatus, first), failing, record, 1, None)
    assert (of(failed, "Ready"), of(failed, "Succeeded")) == ("False", "False")
    assert failed["completionTime"]
    running = after_attempt(cast(TeamRunStatus, first), NEXT, record, 1, 2)
    assert "completionTime" not in running
    assert not {"Ready", "Succeeded"} & {c["type"] for c in running["conditions"]}
    cancelled = held(cast(TeamRunStatus, first), "cancel", 1)
    assert (of(cancelled, "Ready"), of(cancelled, "Succeeded")) == ("False", "False")
    assert cancelled["completionTime"] and cancelled["phase"] == "Cancelled"
    assert "completionTime" not in held(cast(TeamRunStatus, first), "suspend", 1)
    again = retried(cast(TeamRunStatus, failed), "2026-12-07T00:00:00Z", 1)
    assert (of(again, "Ready"), of(again, "Succeeded")) == ("Unknown", "Unknown")
    assert again["completionTime"] is None  # merge patch: removed


def test_a_succeeded_run_s_output_is_each_task_s_result_cut_at_a_documented_size() -> None:
    from types import SimpleNamespace

    from oma_operator.runs.rules.progress import OUTPUT_CHARS, OUTPUT_TASKS, run_output

    def task(n: int, result: str, status: str = "completed") -> Any:
        return SimpleNamespace(id=f"t{n}", title=f"Task {n}", status=status, result=result)

    tasks = [task(0, "short"), task(1, "x" * (OUTPUT_CHARS + 5)), task(2, "", "failed")]
    tasks += [task(n, f"r{n}") for n in range(3, OUTPUT_TASKS + 5)]
    output = run_output(SimpleNamespace(queue=SimpleNamespace(tasks=tasks)), "oma checkpoint show")
    listed = output["tasks"]
    assert len(listed) == OUTPUT_TASKS and output["omitted"] == 4  # 24 completed
    assert listed[0] == {"taskId": "t0", "title": "Task 0", "result": "short"}
    assert len(listed[1]["result"]) == OUTPUT_CHARS and listed[1]["truncated"] is True
    assert "t2" not in [t["taskId"] for t in listed]  # only completed tasks
    assert output["more"] == "oma checkpoint show"
    said = [task(99, "paid\x1b[2J\u202e done")]  # a model's words, hostile
    hostile = run_output(SimpleNamespace(queue=SimpleNamespace(tasks=said)), "m")
    shown = hostile["tasks"][0]["result"]
    assert "\x1b" not in shown and "\u202e" not in shown and shown.startswith("paid")


def test_the_output_is_bounded_whatever_titles_and_results_a_run_has() -> None:
    import json as json_module
    from types import SimpleNamespace

    from oma_operator.runs.rules.progress import OUTPUT_BYTES, TITLE_CHARS, run_output

    tasks = [
        SimpleNamespace(id=f"t{n}", title="T" * 60_000, status="completed", result="r" * 5_000)
        for n in range(40)
    ]
    output = run_output(SimpleNamespace(queue=SimpleNamespace(tasks=tasks)), "more")
    assert len(json_module.dumps(output).encode()) <= OUTPUT_BYTES + 200
    assert all(len(t["title"]) == TITLE_CHARS and t["truncated"] for t in output["tasks"])
    assert output["omitted"] == 40 - len(output["tasks"]) > 0

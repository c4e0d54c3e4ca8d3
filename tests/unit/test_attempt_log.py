"""The attempt log next to a checkpoint: keys, concurrent appends, bounds, unreadable logs, and
that it is written only when asked for (library runs write exactly what the reference writes)."""

from __future__ import annotations

import asyncio
import shutil
import socket
from pathlib import Path

import pytest

from oma import AgentConfig, CheckpointOptions, OpenMultiAgent, ScriptedAdapter, Team
from oma.checkpoint import Checkpoint, CheckpointSnapshotV4
from oma.checkpoint.attempts import (
    MAX_ATTEMPT_RECORDS,
    AttemptRecord,
    append_attempt,
    attempt_record,
    attempts_key,
    load_attempt_log,
    run_trace_id,
)
from oma.checkpoint.keys import DEFAULT_CHECKPOINT_KEY, checkpoint_key
from oma.errors import AttemptLogError
from oma.store import InMemoryStore
from oma.store.urls import open_store
from tests.conformance_data import require_conformance_dir


def _record(attempt: int, trace_id: str = "ab" * 16) -> AttemptRecord:
    return AttemptRecord(
        attempt=attempt,
        trace_id=trace_id,
        started_at="2026-12-01T00:00:00.000Z",
        host="pod-a",
        completed_tasks=attempt - 1,
        total_tasks=3,
        in_flight_tasks=0,
        committed_tool_calls=0,
    )


def test_keys_sit_next_to_the_latest_snapshot() -> None:
    assert attempts_key(checkpoint_key("r-1")) == "__oma_checkpoint__/r-1/attempts"
    assert attempts_key(DEFAULT_CHECKPOINT_KEY) == "__oma_checkpoint__/attempts"


async def test_concurrent_appends_lose_nothing() -> None:
    store = InMemoryStore()
    key = checkpoint_key("r-1")
    await asyncio.gather(*(append_attempt(store, key, _record(n)) for n in range(1, 6)))
    log = await load_attempt_log(store, key)
    assert log is not None and log.run_id == "r-1"
    assert [record.attempt for record in log.attempts] == [1, 2, 3, 4, 5]


async def test_the_newest_records_are_kept_and_a_repeat_replaces() -> None:
    store = InMemoryStore()
    key = checkpoint_key("r-2")
    for n in range(1, MAX_ATTEMPT_RECORDS + 6):
        await append_attempt(store, key, _record(n))
    await append_attempt(
        store, key, _record(MAX_ATTEMPT_RECORDS + 5).model_copy(update={"host": "b"})
    )
    log = await load_attempt_log(store, key)
    assert log is not None and len(log.attempts) == MAX_ATTEMPT_RECORDS
    assert log.attempts[0].attempt == 6 and log.attempts[-1].host == "b"


async def test_the_runs_trace_is_the_first_attempts_and_outlives_its_record() -> None:
    """Every attempt exports into one trace (oma.tracing): the first logged attempt's own."""
    store = InMemoryStore()
    key = checkpoint_key("r-t")
    for n in range(1, MAX_ATTEMPT_RECORDS + 3):
        await append_attempt(store, key, _record(n, f"{n:032x}"))
    log = await load_attempt_log(store, key)
    assert log is not None and log.attempts[0].attempt == 3  # attempt 1's record is gone
    assert log.trace_id == run_trace_id(log) == f"{1:032x}"


async def test_a_log_written_before_it_named_the_runs_trace_uses_its_earliest_attempt() -> None:
    store = InMemoryStore()
    key = checkpoint_key("r-old")
    for n in (2, 3):
        await append_attempt(store, key, _record(n, f"{n:032x}"))
    log = await load_attempt_log(store, key)
    assert log is not None
    old = log.model_copy(update={"trace_id": None})
    assert run_trace_id(old) == f"{2:032x}"
    assert run_trace_id(old.model_copy(update={"attempts": []})) is None


async def test_an_unreadable_log_is_a_typed_error_naming_the_key() -> None:
    store = InMemoryStore()
    await store.set("__oma_checkpoint__/r-3/attempts", '{"version": 1}')
    with pytest.raises(AttemptLogError, match="r-3/attempts") as raised:
        await load_attempt_log(store, checkpoint_key("r-3"))
    assert raised.value.code == "ATTEMPT_LOG_INVALID"


@pytest.mark.parametrize("enabled", [False, True])
async def test_written_once_per_attempt_only_when_enabled(enabled: bool) -> None:
    store = InMemoryStore()
    team = Team(
        name="t", agents=[AgentConfig(name="w", adapter=ScriptedAdapter([{"text": "ok"}] * 4))]
    )
    tasks = [{"title": "A", "description": "a", "assignee": "w"}]
    options = CheckpointOptions(store=store, run_id="r-4", attempt_log=enabled)
    await OpenMultiAgent().run_tasks(team, tasks, checkpoint=options)
    await OpenMultiAgent().restore(team, tasks, checkpoint=options)
    log = await load_attempt_log(store, checkpoint_key("r-4"))
    if not enabled:
        assert log is None
        return
    assert log is not None and [r.attempt for r in log.attempts] == [1, 2]
    assert log.attempts[1].completed_tasks == 1 and log.attempts[1].total_tasks == 1


async def test_the_host_is_the_runner_pods_name_when_the_pod_says_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    target = tmp_path / "store.json"
    shutil.copy(require_conformance_dir() / "b-crash-moment.store.json", target)
    snapshot = await Checkpoint(open_store(f"file://{target}"), run_id="conf-b").load_latest()
    assert isinstance(snapshot, CheckpointSnapshotV4)
    monkeypatch.setenv("OMA_POD_NAME", "pay-a3")
    assert attempt_record(snapshot).host == "pay-a3"
    monkeypatch.delenv("OMA_POD_NAME")
    assert attempt_record(snapshot).host == socket.gethostname()

"""A library run given only a store keeps its checkpoint as a journal where the store keeps
journals (issue 47); ``journal=False`` keeps the reference's whole snapshots; a store without
journals keeps snapshots; a resumed run keeps the layout it was found in."""

from __future__ import annotations

from pathlib import Path

from oma.checkpoint import Checkpoint
from oma.checkpoint.keys import checkpoint_key
from oma.checkpoint.snapshot import CheckpointSnapshotV4
from oma.llm.scripted import ScriptedAdapter
from oma.orchestrator import CheckpointOptions, OpenMultiAgent
from oma.store import FileStore, InMemoryStore, JournalStore, MemoryStore
from oma.team import AgentConfig, Team
from tests.engine.long_runs import StopsAt, run_long

RUN = "library-default"


async def _run(store: MemoryStore, *, journal: bool | None = None) -> None:
    """A one-task run; ``journal=None`` leaves ``CheckpointOptions``'s default."""
    options = CheckpointOptions(store=store, run_id=RUN)
    if journal is not None:
        options = CheckpointOptions(store=store, run_id=RUN, journal=journal)
    agent = AgentConfig(name="w", adapter=ScriptedAdapter([{"text": "done"}]))
    result = await OpenMultiAgent().run_tasks(
        Team(name="t", agents=[agent]),
        [{"title": "T", "description": "D"}],
        checkpoint=options,
    )
    assert result.success, result.status


async def test_a_library_run_given_a_store_writes_the_journal(journal_store: JournalStore) -> None:
    await _run(journal_store)  # journal left to its default
    key = checkpoint_key(RUN)
    assert await journal_store.journal_version(key) is not None
    assert await journal_store.get(key) is None  # no whole snapshot beside it
    loaded = await Checkpoint(journal_store, run_id=RUN).load_latest()
    assert loaded is not None and len(loaded.completed_task_results) == 1


async def test_journal_false_writes_the_reference_s_whole_snapshot(
    journal_store: JournalStore,
) -> None:
    await _run(journal_store, journal=False)
    key = checkpoint_key(RUN)
    assert await journal_store.journal_version(key) is None
    entry = await journal_store.get(key)
    assert entry is not None and entry.value.startswith('{"version":')


async def test_a_store_without_journals_keeps_snapshots(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "s.json")
    await _run(store)
    entry = await store.get(checkpoint_key(RUN))
    assert entry is not None and entry.value.startswith('{"version":')


async def test_a_resumed_snapshot_run_keeps_its_layout() -> None:
    store = InMemoryStore()
    # parked at turn 3 in the snapshot layout (as an older oma, or a TypeScript reader, left it)
    await run_long(store, StopsAt(5, stop=3), journal=False)
    key = checkpoint_key("history-run")
    assert await store.get(key) is not None
    await run_long(store, StopsAt(5, stop=None), restore=True)  # asking for the journal
    assert await store.journal_version(key) is None
    loaded = await Checkpoint(store, run_id="history-run").load_latest()
    assert isinstance(loaded, CheckpointSnapshotV4) and not loaded.in_flight_tasks

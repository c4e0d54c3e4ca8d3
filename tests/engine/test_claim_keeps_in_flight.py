"""Saves made before a resumed task re-enters its runner (the fencing claim, saves by other
tasks) keep that task's in-flight state: a kill right then must not lose committed results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from oma.checkpoint import Checkpoint, CheckpointSnapshotV4
from oma.llm.scripted import ScriptedAdapter
from oma.orchestrator import CheckpointOptions, OpenMultiAgent
from oma.store import FileStore
from oma.team import AgentConfig, Team
from tests.engine.crashing import SimulatedCrash
from tests.engine.helpers import ToolLog, commit_effect_tool, copy_store_file

SCRIPT = {
    "# Task: second": [
        {
            "tool_calls": [
                {"id": "tu-b-p", "name": "commit_effect", "input": {"label": "P"}},
                {"id": "tu-b-q", "name": "commit_effect", "input": {"label": "Q"}},
            ]
        },
        {"text": "second done"},
    ],
}


class DiesAfterWrites(FileStore):
    """Dies (like a SIGKILL) instead of its write number ``die_at``."""

    def __init__(self, path: Path, die_at: int) -> None:
        super().__init__(path)
        self.die_at, self.writes = die_at, 0

    def _count(self) -> None:
        self.writes += 1
        if self.writes == self.die_at:
            raise SimulatedCrash(f"killed before write {self.writes}")

    async def set(self, key: str, value: str, metadata: dict[str, Any] | None = None) -> None:
        self._count()
        await super().set(key, value, metadata)

    async def compare_and_set(
        self, key: str, expected: str | None, value: str, metadata: dict[str, Any] | None = None
    ) -> bool:
        self._count()
        return await super().compare_and_set(key, expected, value, metadata)


async def _restore(path: Path, die_at: int, log: ToolLog) -> None:
    store = DiesAfterWrites(path, die_at)
    worker = AgentConfig(
        name="worker", adapter=ScriptedAdapter(SCRIPT), tools=[commit_effect_tool(log)]
    )
    team = Team(name="conf-b", agents=[worker], shared_memory_store=store)
    await OpenMultiAgent().restore(
        team, checkpoint=CheckpointOptions(store=store, run_id="conf-b", fence=True)
    )


async def test_a_kill_right_after_the_claim_loses_no_committed_result(tmp_path: Path) -> None:
    path = copy_store_file("b-crash-moment.store.json", tmp_path)
    log = ToolLog()
    with pytest.raises(SimulatedCrash):
        await _restore(path, die_at=2, log=log)  # write 1 is the claim
    snapshot = await Checkpoint(FileStore(path), run_id="conf-b").load_latest()
    assert isinstance(snapshot, CheckpointSnapshotV4) and snapshot.identity.attempt == 2
    (state,) = snapshot.in_flight_tasks
    assert [(p.call.id, p.commit is not None) for p in state.pending_tool_calls or []] == [
        ("tu-b-p", True),
        ("tu-b-q", False),
    ]
    assert snapshot.queue.in_progress == [state.task_id]

    await _restore(path, die_at=0, log=log)  # attempt 3 finishes the run
    # Write 2 was Q's commit: Q ran in attempt 2 and, uncommitted, again in attempt 3. P, committed
    # by the TypeScript run before either attempt, never ran again.
    assert [call_id for call_id, _, _ in log.calls] == ["tu-b-q", "tu-b-q"]
    final = await Checkpoint(FileStore(path), run_id="conf-b").load_latest()
    assert isinstance(final, CheckpointSnapshotV4) and final.in_flight_tasks == []
    assert len(final.queue.completed) == 2

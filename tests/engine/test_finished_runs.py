"""When ``oma run`` judges a run over from its checkpoint (``oma.local_run.finished``): only a
task list or plan with every task done or skipped and nothing waiting for a person."""

from __future__ import annotations

from oma.checkpoint import Checkpoint, CheckpointSnapshotV4
from oma.llm.scripted import ScriptedAdapter
from oma.local_run import finished
from oma.orchestrator import CheckpointOptions, OpenMultiAgent
from oma.store import InMemoryStore
from oma.team import AgentConfig, Team


async def _finished_snapshot() -> CheckpointSnapshotV4:
    store = InMemoryStore()
    team = Team(name="f", agents=[AgentConfig(name="a", adapter=ScriptedAdapter([{"text": "x"}]))])
    result = await OpenMultiAgent().run_tasks(
        team,
        [{"title": "One", "description": "Do one."}],
        checkpoint=CheckpointOptions(store=store, run_id="f"),
    )
    assert result.success
    snapshot = await Checkpoint(store, run_id="f").load_latest()
    assert isinstance(snapshot, CheckpointSnapshotV4)
    return snapshot


async def test_a_run_with_every_task_completed_is_over() -> None:
    snapshot = await _finished_snapshot()
    assert finished(snapshot) == "completed 1 of 1 tasks"


async def test_work_left_or_a_pending_approval_or_a_team_run_is_not_over() -> None:
    snapshot = await _finished_snapshot()
    task = snapshot.queue.tasks[0].id
    for left in ("pending", "in_progress", "blocked"):
        queue = snapshot.queue.model_copy(update={left: [task], "completed": []})
        assert finished(snapshot.model_copy(update={"queue": queue})) is None, left
    empty = snapshot.queue.model_copy(update={"tasks": [], "completed": []})
    assert finished(snapshot.model_copy(update={"queue": empty})) is None  # nothing planned yet
    assert finished(snapshot.model_copy(update={"mode": "runTeam"})) is None


async def test_a_run_with_a_failed_task_is_not_over() -> None:
    """Running it again reports the failure (and its exit code), not "already complete"."""
    snapshot = await _finished_snapshot()
    task = snapshot.queue.tasks[0].id
    queue = snapshot.queue.model_copy(update={"failed": [task], "completed": []})
    assert finished(snapshot.model_copy(update={"queue": queue})) is None

"""Drain (SIGTERM): stop admitting work, stop each task at its next durable boundary, flush."""

from __future__ import annotations

import asyncio
from typing import Any

from oma.checkpoint import Checkpoint, CheckpointSnapshotV4
from oma.llm.scripted import ScriptedAdapter
from oma.orchestrator import CheckpointOptions, OpenMultiAgent
from oma.store import InMemoryStore
from oma.team import AgentConfig, Team
from tests.engine.helpers import ToolLog, commit_effect_tool

SCRIPT: list[dict[str, Any]] = [
    {"tool_calls": [{"id": "c1", "name": "commit_effect", "input": {"label": "one"}}]},
    {
        "tool_calls": [{"id": "c2", "name": "commit_effect", "input": {"label": "two"}}],
        "delay": 0.3,
    },
    {"text": "done"},
]
TASKS: list[dict[str, Any]] = [
    {"title": "A", "description": "a"},
    {"title": "B", "description": "b", "dependsOn": ["A"]},
]


def _team(log: ToolLog) -> Team:
    model = ScriptedAdapter({"# Task: A": SCRIPT, "# Task: B": [{"text": "b done"}]})
    return Team(
        name="d", agents=[AgentConfig(name="w", adapter=model, tools=[commit_effect_tool(log)])]
    )


async def _first_commit(store: InMemoryStore) -> None:
    """Wait (bounded) until c1's commit is in the checkpoint."""
    for _ in range(500):
        entry = await store.get("__oma_checkpoint__/drain/latest")
        if entry is not None and '"tool_use_id":"c1"' in entry.value:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("c1 was never committed")


async def test_drain_stops_at_the_next_boundary_and_resume_finishes() -> None:
    store, log, drain = InMemoryStore(), ToolLog(), asyncio.Event()
    options = CheckpointOptions(journal=False, store=store, run_id="drain", fence=True)
    run = asyncio.create_task(
        OpenMultiAgent(drain=drain).run_tasks(_team(log), TASKS, checkpoint=options)
    )
    await _first_commit(store)
    drain.set()  # arrives while the slow second model call is in flight
    result = await run
    assert result.status.code == "cancelled"
    assert [t.status for t in result.tasks] == ["in_progress", "blocked"]
    assert log.ids() == ["c1"]  # c2 was returned by the model but not started
    saved = await Checkpoint(store, run_id="drain").load_latest()
    assert isinstance(saved, CheckpointSnapshotV4)
    (state,) = saved.in_flight_tasks
    assert state.phase == "executing_tools" and state.turns == 2
    resumed = await OpenMultiAgent().restore(_team(log), checkpoint=options)
    assert resumed.success and log.ids() == ["c1", "c2"]
    assert [t.result for t in resumed.tasks] == ["done", "b done"]

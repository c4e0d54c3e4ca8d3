"""Every checkpoint a run writes is one it can restore, even when tasks run side by side over a
store whose reads yield to the event loop (Redis, Postgres): a task that starts or ends while
a save lists shared memory is wholly in that snapshot or wholly out of it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from oma.checkpoint import CheckpointSnapshotV4
from oma.checkpoint.manager import decode_snapshot
from oma.llm.scripted import ScriptedAdapter
from oma.orchestrator import CheckpointOptions, OpenMultiAgent
from oma.store import InMemoryStore
from oma.store.base import Entries
from oma.team import AgentConfig, Team
from tests.engine.helpers import ToolLog, commit_effect_tool


class NetworkLikeStore(InMemoryStore):
    """Lists like a remote store (several trips through the event loop) and keeps every
    checkpoint written, as a crash right after that write would leave it."""

    def __init__(self) -> None:
        super().__init__()
        self.checkpoints: list[str] = []

    async def list(self) -> Entries:
        for _ in range(5):
            await asyncio.sleep(0)
        return await super().list()

    async def set(self, key: str, value: str, metadata: dict[str, Any] | None = None) -> None:
        await super().set(key, value, metadata)
        if key.endswith("/latest"):
            self.checkpoints.append(value)

    async def compare_and_set(
        self, key: str, expected: str | None, value: str, metadata: dict[str, Any] | None = None
    ) -> bool:
        written = await super().compare_and_set(key, expected, value, metadata)
        if written and key.endswith("/latest"):
            self.checkpoints.append(value)
        return written


def _agent(name: str, calls: int, log: ToolLog) -> AgentConfig:
    steps: list[dict[str, Any]] = [
        {"tool_calls": [{"id": f"{name}-{i}", "name": "commit_effect", "input": {"label": name}}]}
        for i in range(calls)
    ]
    script = {f"# Task: {name}": [*steps, {"text": f"{name} done"}]}
    return AgentConfig(name=name, adapter=ScriptedAdapter(script), tools=[commit_effect_tool(log)])


@pytest.mark.parametrize("fence", [False, True])
async def test_every_checkpoint_of_parallel_tasks_is_restorable(fence: bool) -> None:
    # Shared memory in a store of its own is embedded in every snapshot: each save lists it.
    store, memory, log = NetworkLikeStore(), NetworkLikeStore(), ToolLog()
    # Two equal tasks end in adjacent steps of the loop: the second one's save reads the queue
    # just before the third task starts, and that task reaches its first boundary meanwhile.
    names = ["left", "right", "after"]
    team = Team(
        name="parallel",
        agents=[_agent("left", 1, log), _agent("right", 1, log), _agent("after", 2, log)],
        shared_memory_store=memory,
    )
    tasks: list[dict[str, Any]] = [
        {"title": "left", "description": "q", "assignee": "left"},
        {"title": "right", "description": "s", "assignee": "right"},
        {"title": "after", "description": "l", "assignee": "after", "dependsOn": ["left", "right"]},
    ]
    result = await OpenMultiAgent(max_concurrency=2).run_tasks(
        team,
        tasks,
        checkpoint=CheckpointOptions(journal=False, store=store, run_id="parallel", fence=fence),
    )
    assert result.success, result
    assert sorted({str(args["label"]) for _, _, args in log.calls}) == sorted(names)
    assert len(store.checkpoints) > 10
    for number, text in enumerate(store.checkpoints, 1):
        snapshot = decode_snapshot(text, "parallel/latest")
        assert isinstance(snapshot, CheckpointSnapshotV4)
        running = set(snapshot.queue.in_progress)
        statuses = {task.id: task.status for task in snapshot.queue.tasks}
        for state in snapshot.in_flight_tasks:
            assert state.task_id in running, (number, statuses[state.task_id])
            assert statuses[state.task_id] == "in_progress", number

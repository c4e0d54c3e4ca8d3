"""A run keeps each completed task's result by the task's id: a restored result is found also
when the assignee recorded beside it is not the queue's (a hand-edited or retargeted checkpoint),
where a key of assignee and task id would lose it."""

from __future__ import annotations

import json
from typing import Any

from oma.checkpoint import Checkpoint
from oma.llm.scripted import ScriptedAdapter
from oma.orchestrator import CheckpointOptions, OpenMultiAgent
from oma.store import InMemoryStore
from oma.team import AgentConfig, Team

TASKS: list[dict[str, Any]] = [
    {"title": "A", "description": "first", "assignee": "a"},
    {"title": "B", "description": "second", "assignee": "b"},
]


def _team() -> Team:
    agents = [
        AgentConfig(name=name, adapter=ScriptedAdapter([{"text": answer}]))
        for name, answer in (("a", "first answer"), ("b", "second answer"))
    ]
    return Team(name="t", agents=agents)


async def test_a_restored_result_is_found_by_its_task_id() -> None:
    store = InMemoryStore()
    options = CheckpointOptions(journal=False, store=store, run_id="ids")
    done = await OpenMultiAgent(max_concurrency=1).run_tasks(_team(), TASKS, checkpoint=options)
    assert done.success
    key = Checkpoint(store, run_id="ids").key
    entry = await store.get(key)
    assert entry is not None
    snapshot = json.loads(entry.value)
    for completed in snapshot["completedTaskResults"]:
        completed["assignee"] = "someone-before"  # not the queue's assignee any more
    await store.set(key, json.dumps(snapshot), entry.metadata)

    restored = await OpenMultiAgent().restore(_team(), checkpoint=options)
    assert restored.success
    outputs = {task_id: r.output for task_id, r in restored.task_results.items()}
    assert outputs == {task_id: r.output for task_id, r in done.task_results.items()}
    assert sorted(outputs.values()) == ["first answer", "second answer"]
    assert set(restored.agent_results) == {"a", "b"}

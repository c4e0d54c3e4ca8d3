"""A completed task's result holding data that is not JSON (a caller put an object in
``structured``; the reference's case is a BigInt) does not fail the save: the checkpoint omits
that one result ("durability wins", seed-checkpoint.md), keeps every other one, and a restore
rebuilds the minimal result of the task from its output."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from oma.agent.result import AgentRunResult
from oma.checkpoint import Checkpoint
from oma.llm.scripted import ScriptedAdapter
from oma.orchestrator import CheckpointOptions, OpenMultiAgent
from oma.orchestrator import task_runner as task_runner_module
from oma.orchestrator.events import OrchestratorEvent
from oma.store import InMemoryStore
from oma.team import AgentConfig, Team

TASKS: list[dict[str, Any]] = [
    {"title": "A", "description": "first", "assignee": "a"},
    {"title": "B", "description": "second", "assignee": "b", "dependsOn": ["A"]},
]


class _Handle:
    """Something a caller may keep in a result that has no JSON form (a file, a client)."""


def _team() -> Team:
    agents = [
        AgentConfig(name=name.lower(), adapter=ScriptedAdapter([{"text": f"output of {name}"}]))
        for name in "AB"
    ]
    return Team(name="t", agents=agents)


async def test_a_result_that_is_not_json_is_left_out_and_the_run_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = task_runner_module._result

    def with_caller_data(*args: Any) -> AgentRunResult:
        result = original(*args)
        if result.output == "output of A":
            result.structured = {"handle": _Handle()}  # no JSON for it
        return result

    monkeypatch.setattr(task_runner_module, "_result", with_caller_data)
    store, events = InMemoryStore(), list[OrchestratorEvent]()
    result = await OpenMultiAgent(on_progress=events.append).run_tasks(
        _team(),
        TASKS,
        checkpoint=CheckpointOptions(journal=False, store=store, run_id="dw"),
    )
    assert result.success, result.status
    failures = [e for e in events if e.type == "error"]
    assert failures == []  # no checkpoint_save_failed: every save landed

    entry = await store.get(Checkpoint(store, run_id="dw").key)
    assert entry is not None
    saved = {c["taskId"]: c for c in json.loads(entry.value)["completedTaskResults"]}
    a, b = (task.id for task in result.tasks)
    assert "agentResult" not in saved[a] and saved[a]["result"] == "output of A"
    assert saved[b]["agentResult"]["output"] == "output of B"

    monkeypatch.setattr(task_runner_module, "_result", original)
    restored = await OpenMultiAgent().restore(
        _team(), checkpoint=CheckpointOptions(journal=False, store=store, run_id="dw")
    )
    assert restored.success
    assert restored.task_results[a].output == "output of A"
    assert restored.task_results[a].structured is None  # the minimal result
    assert restored.task_results[b].output == "output of B"


async def test_data_json_can_hold_is_written_as_json_would_hold_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A datetime and an integer key in ``structured``: kept, written as the snapshot model
    writes them (the incremental encoder and the model path agree)."""
    original = task_runner_module._result

    def with_caller_data(*args: Any) -> AgentRunResult:
        result = original(*args)
        result.structured = {"when": datetime(2026, 12, 4, tzinfo=UTC), 1: 2}
        return result

    monkeypatch.setattr(task_runner_module, "_result", with_caller_data)
    store = InMemoryStore()
    result = await OpenMultiAgent().run_tasks(
        _team(), TASKS, checkpoint=CheckpointOptions(journal=False, store=store, run_id="dt")
    )
    assert result.success
    entry = await store.get(Checkpoint(store, run_id="dt").key)
    assert entry is not None
    for completed in json.loads(entry.value)["completedTaskResults"]:
        assert completed["agentResult"]["structured"] == {"when": "2026-12-04T00:00:00Z", "1": 2}

"""run_team, run_from_plan, retries, the concurrency limit and progress events."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from oma.checkpoint import Checkpoint, CheckpointSnapshotV4
from oma.llm import ChatRequest, ChatResponse, LLMError, TextBlock
from oma.llm.scripted import ScriptedAdapter
from oma.orchestrator import CheckpointOptions, OpenMultiAgent
from oma.orchestrator.coordinator import CoordinatorError
from oma.store import InMemoryStore
from oma.team import AgentConfig, Team
from tests.engine.helpers import Events

PLAN = [
    {"title": "Research", "description": "Find facts.", "assignee": "alice"},
    {"title": "Write", "description": "Write it up.", "assignee": "bob", "dependsOn": ["Research"]},
]


async def test_run_team_decomposes_runs_and_synthesizes() -> None:
    lead = ScriptedAdapter(
        {
            "# Goal decomposition": [{"text": "Here is the plan:\n" + json.dumps(PLAN)}],
            "## Original Goal": [{"text": "FINAL"}],
        }
    )
    alice = ScriptedAdapter([{"text": "facts"}])
    bob = ScriptedAdapter([{"text": "article"}])
    team = Team(
        name="t",
        agents=[AgentConfig(name="alice", adapter=alice), AgentConfig(name="bob", adapter=bob)],
    )
    store = InMemoryStore()
    result = await OpenMultiAgent().run_team(
        team,
        "Explain checkpoints",
        coordinator=AgentConfig(name="coordinator", adapter=lead),
        checkpoint=CheckpointOptions(store=store, run_id="team-1"),
    )
    assert result.success and result.agent_results["coordinator"].output == "FINAL"
    assert [t.result for t in result.tasks] == ["facts", "article"]
    write_prompt = bob.calls[0].messages[0].text
    assert write_prompt == (
        "# Task: Write\n\nWrite it up.\n\n## Context from prerequisite tasks"
        "\n\n### Research (by alice)\nfacts"
    )
    assert "Goal: Explain checkpoints" in lead.calls[0].messages[0].text
    assert "### Write (completed by bob)\narticle" in lead.calls[1].messages[0].text
    saved = await Checkpoint(store, run_id="team-1").load_latest()
    assert isinstance(saved, CheckpointSnapshotV4)
    assert saved.mode == "runTeam" and saved.goal == "Explain checkpoints"


async def test_run_team_with_an_unusable_plan_fails_clearly() -> None:
    lead = ScriptedAdapter([{"text": "I would rather not plan."}])
    team = Team(name="t", agents=[AgentConfig(name="alice", adapter=ScriptedAdapter([]))])
    with pytest.raises(CoordinatorError, match="no JSON task array") as caught:
        await OpenMultiAgent().run_team(
            team, "goal", coordinator=AgentConfig(name="c", adapter=lead)
        )
    assert caught.value.code == "COORDINATOR_ERROR"


async def test_run_from_plan_keeps_ids_and_records_the_mode() -> None:
    model = ScriptedAdapter([{"text": "done"}])
    team = Team(name="t", agents=[AgentConfig(name="w", adapter=model)])
    store = InMemoryStore()
    plan = {
        "version": 1,
        "goal": "g",
        "tasks": [
            {"id": "p1", "title": "One", "description": "1", "assignee": "w"},
            {"id": "p2", "title": "Two", "description": "2", "assignee": "w", "dependsOn": ["p1"]},
        ],
    }
    result = await OpenMultiAgent().run_from_plan(
        team, plan, checkpoint=CheckpointOptions(store=store, run_id="plan-1")
    )
    assert result.success and [t.id for t in result.tasks] == ["p1", "p2"]
    saved = await Checkpoint(store, run_id="plan-1").load_latest()
    assert saved is not None and saved.mode == "runFromPlan" and saved.goal == "g"


class FlakyAdapter:
    name = "flaky"

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    async def chat(self, request: ChatRequest) -> ChatResponse:
        self.calls += 1
        if self.calls <= self.failures:
            raise LLMError("provider overloaded (HTTP 529)")
        return ChatResponse(content=[TextBlock(text="ok at last")])


async def test_failed_task_is_retried_with_backoff_then_fails_for_good() -> None:
    events = Events()
    flaky = FlakyAdapter(failures=2)
    team = Team(name="t", agents=[AgentConfig(name="w", adapter=flaky)])
    task = {"title": "T", "description": "d", "maxRetries": 2, "retryDelayMs": 1}
    result = await OpenMultiAgent(on_progress=events).run_tasks(team, [task])
    assert result.success and flaky.calls == 3
    retries = [e.data for e in events.items if e.type == "task_retry"]
    assert [r["attempt"] for r in retries] == [2, 3] and retries[0]["maxAttempts"] == 3
    hopeless = FlakyAdapter(failures=10)
    team = Team(name="t", agents=[AgentConfig(name="w", adapter=hopeless)])
    dependent = {"title": "After", "description": "", "dependsOn": ["T"]}
    failed = await OpenMultiAgent().run_tasks(team, [{**task, "maxRetries": 1}, dependent])
    assert not failed.success and failed.status.code == "error" and hopeless.calls == 2
    assert [t.status for t in failed.tasks] == ["failed", "failed"]
    assert "529" in (failed.tasks[0].result or "")


class GaugeAdapter:
    name = "gauge"

    def __init__(self) -> None:
        self.active = 0
        self.peak = 0

    async def chat(self, request: ChatRequest) -> ChatResponse:
        self.active += 1
        self.peak = max(self.peak, self.active)
        await asyncio.sleep(0.02)
        self.active -= 1
        return ChatResponse(content=[TextBlock(text="done")])


async def test_concurrency_limit_and_assignment_of_unassigned_tasks() -> None:
    gauge = GaugeAdapter()
    team = Team(
        name="t",
        agents=[AgentConfig(name="a", adapter=gauge), AgentConfig(name="b", adapter=gauge)],
    )
    tasks: list[dict[str, Any]] = [{"title": f"T{i}", "description": ""} for i in range(6)]
    result = await OpenMultiAgent(max_concurrency=2).run_tasks(team, tasks)
    assert result.success and gauge.peak == 2
    assert {t.assignee for t in result.tasks} == {"a", "b"}


async def test_progress_events_in_order_for_one_task() -> None:
    events = Events()
    team = Team(name="t", agents=[AgentConfig(name="w", adapter=ScriptedAdapter([{"text": "x"}]))])
    await OpenMultiAgent(on_progress=events).run_tasks(team, [{"title": "T", "description": ""}])
    assert [e.type for e in events.items] == [
        "task_start",
        "agent_start",
        "model_call",
        "task_complete",
        "agent_complete",
    ]
    call = events.items[2]
    assert (call.agent, call.data["provider"], call.data["error"]) == ("w", "scripted", None)

"""Without checkpointing a run does no checkpoint work: no in-flight record is built at any
boundary (building one copies the whole conversation, so a long run would be quadratic)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from oma.agent.state import RunnerState
from oma.checkpoint.runner_state import InFlightTask
from oma.llm.scripted import ScriptedAdapter
from oma.orchestrator import CheckpointOptions, OpenMultiAgent
from oma.store import InMemoryStore
from oma.team import AgentConfig, Team
from oma.tools import ToolContext, define_tool

TURNS = 30


class NoteInput(BaseModel):
    note: str


def _long_run() -> tuple[Team, list[dict[str, str]]]:
    async def note(args: NoteInput, ctx: ToolContext) -> str:
        return f"noted {args.note}"

    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": f"c{i}", "name": "note", "input": {"note": f"finding {i}"}}]}
        for i in range(TURNS - 1)
    ] + [{"text": "done"}]
    agent = AgentConfig(
        name="w",
        adapter=ScriptedAdapter(script),
        max_turns=TURNS + 1,
        tools=[define_tool("note", "Note.", NoteInput, note)],
    )
    return Team(name="t", agents=[agent]), [{"title": "Long", "description": "Many turns."}]


@pytest.fixture
def records_built(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many messages each in-flight record built in the run held."""
    built: list[int] = []
    original = RunnerState.to_checkpoint

    def counted(self: RunnerState, task_id: str, assignee: str) -> InFlightTask:
        built.append(len(self.conversation))
        return original(self, task_id, assignee)

    monkeypatch.setattr(RunnerState, "to_checkpoint", counted)
    return built


@pytest.mark.parametrize("off", [False, {"enabled": False}], ids=["False", "enabled=False"])
async def test_a_run_without_checkpointing_builds_no_in_flight_record(
    records_built: list[int], off: Any
) -> None:
    team, tasks = _long_run()
    checkpoint = off if off is False else CheckpointOptions(store=InMemoryStore(), enabled=False)
    result = await OpenMultiAgent().run_tasks(team, tasks, checkpoint=checkpoint)
    assert result.success, result.status
    assert result.tasks[0].result == "done"
    assert records_built == []


async def test_with_checkpointing_every_boundary_builds_one(records_built: list[int]) -> None:
    team, tasks = _long_run()
    store = InMemoryStore()
    options = CheckpointOptions(store=store, run_id="long")
    result = await OpenMultiAgent().run_tasks(team, tasks, checkpoint=options)
    assert result.success, result.status
    assert len(records_built) >= TURNS  # at least one per model turn
    assert records_built[-1] > TURNS  # the whole conversation, tool results and all

"""``on_progress`` may be async: every event is delivered, in order, before the run returns."""

from __future__ import annotations

import asyncio

import pytest

from oma.llm.scripted import ScriptedAdapter
from oma.orchestrator import OpenMultiAgent, OrchestratorEvent
from oma.team import AgentConfig, Team

TASKS = [{"title": f"T{n}", "description": "d"} for n in range(3)]


def _team() -> Team:
    script = [{"text": f"done {n}"} for n in range(3)]
    return Team(name="t", agents=[AgentConfig(name="a", adapter=ScriptedAdapter(script))])


async def test_an_async_callback_gets_every_event_in_order_before_the_run_returns() -> None:
    seen: list[str] = []
    synchronous: list[str] = []

    async def slow(event: OrchestratorEvent) -> None:
        await asyncio.sleep(0.01)  # slower than the run: deliveries queue up
        seen.append(f"{event.type}:{event.task}")

    def plain(event: OrchestratorEvent) -> None:
        synchronous.append(f"{event.type}:{event.task}")

    result = await OpenMultiAgent(on_progress=slow).run_tasks(_team(), TASKS)
    assert result.success
    again = await OpenMultiAgent(on_progress=plain).run_tasks(_team(), TASKS)
    assert again.success
    assert [e.split(":")[0] for e in seen] == [e.split(":")[0] for e in synchronous]
    assert sum(e.startswith("task_complete") for e in seen) == 3


async def test_an_error_in_an_async_callback_is_raised_when_the_run_ends() -> None:
    delivered: list[str] = []

    async def failing(event: OrchestratorEvent) -> None:
        delivered.append(event.type)
        if event.type == "task_start":
            raise RuntimeError("the dashboard is down")

    with pytest.raises(RuntimeError, match="the dashboard is down"):
        await OpenMultiAgent(on_progress=failing).run_tasks(_team(), TASKS)
    assert delivered.count("task_complete") == 3  # later events were still delivered

"""A turn's tool calls run concurrently; when one ends the attempt (its outcome unknown: a
server lost mid-call), the others are cancelled, not left running tools after the attempt is
over, and the error that ended it is the one raised."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import BaseModel

from oma import AgentConfig, OpenMultiAgent, ScriptedAdapter, Team
from oma.errors import AttemptInterruptedError
from oma.tools import ToolContext, define_tool


class Nothing(BaseModel):
    pass


async def test_a_call_that_ends_the_attempt_cancels_its_siblings() -> None:
    started, effects, cancelled = asyncio.Event(), [], []

    async def slow(_: Nothing, ctx: ToolContext) -> str:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append(ctx.tool_call_id)
            raise
        effects.append(ctx.tool_call_id)  # never: the attempt ended
        return "done"

    async def lost(_: Nothing, ctx: ToolContext) -> str:
        await started.wait()
        raise AttemptInterruptedError("the tool's server went away mid-call")

    script = [
        {
            "tool_calls": [
                {"id": "s1", "name": "slow", "input": {}},
                {"id": "l1", "name": "lost", "input": {}},
                {"id": "s2", "name": "slow", "input": {}},
            ]
        },
        {"text": "never"},
    ]
    tools = [
        define_tool("slow", "Slow.", Nothing, slow),
        define_tool("lost", "Lost.", Nothing, lost),
    ]
    agent = AgentConfig(name="w", adapter=ScriptedAdapter(script), tools=tools)
    team = Team(name="t", agents=[agent])
    with pytest.raises(AttemptInterruptedError, match="went away"):
        await asyncio.wait_for(
            OpenMultiAgent().run_tasks(team, [{"title": "A", "description": "a"}]), 10
        )
    assert sorted(cancelled) == ["s1", "s2"] and effects == []


async def test_a_call_cancelled_by_its_own_tool_ends_the_turn_uncommitted() -> None:
    async def gives_up(_: Nothing, ctx: ToolContext) -> str:
        raise asyncio.CancelledError

    async def fine(_: Nothing, ctx: ToolContext) -> str:
        return "ok"

    script = [
        {
            "tool_calls": [
                {"id": "g1", "name": "gives_up", "input": {}},
                {"id": "f1", "name": "fine", "input": {}},
            ]
        },
        {"text": "never"},
    ]
    tools = [
        define_tool("gives_up", "Gives up.", Nothing, gives_up),
        define_tool("fine", "Fine.", Nothing, fine),
    ]
    agent = AgentConfig(name="w", adapter=ScriptedAdapter(script), tools=tools)
    team = Team(name="t", agents=[agent])
    with pytest.raises(asyncio.CancelledError):
        await OpenMultiAgent().run_tasks(team, [{"title": "A", "description": "a"}])

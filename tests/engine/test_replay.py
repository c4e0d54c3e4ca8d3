"""Replaying a recorded run: the same spec reproduces it, a changed prompt is named where it
first shows, and nothing is reached (the spec's model points at a port nobody listens on).

The recorded run is a real one (its model a scripted turn-by-turn stand-in, its tool counting
its executions), resumed once after a provider outage, kept in a Redis history."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import BaseModel

from oma.checkpoint.fork import fork_run
from oma.checkpoint.keys import checkpoint_key
from oma.errors import ModelUnavailableError
from oma.llm.types import ChatRequest, ChatResponse
from oma.orchestrator import CheckpointOptions, OpenMultiAgent
from oma.replay import ReplayError, replay_run
from oma.spec import RunSpec
from oma.store.redis import RedisStore
from oma.team import AgentConfig, Team
from oma.tools import ToolContext, define_tool
from tests.servers.redis_server import RedisServer
from tests.stores.conftest import unique_name

RUN = "recorded"
CALLS = 12
DESCRIPTION = "Add the numbers one by one."


class AddInput(BaseModel):
    amount: int


def _add_tool(executed: list[int]) -> Any:
    async def add(args: AddInput, ctx: ToolContext) -> str:
        executed.append(args.amount)
        return f"added {args.amount}, total {sum(executed)}"

    return define_tool("add", "Add an amount.", AddInput, add)


class Live:
    """The recorded run's model: a tool call a turn, with varying usage; down at ``outage``."""

    name = "live"

    def __init__(self, outage: int | None) -> None:
        self.outage, self.calls = outage, 0

    async def chat(self, request: ChatRequest) -> ChatResponse:
        self.calls += 1
        if self.outage is not None and self.calls == self.outage:
            raise ModelUnavailableError("the provider is down")
        turn = sum(1 for m in request.messages if m.role == "assistant")
        usage = {"input_tokens": 100 + 7 * turn, "output_tokens": 10 + turn}
        if turn >= CALLS:
            content: list[dict[str, Any]] = [{"type": "text", "text": "all added"}]
            return ChatResponse.model_validate({"content": content, "usage": usage})
        use = {"type": "tool_use", "id": f"t{turn}", "name": "add", "input": {"amount": turn}}
        return ChatResponse.model_validate({"content": [use], "usage": usage})


@pytest.fixture
async def store(request: pytest.FixtureRequest) -> AsyncIterator[RedisStore]:
    server: RedisServer = request.getfixturevalue("redis_server")
    made = RedisStore(server.url, namespace=unique_name("replay"))
    try:
        yield made
    finally:
        await made.clear()
        await made.aclose()


async def _record(store: RedisStore, executed: list[int]) -> None:
    options = CheckpointOptions(store=store, run_id=RUN, fence=True, journal=True)
    tasks = [{"title": "Sum", "description": DESCRIPTION, "assignee": "adder"}]

    def team(model: Live) -> Team:
        agent = AgentConfig(name="adder", adapter=model, max_turns=50, tools=[_add_tool(executed)])
        return Team(name=RUN, agents=[agent])

    with contextlib.suppress(ModelUnavailableError):
        await OpenMultiAgent(park_on_model_outage=True).run_tasks(
            team(Live(outage=6)), tasks, checkpoint=options
        )
    done = await OpenMultiAgent().restore(team(Live(outage=None)), checkpoint=options)
    assert done.success and len(executed) == CALLS


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spec(description: str = DESCRIPTION) -> RunSpec:
    # Anthropic on a port nobody listens on: a replay that reached the model would fail.
    model = {"provider": "anthropic", "name": "m", "baseURL": f"http://127.0.0.1:{_dead_port()}"}
    return RunSpec.model_validate(
        {
            "agents": [{"name": "adder", "tools": ["add"], "maxTurns": 50, "model": model}],
            "tasks": [{"title": "Sum", "description": description, "assignee": "adder"}],
        }
    )


async def test_the_same_spec_reproduces_the_recorded_run_without_reaching_anything(
    store: RedisStore,
) -> None:
    executed: list[int] = []
    await _record(store, executed)
    before = await store.journal_get("__oma_checkpoint__/recorded/latest", history=True)
    replayed: list[int] = []
    report = await replay_run(_spec(), store, RUN, tools={"add": _add_tool(replayed)})
    assert report.reproduces, report.divergence
    assert replayed == []  # tools answered from their commits
    assert report.boundaries == report.replayed >= 3 * CALLS
    after = await store.journal_get("__oma_checkpoint__/recorded/latest", history=True)
    assert after == before  # the recording is read, never written


async def test_a_one_word_change_to_a_prompt_is_named_at_the_first_boundary_it_changes(
    store: RedisStore,
) -> None:
    await _record(store, [])
    changed = DESCRIPTION.replace("one by one", "two by two")
    report = await replay_run(_spec(changed), store, RUN, tools={"add": _add_tool([])})
    assert not report.reproduces and report.divergence is not None
    assert report.divergence.seq == 1
    assert report.divergence.path == "/queue/tasks/0/description"
    assert (report.divergence.recorded, report.divergence.replayed) == (DESCRIPTION, changed)


async def test_a_changed_tool_answer_is_named_where_the_run_first_differs(
    store: RedisStore,
) -> None:
    await _record(store, [])
    spec = _spec()
    spec.agents[0].max_turns = 5  # the current code stops the task earlier than it did
    report = await replay_run(spec, store, RUN, tools={"add": _add_tool([])})
    assert report.divergence is not None and report.divergence.seq > 10
    assert report.divergence.path.startswith(("/inFlightTasks", "/queue", "/completedTaskResults"))


async def test_what_a_replay_refuses(store: RedisStore) -> None:
    with pytest.raises(ReplayError, match='no checkpoint for run "ghost"'):
        await replay_run(_spec(), store, "ghost")
    team = RunSpec.model_validate(
        {**_spec().model_dump(by_alias=True), "mode": "team", "tasks": None, "goal": "g"}
    )
    with pytest.raises(ReplayError, match="mode tasks only"):
        await replay_run(team, store, RUN)


async def test_a_fork_or_a_damaged_recording_is_refused_not_crashed(store: RedisStore) -> None:
    await _record(store, [])
    await fork_run(store, RUN, 3, child="forked")
    with pytest.raises(ReplayError, match='is a fork of "recorded" at boundary 3'):
        await replay_run(_spec(), store, "forked")
    damaged = '{"version":4,"queue":{"tasks":[]},"inFlightTasks":[1]}'
    key = checkpoint_key("damaged")
    assert await store.journal_write(key, [damaged], version="v", expected=None, replace=True)
    with pytest.raises(ReplayError, match='the recording of run "damaged" is not readable'):
        await replay_run(_spec(), store, "damaged")

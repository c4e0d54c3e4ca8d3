"""A Redis or PostgreSQL restart in the middle of a run, then a crash, then a resume."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from oma.llm.scripted import ScriptedAdapter
from oma.orchestrator import CheckpointOptions, OpenMultiAgent
from oma.store import MemoryStore, PostgresStore, RedisStore
from oma.store.base import Metadata
from oma.team import AgentConfig, Team
from oma.tools import ToolContext, define_tool
from tests.engine.crashing import SimulatedCrash, call_committed
from tests.engine.helpers import Events
from tests.servers.postgres_server import PostgresServer, postgres_bin_dir
from tests.servers.redis_server import RedisServer, redis_binary

DOWN_SECONDS = 1.0
SCRIPT: list[dict[str, Any]] = [
    {"tool_calls": [{"id": "d1", "name": "disrupt", "input": {"step": "d1"}}]},
    {"tool_calls": [{"id": "a1", "name": "act", "input": {"step": "a1"}}], "delay": 1.8},
    {"text": "done"},
]


class StepInput(BaseModel):
    step: str


@pytest.fixture(params=["redis", "postgres"])
def server(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A dedicated server per test: this one gets restarted."""
    if request.param == "redis":
        binary = redis_binary()
        if binary is None:
            pytest.fail("redis-server is not installed (hack/test installs it)")
        with RedisServer(binary, persistent=True) as redis_server:
            yield redis_server
    else:
        bin_dir = postgres_bin_dir()
        if bin_dir is None:
            pytest.fail("PostgreSQL is not installed (hack/test installs it)")
        with PostgresServer(bin_dir) as pg_server:
            yield pg_server


def _open(server: Any) -> MemoryStore:
    if isinstance(server, RedisServer):
        return RedisStore(server.url, namespace="restart")
    return PostgresStore(server.dsn(), schema="restart")


class CrashBefore:
    """Delegates to a real store; raises SimulatedCrash instead of one chosen checkpoint write."""

    def __init__(self, inner: Any, predicate: Any) -> None:
        self.inner, self.predicate = inner, predicate

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def compare_and_set(
        self, key: str, expected: str | None, value: str, metadata: Metadata | None = None
    ) -> bool:
        import json

        if key.endswith("/latest") and self.predicate(json.loads(value)):
            raise SimulatedCrash("killed before this write")
        result: bool = await self.inner.compare_and_set(key, expected, value, metadata)
        return result


def _team(server: Any, executions: list[str]) -> Team:
    async def disrupt(args: StepInput, ctx: ToolContext) -> str:
        executions.append(args.step)
        server.pause()  # the store goes away right before this result is committed
        # Restarted from the main thread: the server dies with the thread that started it.
        asyncio.get_running_loop().call_later(DOWN_SECONDS, server.resume)
        return "disrupted"

    async def act(args: StepInput, ctx: ToolContext) -> str:
        executions.append(args.step)
        return "acted"

    tools = [
        define_tool("disrupt", "Disrupt.", StepInput, disrupt),
        define_tool("act", "Act.", StepInput, act),
    ]
    return Team(
        name="r", agents=[AgentConfig(name="w", adapter=ScriptedAdapter(SCRIPT), tools=tools)]
    )


@pytest.mark.timeout(120)
async def test_run_survives_a_store_restart_and_resumes_after_a_crash(server: Any) -> None:
    executions: list[str] = []
    events = Events()
    store = _open(server)
    crashing = CrashBefore(store, call_committed("a1"))
    tasks = [{"title": "Work", "description": "Work.", "assignee": "w"}]
    started = time.monotonic()
    with pytest.raises(SimulatedCrash):
        await OpenMultiAgent(on_progress=events).run_tasks(
            _team(server, executions),
            tasks,
            checkpoint=CheckpointOptions(
                journal=False, store=crashing, run_id="restart", fence=True
            ),
        )
    assert time.monotonic() - started >= DOWN_SECONDS  # the run kept going through the outage
    # Both stores retry writes that are safe to repeat through a short outage.
    assert events.kinds().count("checkpoint_save_failed") == 0
    assert executions == ["d1", "a1"]
    resumed = await OpenMultiAgent().restore(
        _team(server, executions),
        checkpoint=CheckpointOptions(journal=False, store=store, run_id="restart", fence=True),
    )
    assert resumed.success and resumed.identity.attempt == 2
    assert executions == ["d1", "a1", "a1"]  # a1 had no commit: it runs again, d1 never does
    (result,) = resumed.task_results.values()
    assert [r.tool_name for r in result.tool_calls] == ["disrupt", "act"]
    if isinstance(store, RedisStore | PostgresStore):
        await store.aclose()

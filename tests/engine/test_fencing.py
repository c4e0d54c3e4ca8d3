"""Fencing: once a newer attempt claims a run, the older one can neither save nor run tools."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from oma.checkpoint import Checkpoint, CheckpointSnapshotV4
from oma.errors import CheckpointFencedError
from oma.llm.scripted import ScriptedAdapter
from oma.orchestrator import CheckpointOptions, OpenMultiAgent
from oma.store import InMemoryStore, MemoryStore, PostgresStore, RedisStore, open_store
from oma.team import AgentConfig, Team
from oma.tools import ToolContext, define_tool
from tests.engine.helpers import NoCasStore, wait_until
from tests.servers.postgres_server import PostgresServer
from tests.servers.redis_server import RedisServer

RUN = "fenced-run"
SCRIPT: list[dict[str, Any]] = [
    {"tool_calls": [{"id": "a1", "name": "act", "input": {"step": "a1"}}]},
    {"tool_calls": [{"id": "a2", "name": "act", "input": {"step": "a2"}}], "delay": 0.4},
    {"text": "done"},
]


class StepInput(BaseModel):
    step: str


@dataclass
class Executions:
    by_attempt: list[tuple[int, str]]
    first_step_done: asyncio.Event | None = None


def _team(executions: Executions) -> Team:
    async def act(args: StepInput, ctx: ToolContext) -> str:
        executions.by_attempt.append((ctx.attempt, args.step))
        if executions.first_step_done is not None and args.step == "a1":
            executions.first_step_done.set()
        return f"did {args.step}"

    tool = define_tool("act", "Act.", StepInput, act)
    return Team(
        name="f", agents=[AgentConfig(name="w", adapter=ScriptedAdapter(SCRIPT), tools=[tool])]
    )


TASKS = [{"title": "Work", "description": "Do it.", "assignee": "w"}]


@dataclass
class Backend:
    name: str
    url: str

    def open(self) -> MemoryStore:
        return open_store(self.url)


@pytest.fixture(params=["memory", "file", "redis", "postgres"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    name = request.param
    if name == "memory":
        shared = InMemoryStore()
        yield shared
        return
    if name == "file":
        yield Backend(name, f"file://{tmp_path}/fence.json")
        return
    if name == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        yield Backend(name, server.url)
        return
    pg: PostgresServer = request.getfixturevalue("postgres_server")
    yield Backend(name, pg.dsn())


def _store(backend: Any) -> MemoryStore:
    return backend if isinstance(backend, InMemoryStore) else backend.open()


async def _close(*stores: MemoryStore) -> None:
    for store in stores:
        if isinstance(store, RedisStore | PostgresStore):
            await store.aclose()


async def test_a_superseded_attempt_stops_before_its_next_tool(backend: Any) -> None:
    run_id = f"{RUN}-{uuid.uuid4().hex[:8]}"
    first_store, second_store = _store(backend), _store(backend)
    executions = Executions([], asyncio.Event())
    options = CheckpointOptions(journal=False, store=first_store, run_id=run_id, fence=True)
    first = asyncio.create_task(
        OpenMultiAgent().run_tasks(_team(executions), TASKS, checkpoint=options)
    )
    assert executions.first_step_done is not None
    await executions.first_step_done.wait()

    async def in_its_slow_model_call() -> bool:  # a1 committed, the turn for a2 under way
        saved = await Checkpoint(first_store, run_id=run_id).load_latest()
        return isinstance(saved, CheckpointSnapshotV4) and [
            (t.phase, t.turns) for t in saved.in_flight_tasks
        ] == [("awaiting_model", 1)]

    await wait_until(in_its_slow_model_call, "attempt 1 to commit a1 and call its model")
    second = await OpenMultiAgent().restore(
        _team(executions),
        checkpoint=CheckpointOptions(journal=False, store=second_store, run_id=run_id, fence=True),
    )
    with pytest.raises(CheckpointFencedError):
        await first
    assert second.success and second.identity.attempt == 2
    assert executions.by_attempt == [(1, "a1"), (2, "a2")]  # a2 ran once, by the new attempt
    final = await Checkpoint(second_store, run_id=run_id).load_latest()
    assert isinstance(final, CheckpointSnapshotV4) and final.identity.attempt == 2
    assert final.queue.completed == [second.tasks[0].id]
    await _close(first_store, second_store)


class ClaimAfterSave(InMemoryStore):
    """Runs ``hook`` right after the write that persists the call ``a2`` (the older attempt's
    last successful save before it would run that call)."""

    def __init__(self) -> None:
        super().__init__()
        self.hook: Any = None

    async def compare_and_set(
        self, key: str, expected: str | None, value: str, metadata: Any = None
    ) -> bool:
        swapped = await super().compare_and_set(key, expected, value, metadata)
        persists_a2 = '"executing_tools"' in value and '"id":"a2"' in value
        if swapped and persists_a2 and self.hook is not None:
            hook, self.hook = self.hook, None
            await hook()
        return swapped


async def test_an_attempt_superseded_after_its_last_save_does_not_run_the_next_tool() -> None:
    """The newer attempt claims the run between the older one's save of call a2 and its
    execution: the older attempt reads the checkpoint before executing and stops there."""
    store, executions = ClaimAfterSave(), Executions([])
    run_id = f"{RUN}-{uuid.uuid4().hex[:8]}"
    newer: list[Any] = []

    async def newer_attempt_takes_over() -> None:
        options = CheckpointOptions(journal=False, store=store, run_id=run_id, fence=True)
        newer.append(await OpenMultiAgent().restore(_team(executions), checkpoint=options))

    store.hook = newer_attempt_takes_over
    options = CheckpointOptions(journal=False, store=store, run_id=run_id, fence=True)
    with pytest.raises(CheckpointFencedError):
        await OpenMultiAgent().run_tasks(_team(executions), TASKS, checkpoint=options)
    assert newer and newer[0].success and newer[0].identity.attempt == 2
    assert executions.by_attempt == [(1, "a1"), (2, "a2")]  # not (1, "a2") as well


async def test_two_fresh_runs_of_one_run_id_cannot_both_write() -> None:
    store, executions = InMemoryStore(), Executions([])
    options = CheckpointOptions(journal=False, store=store, run_id=RUN, fence=True)
    done = await OpenMultiAgent().run_tasks(_team(executions), TASKS, checkpoint=options)
    assert done.success
    with pytest.raises(CheckpointFencedError):
        await OpenMultiAgent().run_tasks(_team(executions), TASKS, checkpoint=options)


async def test_a_store_without_cas_runs_unfenced_with_a_warning() -> None:
    warnings: list[str] = []
    executions = Executions([])
    result = await OpenMultiAgent(
        on_progress=lambda e: (
            warnings.append(str(e.data.get("kind"))) if e.type == "warning" else None
        ),
    ).run_tasks(
        _team(executions),
        TASKS,
        checkpoint=CheckpointOptions(journal=False, store=NoCasStore(), run_id=RUN, fence=True),
    )
    assert result.success and warnings == ["fencing_unavailable"]


SLOW_SPEC = {
    "mode": "tasks",
    "agents": [
        {
            "name": "w",
            "tools": ["ledger_append"],
            "model": {
                "provider": "scripted",
                "script": [
                    {
                        "tool_calls": [
                            {"id": "t1", "name": "ledger_append", "input": {"entry": "first"}}
                        ]
                    },
                    {
                        "tool_calls": [
                            {"id": "t2", "name": "ledger_append", "input": {"entry": "second"}}
                        ],
                        "delay": 3.0,
                    },
                    {"text": "both recorded"},
                ],
            },
        }
    ],
    "tasks": [{"title": "Record", "description": "Record two entries.", "assignee": "w"}],
}


def _oma_run(spec: Path, events: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "oma",
            "run",
            str(spec),
            "--run-id",
            "two-live",
            "--events",
            str(events),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _saves_after_t1(events: Path) -> int:
    """Checkpoint saves the events show after tool call t1 ran (0 before it ran)."""
    if not events.exists():
        return 0
    rows = [json.loads(line) for line in events.read_text().splitlines() if line.endswith("}")]
    ran = [i for i, row in enumerate(rows) if row["type"] == "tool_call" and row["executed"]]
    return sum(row["type"] == "checkpoint_saved" for row in rows[ran[0] + 1 :]) if ran else 0


def _executed(events: Path) -> list[str]:
    if not events.exists():
        return []
    rows = [json.loads(line) for line in events.read_text().splitlines()]
    return [row["toolCallId"] for row in rows if row["type"] == "tool_call" and row["executed"]]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("backend", ["file", "redis", "postgres"], indirect=True)
def test_two_live_oma_run_processes_one_wins(backend: Any, tmp_path: Path) -> None:
    store: dict[str, Any]
    if backend.name == "file":
        store = {"file": {"path": backend.url.removeprefix("file://")}}
    elif backend.name == "redis":
        store = {
            "redis": {"urlEnv": "OMA_TEST_STORE_URL", "namespace": f"two-{uuid.uuid4().hex[:8]}"}
        }
    else:
        store = {
            "postgres": {"dsnEnv": "OMA_TEST_STORE_URL", "schema": f"two_{uuid.uuid4().hex[:8]}"}
        }
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({**SLOW_SPEC, "store": store}))
    env = {
        **os.environ,
        "OMA_TEST_STORE_URL": backend.url,
        "OMA_LEDGER_PATH": str(tmp_path / "ledger.jsonl"),
    }
    first = _oma_run(spec, tmp_path / "first.events", env)
    deadline = time.monotonic() + 60
    while _saves_after_t1(tmp_path / "first.events") < 2:  # t1 committed, in the 3 s model turn
        assert first.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    # The first process stalls (as a paused or partitioned attempt does) while the second takes
    # the run over and finishes it; continued, the first must find itself fenced. Stopping it
    # makes the order certain: a wall-clock race lost when the machine was busy.
    os.kill(first.pid, signal.SIGSTOP)
    try:
        second = _oma_run(spec, tmp_path / "second.events", env)
        second_out, _ = second.communicate(timeout=120)
    finally:
        os.kill(first.pid, signal.SIGCONT)
    first_out, _ = first.communicate(timeout=120)
    assert second.returncode == 0, second_out
    assert first.returncode == 12 and "fenced" in first_out, first_out
    assert _executed(tmp_path / "first.events") == ["t1"], (
        (tmp_path / "first.events").read_text(),
        first_out,
        second_out,
    )  # nothing after the takeover
    assert _executed(tmp_path / "second.events") == ["t2"]
    assert "attempt 2" in second_out
    entries = [
        json.loads(line)["entry"] for line in (tmp_path / "ledger.jsonl").read_text().splitlines()
    ]
    assert entries == ["first", "second"]


@pytest.mark.parametrize("journal", [False, True], ids=["snapshot", "journal"])
async def test_two_fresh_starts_of_one_run_the_later_is_told_it_lost_the_first_save(
    journal: bool,
) -> None:
    """Both are attempt 1: the one that saves second is not "superseded by a newer attempt"
    but told that another start of the same run saved first, and runs no tool."""
    store, ran = InMemoryStore(), list[str]()
    inside, release = asyncio.Event(), asyncio.Event()

    class NoteInput(BaseModel):
        note: str

    async def note(args: NoteInput, ctx: ToolContext) -> str:
        ran.append(ctx.tool_call_id)
        inside.set()
        await release.wait()
        return "noted"

    def team() -> Team:
        script = [
            {"tool_calls": [{"id": "n1", "name": "note", "input": {"note": "x"}}]},
            {"text": "done"},
        ]
        tool = define_tool("note", "Note.", NoteInput, note)
        return Team(
            name="t", agents=[AgentConfig(name="w", adapter=ScriptedAdapter(script), tools=[tool])]
        )

    def options() -> CheckpointOptions:
        return CheckpointOptions(store=store, run_id="twice", fence=True, journal=journal)

    tasks = [{"title": "T", "description": "t", "assignee": "w"}]
    first = asyncio.create_task(OpenMultiAgent().run_tasks(team(), tasks, checkpoint=options()))
    await asyncio.wait_for(inside.wait(), 10)  # the first start has saved: it is in its tool
    with pytest.raises(CheckpointFencedError) as lost:
        await OpenMultiAgent().run_tasks(team(), tasks, checkpoint=options())
    message = str(lost.value)
    assert "was saved first by another start of the same run" in message
    assert "newer attempt" not in message and lost.value.attempt == 1
    release.set()
    assert (await first).success
    assert ran == ["n1"]  # the later start ran no tool

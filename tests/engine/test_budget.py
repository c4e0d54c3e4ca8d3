"""Run budgets: a step that would pass a limit suspends the run on a request to raise it; the
spend holds across attempts; a call a crash hid is counted at its reservation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from oma import AgentConfig, CheckpointOptions, FileStore, OpenMultiAgent, ScriptedAdapter, Team
from oma.approval import decide_approval
from oma.budget import RunBudget
from oma.checkpoint.manager import Checkpoint
from oma.errors import OmaError
from oma.llm.types import ChatRequest, ChatResponse
from oma.orchestrator.results import TeamRunResult
from oma.store import RedactingStore
from oma.tools import ToolContext, define_tool
from tests.engine.crashing import SimulatedCrash

USAGE = {"input_tokens": 50, "output_tokens": 10}
TASK = [{"title": "Count", "description": "Count five times.", "assignee": "w"}]


class Nothing(BaseModel):
    pass


def _script(calls: int) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = [
        {"tool_calls": [{"id": f"c{i}", "name": "tick", "input": {}}], "usage": USAGE}
        for i in range(calls)
    ]
    return [*turns, {"text": "done", "usage": USAGE}]


class Counting(ScriptedAdapter):
    """The scripted model, counting the calls that reached it (what a provider bills)."""

    def __init__(self, script: list[dict[str, Any]], billed: list[str]) -> None:
        super().__init__(script)
        self.billed = billed

    async def chat(self, request: ChatRequest) -> ChatResponse:
        self.billed.append(request.call_key or "")
        return await super().chat(request)


def _team(billed: list[str], ticks: list[str], calls: int = 5) -> Team:
    async def tick(_: Nothing, ctx: ToolContext) -> str:
        ticks.append(ctx.tool_call_id)
        return "ok"

    tool = define_tool("tick", "Tick once.", Nothing, tick)
    agent = AgentConfig(
        name="w", adapter=Counting(_script(calls), billed), tools=[tool], max_tokens=100
    )
    return Team(name="t", agents=[agent])


def _options(tmp_path: Path) -> CheckpointOptions:
    return CheckpointOptions(store=FileStore(str(tmp_path / "store.json")), run_id="r1")


async def _saved_budget(tmp_path: Path) -> dict[str, Any]:
    snapshot = await Checkpoint(FileStore(str(tmp_path / "store.json")), run_id="r1").load_latest()
    assert snapshot is not None
    assert snapshot.budget is not None  # type: ignore[union-attr]
    return snapshot.budget.to_data()  # type: ignore[union-attr]


async def _decide(tmp_path: Path, result: TeamRunResult, word: str) -> None:
    [request] = result.pending_approvals
    await decide_approval(
        FileStore(str(tmp_path / "store.json")),
        request_id=request.id,
        request_hash=request.request_hash,
        decision=word,
        reviewer={"id": "alice"},
    )


async def test_a_model_call_past_the_token_budget_suspends_on_a_request_to_raise_it(
    tmp_path: Path,
) -> None:
    billed: list[str] = []
    engine = OpenMultiAgent(budget=RunBudget(tokens=300))
    result = await engine.run_tasks(_team(billed, []), TASK, checkpoint=_options(tmp_path))

    assert result.status.code == "suspended"
    [request] = result.pending_approvals
    content = request.content
    assert (request.scope, request.boundary) == ("budget", "budget:tokens:300")
    assert (content["limit"], content["current"], content["proposed"]) == ("tokens", 300, 600)
    assert content["used"] == 120 and content["needed"] > 300 - 120  # the call it stopped
    assert content["agentName"] == "w"
    assert len(billed) == 2  # the third call was never sent
    assert result.budget is not None and result.budget.spent.tokens == 120
    saved = await _saved_budget(tmp_path)
    assert saved["spent"]["modelCalls"] == 2 and saved["reserved"] == []


async def test_an_approved_raise_continues_the_run_and_its_spend_adds_up_across_attempts(
    tmp_path: Path,
) -> None:
    billed: list[str] = []
    ticks: list[str] = []
    engine = OpenMultiAgent(budget=RunBudget(tokens=300))
    result = await engine.run_tasks(_team(billed, ticks), TASK, checkpoint=_options(tmp_path))
    raises = 0
    while result.status.code == "suspended":
        await _decide(tmp_path, result, "approve")
        raises += 1
        result = await engine.restore(_team(billed, ticks), checkpoint=_options(tmp_path))

    assert result.status.code == "ok" and raises >= 1
    assert ticks == [f"c{i}" for i in range(5)]  # each call once
    assert len(billed) == 6
    report = result.budget
    assert report is not None
    assert report.spent.tokens == 6 * 60 and report.spent.model_calls == 6
    assert report.spent.tool_calls == 5 and report.limits.tokens == 300 * (1 + raises)
    assert [key.rsplit(":", 1)[1] for key in billed] == [f"m{i}" for i in range(1, 7)]
    assert all(key.startswith("r1:") for key in billed)


async def test_a_rejected_raise_ends_the_run_rejected_and_sends_nothing_more(
    tmp_path: Path,
) -> None:
    billed: list[str] = []
    engine = OpenMultiAgent(budget=RunBudget(tokens=300))
    result = await engine.run_tasks(_team(billed, []), TASK, checkpoint=_options(tmp_path))
    await _decide(tmp_path, result, "reject")

    result = await engine.restore(_team(billed, []), checkpoint=_options(tmp_path))
    assert result.status.code == "rejected"
    assert [task.status for task in result.tasks] == ["skipped"]
    assert len(billed) == 2
    again = await engine.restore(_team(billed, []), checkpoint=_options(tmp_path))
    assert again.status.code == "rejected" and len(billed) == 2


async def test_model_call_and_tool_call_limits_stop_before_the_step_that_passes_them(
    tmp_path: Path,
) -> None:
    ticks: list[str] = []
    engine = OpenMultiAgent(budget=RunBudget(tool_calls=2))
    result = await engine.run_tasks(_team([], ticks), TASK, checkpoint=_options(tmp_path))
    [request] = result.pending_approvals
    assert request.boundary == "budget:toolCalls:2" and request.content["proposed"] == 4
    assert ticks == ["c0", "c1"]

    billed: list[str] = []
    engine = OpenMultiAgent(budget=RunBudget(model_calls=3))
    result = await engine.run_tasks(_team(billed, []), TASK, checkpoint=_options(tmp_path / "m"))
    [request] = result.pending_approvals
    assert request.boundary == "budget:modelCalls:3" and len(billed) == 3


class Dies(ScriptedAdapter):
    """Kills the process (simulated) while its call is under way: the call was sent."""

    def __init__(self, script: list[dict[str, Any]], die_at: int, billed: list[str]) -> None:
        super().__init__(script)
        self.die_at, self.billed = die_at, billed

    async def chat(self, request: ChatRequest) -> ChatResponse:
        self.billed.append(request.call_key or "")
        if len(self.billed) == self.die_at:
            raise SimulatedCrash("killed during the model call")
        return await super().chat(request)


async def test_a_call_under_way_when_the_process_died_stays_counted_at_its_reservation(
    tmp_path: Path,
) -> None:
    billed: list[str] = []
    agent = AgentConfig(name="w", adapter=Dies(_script(1), 2, billed), max_tokens=100)
    engine = OpenMultiAgent(budget=RunBudget(tokens=10_000))
    with pytest.raises(SimulatedCrash):
        await engine.run_tasks(Team(name="t", agents=[agent]), TASK, checkpoint=_options(tmp_path))
    saved = await _saved_budget(tmp_path)
    [reservation] = saved["reserved"]
    assert reservation["id"] == "m2" and reservation["tokens"] > 100

    events: list[Any] = []
    agent = AgentConfig(name="w", adapter=Dies(_script(1), 0, billed), max_tokens=100)
    again = OpenMultiAgent(budget=RunBudget(tokens=10_000), on_progress=events.append)
    result = await again.restore(Team(name="t", agents=[agent]), checkpoint=_options(tmp_path))

    assert result.status.code == "ok"
    assert result.budget is not None
    spent = result.budget.spent
    assert (spent.lost_model_calls, spent.lost_tokens) == (1, reservation["tokens"])
    assert spent.model_calls == 3 == len(billed)  # the lost call, its re-run and the last
    assert spent.tokens == 2 * 60 + reservation["tokens"]
    saved = await _saved_budget(tmp_path)
    assert [lost["id"] for lost in saved["lost"]] == ["m2"]  # named, to match the provider's
    lost = [e for e in events if e.type == "warning" and e.data["kind"] == "budget_call_lost"]
    assert len(lost) == 1 and "m2" in lost[0].data["message"]


async def test_a_budget_without_a_checkpoint_fails_the_task_with_a_clear_error() -> None:
    billed: list[str] = []
    engine = OpenMultiAgent(budget=RunBudget(model_calls=1))
    result = await engine.run_tasks(_team(billed, []), TASK)
    assert result.status.code != "ok"
    [task] = result.tasks
    assert task.status == "failed" and "modelCalls budget of 1" in (task.result or "")
    assert "raise the spec's budget" in (task.result or "")
    assert len(billed) == 1  # not retried


async def test_a_raised_spec_budget_drops_the_pending_request_and_continues(
    tmp_path: Path,
) -> None:
    billed: list[str] = []
    small = OpenMultiAgent(budget=RunBudget(tokens=300))
    result = await small.run_tasks(_team(billed, []), TASK, checkpoint=_options(tmp_path))
    assert result.status.code == "suspended"

    large = OpenMultiAgent(budget=RunBudget(tokens=5_000))
    result = await large.restore(_team(billed, []), checkpoint=_options(tmp_path))
    assert result.status.code == "ok" and result.pending_approvals == []
    assert result.budget is not None and result.budget.spent.model_calls == 6


@pytest.mark.parametrize(
    "change",
    [
        {"spent": {"inputTokens": -5}},
        {"spent": {"inputTokens": "5"}},
        {"reserved": [{"id": "", "taskId": "t", "tokens": 1, "attempt": 1}]},
        {"nextReservation": 0},
    ],
)
async def test_a_tampered_budget_in_the_checkpoint_is_refused_before_anything_runs(
    tmp_path: Path, change: dict[str, Any]
) -> None:
    billed: list[str] = []
    engine = OpenMultiAgent(budget=RunBudget(tokens=300))
    await engine.run_tasks(_team(billed, []), TASK, checkpoint=_options(tmp_path))
    store = FileStore(str(tmp_path / "store.json"))
    key = "__oma_checkpoint__/r1/latest"
    entry = await store.get(key)
    assert entry is not None
    snapshot = json.loads(entry.value)
    for field_name, value in change.items():
        if isinstance(value, dict):
            snapshot["budget"][field_name].update(value)
        else:
            snapshot["budget"][field_name] = value
    await store.set(key, json.dumps(snapshot), entry.metadata)

    with pytest.raises(OmaError, match="budget"):
        await engine.restore(_team(billed, []), checkpoint=_options(tmp_path))
    assert len(billed) == 2


def test_a_budget_needs_a_positive_limit() -> None:
    with pytest.raises(ValueError, match="at least one"):
        RunBudget()
    with pytest.raises(ValueError, match="at least 1"):
        RunBudget(tokens=0)


async def test_a_budget_on_a_store_without_compare_and_set_fails_the_task_clearly(
    tmp_path: Path,
) -> None:
    billed: list[str] = []
    store = RedactingStore(FileStore(str(tmp_path / "store.json")))
    engine = OpenMultiAgent(budget=RunBudget(model_calls=1))
    options = CheckpointOptions(store=store, run_id="r1")
    result = await engine.run_tasks(_team(billed, []), TASK, checkpoint=options)
    [task] = result.tasks
    assert task.status == "failed" and "compare_and_set" in (task.result or "")
    assert "modelCalls budget of 1" in (task.result or "") and len(billed) == 1


async def test_a_restore_given_no_budget_keeps_the_runs_spend(tmp_path: Path) -> None:
    billed: list[str] = []
    await OpenMultiAgent(budget=RunBudget(tokens=300)).run_tasks(
        _team(billed, []), TASK, checkpoint=_options(tmp_path)
    )
    before = await _saved_budget(tmp_path)
    await OpenMultiAgent().restore(_team(billed, []), checkpoint=_options(tmp_path))
    assert await _saved_budget(tmp_path) == before  # not erased by a run without a budget


async def test_the_coordinators_calls_are_counted_and_synthesis_is_saved(tmp_path: Path) -> None:
    plan = '[{"title": "Say", "description": "Say hi.", "assignee": "w"}]'
    lead = AgentConfig(name="lead", adapter=ScriptedAdapter([{"text": plan}, {"text": "sum"}]))
    worker = AgentConfig(name="w", adapter=ScriptedAdapter([{"text": "hi"}]))
    team = Team(name="t", agents=[worker])
    engine = OpenMultiAgent(budget=RunBudget(model_calls=2))  # passed by synthesis: no stop
    result = await engine.run_team(team, "Greet.", coordinator=lead, checkpoint=_options(tmp_path))
    assert result.success and result.budget is not None
    assert result.budget.spent.model_calls == 3
    saved = await _saved_budget(tmp_path)
    assert saved["spent"]["modelCalls"] == 3 and saved["reserved"] == []

"""Each gate's suspend, approve and reject paths, and the stale and integrity refusals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field

from oma.approval import (
    Allow,
    Deny,
    DurableApprovalError,
    Suspend,
    ToolCallGateContext,
    decide_approval,
    get_approval_record,
)
from oma.llm.scripted import ScriptedAdapter
from oma.orchestrator import CheckpointOptions, OpenMultiAgent, TeamRunResult
from oma.store import FileStore
from oma.store.base import Metadata
from oma.team import AgentConfig, Team
from oma.tools import AnyTool, ToolContext, define_tool
from tests.engine.approval_fixtures import CHARGE_TASK, Recorder, charge_team, ts_store
from tests.engine.crashing import SimulatedCrash
from tests.engine.helpers import NoCasStore

RUN = "gated"
TASK: list[dict[str, Any]] = [{"title": "Pay", "description": "Pay.", "assignee": "operator"}]


def _options(store: Any) -> CheckpointOptions:
    return CheckpointOptions(journal=False, store=store, run_id=RUN)


async def _suspend_tool(store: Any, recorder: Recorder) -> TeamRunResult:
    team, _ = charge_team(recorder)
    result = await OpenMultiAgent(on_tool_call=recorder.gate(Suspend("review"))).run_tasks(
        team, TASK, checkpoint=_options(store)
    )
    assert result.status.code == "suspended"
    return result


async def _decide(store: Any, result: TeamRunResult, word: str) -> None:
    (request,) = result.pending_approvals
    await decide_approval(
        store,
        request_id=request.id,
        request_hash=request.request_hash,
        decision=word,
        reviewer={"id": "alice"},
    )


@pytest.mark.parametrize(
    ("answer", "executed", "denied_text"),
    [
        (True, True, None),
        (Allow(), True, None),
        ({"action": "allow"}, True, None),
        (False, False, 'Tool "charge_card" was denied by the approval gate.'),
        (Deny("too big"), False, 'Tool "charge_card" was denied by the approval gate: too big'),
        ("yes", False, "approval gate failed: invalid approval decision 'yes'"),
    ],
)
async def test_live_tool_gate_answers(answer: Any, executed: bool, denied_text: str | None) -> None:
    recorder = Recorder()
    team, model = charge_team(recorder)
    result = await OpenMultiAgent(on_tool_call=recorder.gate(answer)).run_tasks(team, TASK)
    assert result.success and bool(recorder.tool_calls) is executed
    (gate_ctx,) = recorder.gate_calls
    assert isinstance(gate_ctx, ToolCallGateContext) and gate_ctx.input == {"amount": 7}
    seen = model.calls[1].messages[-1].content[0].model_dump()
    if denied_text is not None:
        assert seen["is_error"] is True and denied_text in seen["content"]


async def test_tool_suspend_without_checkpoint_is_an_error_result() -> None:
    recorder = Recorder()
    team, model = charge_team(recorder)
    result = await OpenMultiAgent(on_tool_call=recorder.gate(Suspend())).run_tasks(team, TASK)
    assert result.success and recorder.tool_calls == []
    seen = model.calls[1].messages[-1].content[0].model_dump()
    assert "durable approval needs checkpoint persistence" in seen["content"]


async def test_tool_suspend_on_a_store_without_cas_fails_the_run_closed() -> None:
    recorder = Recorder()
    team, _ = charge_team(recorder)
    with pytest.raises(DurableApprovalError) as caught:
        await OpenMultiAgent(on_tool_call=recorder.gate(Suspend())).run_tasks(
            team, TASK, checkpoint=_options(NoCasStore())
        )
    assert caught.value.code == "APPROVAL_ATOMIC_STORE_REQUIRED" and recorder.tool_calls == []


async def test_tool_approve_then_restore_executes_once(tmp_path: Path) -> None:
    store, recorder = FileStore(tmp_path / "s.json"), Recorder()
    await _suspend_tool(store, recorder)
    undecided = await OpenMultiAgent().restore(charge_team(recorder)[0], checkpoint=_options(store))
    assert undecided.status.code == "suspended" and recorder.tool_calls == []
    await _decide(store, undecided, "approve")
    done = await OpenMultiAgent(on_tool_call=recorder.gate(False)).restore(
        charge_team(recorder)[0], checkpoint=_options(store)
    )
    assert done.success and recorder.tool_calls == [("tool-call-1", {"amount": 7})]
    again = await OpenMultiAgent().restore(charge_team(recorder)[0], checkpoint=_options(store))
    # The undecided restore wrote nothing, so attempts count 1, (2), 2, 3.
    assert again.success and len(recorder.tool_calls) == 1 and again.identity.attempt == 3


class StricterInput(BaseModel):
    amount: int = Field(gt=0, le=5)


class TextInput(BaseModel):
    amount: str  # now keeps "7" as text: the validated input differs from the reviewed 7


def _changed_tool(model: type[BaseModel], recorder: Recorder) -> AnyTool:
    async def charge(args: Any, ctx: ToolContext) -> str:
        recorder.tool_calls.append((ctx.tool_call_id, args.model_dump()))
        return "charged"

    return define_tool("charge_card", "Charge.", model, charge, consequential=True)


@pytest.mark.parametrize(
    "change", ["stricter-model", "coerces-differently", "tool-revoked", "edited-call-input"]
)
async def test_approved_call_refuses_when_no_longer_what_was_reviewed(
    tmp_path: Path, change: str
) -> None:
    store, recorder = FileStore(tmp_path / "s.json"), Recorder()
    suspended = await _suspend_tool(store, recorder)
    await _decide(store, suspended, "approve")
    team, model = charge_team(recorder)
    agent = team.agents[0]
    if change == "stricter-model":
        agent.tools = [_changed_tool(StricterInput, recorder)]
    elif change == "coerces-differently":
        agent.tools = [_changed_tool(TextInput, recorder)]
    elif change == "tool-revoked":
        agent.tools = []
    else:
        document = json.loads((tmp_path / "s.json").read_text())
        for entry in document["entries"]:
            if entry["key"].endswith("/latest"):
                snapshot = json.loads(entry["value"])
                snapshot["inFlightTasks"][0]["pendingToolCalls"][0]["call"]["input"] = {
                    "amount": "700"
                }
                entry["value"] = json.dumps(snapshot)
        (tmp_path / "s.json").write_text(json.dumps(document))
        store = FileStore(tmp_path / "s.json")
    with pytest.raises(DurableApprovalError) as caught:
        await OpenMultiAgent().restore(team, checkpoint=_options(store))
    assert caught.value.code == "APPROVAL_STALE_DECISION"
    assert recorder.tool_calls == [] and model.calls == []


class CrashOnLedgerRow(FileStore):
    async def compare_and_set(
        self, key: str, expected: str | None, value: str, metadata: Metadata | None = None
    ) -> bool:
        if key.startswith("__oma_approval__/") and expected is None and self.armed:
            self.armed = False
            raise SimulatedCrash("killed after the suspension checkpoint, before the ledger row")
        return await super().compare_and_set(key, expected, value, metadata)

    armed = True


async def test_crash_between_suspension_checkpoint_and_ledger_row_recovers(
    tmp_path: Path,
) -> None:
    recorder = Recorder()
    team, _ = charge_team(recorder)
    with pytest.raises(SimulatedCrash):
        await OpenMultiAgent(on_tool_call=recorder.gate(Suspend())).run_tasks(
            team, TASK, checkpoint=_options(CrashOnLedgerRow(tmp_path / "s.json"))
        )
    store = FileStore(tmp_path / "s.json")
    assert [e.key for e in await store.list() if e.key.startswith("__oma_approval__")] == []
    resumed = await OpenMultiAgent().restore(charge_team(recorder)[0], checkpoint=_options(store))
    assert resumed.status.code == "suspended"
    (request,) = resumed.pending_approvals
    assert await get_approval_record(store, request.id) is not None  # re-created on restore
    await _decide(store, resumed, "approve")
    done = await OpenMultiAgent().restore(charge_team(recorder)[0], checkpoint=_options(store))
    assert done.success and len(recorder.tool_calls) == 1


async def test_checkpointed_decision_must_match_the_ledger(tmp_path: Path) -> None:
    _store, path = ts_store("c3-restored.store.json", tmp_path)
    document = json.loads(path.read_text())
    for entry in document["entries"]:
        if entry["key"].startswith("__oma_approval__/"):
            row = json.loads(entry["value"])
            row["decision"]["reviewer"]["id"] = "someone-else"
            entry["value"] = json.dumps(row)
    path.write_text(json.dumps(document))
    recorder = Recorder()
    with pytest.raises(DurableApprovalError) as caught:
        await OpenMultiAgent().restore(
            charge_team(recorder)[0],
            checkpoint=CheckpointOptions(journal=False, store=FileStore(path), run_id="conf-c"),
        )
    assert caught.value.code == "APPROVAL_INTEGRITY_ERROR"
    assert CHARGE_TASK in path.read_text()


# ---- dispatch gate --------------------------------------------------------------------------

STEPS: list[dict[str, Any]] = [
    {"title": "One", "description": "1"},
    {"title": "Two", "description": "2", "dependsOn": ["One"]},
]


def _steps_team() -> tuple[Team, ScriptedAdapter]:
    model = ScriptedAdapter(
        {"# Task: One": [{"text": "one done"}], "# Task: Two": [{"text": "two done"}]}
    )
    return Team(name="s", agents=[AgentConfig(name="w", adapter=model)]), model


def _second(answer: Any) -> Any:
    def gate(task: Any) -> Any:
        if isinstance(answer, Exception) and task.title == "Two":
            raise answer
        return answer if task.title == "Two" else True

    return gate


@pytest.mark.parametrize(
    ("answer", "code", "skip_reason"),
    [
        (Deny(), "rejected", "Skipped: task dispatch approval rejected."),
        (RuntimeError("boom"), "error", "Skipped: task dispatch callback error — boom"),
        (Suspend(), "error", "Skipped: task dispatch callback error — "),  # no checkpoint
    ],
)
async def test_dispatch_gate_deny_and_failures_skip_the_rest(
    answer: Any, code: str, skip_reason: str
) -> None:
    team, model = _steps_team()
    result = await OpenMultiAgent(on_task_dispatch=_second(answer)).run_tasks(team, STEPS)
    assert result.status.code == code and result.pending_approvals == []
    assert result.tasks[0].status == "completed" and result.tasks[1].status == "skipped"
    assert (result.tasks[1].result or "").startswith(skip_reason)
    assert len(model.calls) == 1


async def test_dispatch_approved_task_that_is_not_ready_is_stale(tmp_path: Path) -> None:
    _store, path = ts_store("d4-approved.store.json", tmp_path)
    document = json.loads(path.read_text())
    for entry in document["entries"]:
        if entry["key"].endswith("/latest"):
            snapshot = json.loads(entry["value"])
            build = snapshot["queue"]["tasks"][0]
            build["status"] = "in_progress"  # Build must run again: Deploy is not ready
            snapshot["queue"]["completed"], snapshot["queue"]["inProgress"] = [], [build["id"]]
            snapshot["completedTaskResults"] = []
            entry["value"] = json.dumps(snapshot)
    path.write_text(json.dumps(document))
    model = ScriptedAdapter([{"text": "never"}])
    team = Team(name="d", agents=[AgentConfig(name="worker", adapter=model)])
    with pytest.raises(DurableApprovalError) as caught:
        await OpenMultiAgent().restore(
            team,
            checkpoint=CheckpointOptions(journal=False, store=FileStore(path), run_id="conf-d"),
        )
    assert caught.value.code == "APPROVAL_STALE_DECISION" and model.calls == []


# ---- plan gate ------------------------------------------------------------------------------

PLAN_TEXT = json.dumps(
    [
        {"title": "One", "description": "1"},
        {"title": "Two", "description": "2", "dependsOn": ["One"]},
    ]
)


def _planning_team() -> tuple[Team, AgentConfig, ScriptedAdapter]:
    team, model = _steps_team()
    lead = AgentConfig(
        name="coordinator",
        adapter=ScriptedAdapter(
            {"# Goal decomposition": [{"text": PLAN_TEXT}], "## Original Goal": [{"text": "FINAL"}]}
        ),
    )
    return team, lead, model


async def _suspend_plan(store: Any, plan_only: bool = False) -> TeamRunResult:
    team, lead, model = _planning_team()
    result = await OpenMultiAgent(on_plan_ready=lambda tasks: Suspend("plan review")).run_team(
        team, "ship it", coordinator=lead, checkpoint=_options(store), plan_only=plan_only
    )
    assert result.status.code == "suspended" and result.status.message == "Plan approval pending."
    assert [t.status for t in result.tasks] == ["pending", "blocked"] and model.calls == []
    (request,) = result.pending_approvals
    assert request.scope == "plan" and request.boundary == "coordinator-plan"
    assert request.content["continuation"] == ("plan_only" if plan_only else "execute")
    assert [t["assignee"] for t in request.content["tasks"]] == ["w", "w"]
    return result


async def test_plan_gate_approve_runs_the_plan_and_synthesizes(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "s.json")
    await _decide(store, await _suspend_plan(store), "approve")
    team, lead, model = _planning_team()
    result = await OpenMultiAgent(on_plan_ready=lambda tasks: False).restore(
        team, checkpoint=_options(store), coordinator=lead
    )
    assert result.success and result.agent_results["coordinator"].output == "FINAL"
    assert len(model.calls) == 2


async def test_plan_gate_reject_is_terminal(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "s.json")
    await _decide(store, await _suspend_plan(store), "reject")
    team, lead, model = _planning_team()
    for attempt in (2, 3):
        result = await OpenMultiAgent().restore(team, checkpoint=_options(store), coordinator=lead)
        assert result.status.code == "rejected" and result.identity.attempt == attempt
        assert {t.status for t in result.tasks} == {"skipped"} and model.calls == []


async def test_plan_only_approval_returns_the_plan_every_time(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "s.json")
    await _decide(store, await _suspend_plan(store, plan_only=True), "approve")
    team, lead, model = _planning_team()
    for _ in range(2):
        result = await OpenMultiAgent().restore(team, checkpoint=_options(store), coordinator=lead)
        assert result.success and result.status.message == "Plan only." and model.calls == []


async def test_live_plan_denial_runs_nothing() -> None:
    team, lead, model = _planning_team()
    result = await OpenMultiAgent(on_plan_ready=lambda tasks: False).run_team(
        team, "ship it", coordinator=lead
    )
    assert result.status.code == "rejected" and result.status.message == "Plan approval rejected."
    assert model.calls == []


async def test_a_plan_suspension_that_cannot_be_saved_is_not_reported(tmp_path: Path) -> None:
    from tests.engine.crashing import CrashingStore

    store = CrashingStore()
    store.fail_next_writes = 5
    team, lead, _ = _planning_team()
    with pytest.raises(DurableApprovalError) as caught:
        await OpenMultiAgent(on_plan_ready=lambda tasks: Suspend()).run_team(
            team, "ship it", coordinator=lead, checkpoint=_options(store)
        )
    assert caught.value.code == "APPROVAL_INTEGRITY_ERROR"
    assert "suspension was not reported" in str(caught.value)
    assert [e.key for e in await store.list() if e.key.startswith("__oma_approval__")] == []


# ---- round gate -----------------------------------------------------------------------------

ROUNDS: list[dict[str, Any]] = [
    {"title": "One", "description": "1"},
    {"title": "Two", "description": "2", "dependsOn": ["One"]},
]


async def test_round_gate_suspend_approve_and_reject(tmp_path: Path) -> None:
    for word, code in (("approve", "ok"), ("reject", "rejected")):
        store = FileStore(tmp_path / f"{word}.json")
        team, _model = _steps_team()
        calls: list[tuple[list[str], list[str]]] = []

        def gate(done: Any, upcoming: Any, calls: Any = calls) -> Any:
            calls.append(([t.title for t in done], [t.title for t in upcoming]))
            return Suspend("round review")

        result = await OpenMultiAgent(on_approval=gate).run_tasks(
            team, ROUNDS, checkpoint=_options(store)
        )
        assert result.status.message == "Round approval pending." and calls == [(["One"], ["Two"])]
        (request,) = result.pending_approvals
        assert request.boundary == f"{result.tasks[0].id}->{result.tasks[1].id}"
        await _decide(store, result, word)
        resumed = await OpenMultiAgent(on_approval=lambda d, u: False).restore(
            team, checkpoint=_options(store)
        )
        assert resumed.status.code == code
        assert resumed.tasks[1].status == ("completed" if code == "ok" else "skipped")


@pytest.mark.parametrize(
    ("answer", "code", "reason"),
    [
        (False, "rejected", "Skipped: approval rejected."),
        (RuntimeError("nope"), "error", "Skipped: approval callback error — nope"),
    ],
)
async def test_live_round_gate_deny_and_failure(answer: Any, code: str, reason: str) -> None:
    def gate(done: Any, upcoming: Any) -> Any:
        if isinstance(answer, Exception):
            raise answer
        return answer

    team, model = _steps_team()
    result = await OpenMultiAgent(on_approval=gate).run_tasks(team, ROUNDS)
    assert result.status.code == code and result.tasks[1].result == reason
    assert len(model.calls) == 1


def test_round_and_dispatch_gates_cannot_be_combined() -> None:
    with pytest.raises(ValueError, match="cannot be combined"):
        OpenMultiAgent(on_approval=lambda d, u: True, on_task_dispatch=lambda t: True)

"""Which approvals stand for work a run has not finished
(``oma_operator.approvals.approved_work``): what a retry under a changed spec would do on an
earlier decision. Real runs of the engine into real
stores (in memory, and the TypeScript reference's files)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from oma.approval import decide_approval
from oma.checkpoint import Checkpoint, CheckpointSnapshotV4
from oma.llm.scripted import ScriptedAdapter
from oma.llm.types import ChatRequest, ChatResponse
from oma.orchestrator import CheckpointOptions, OpenMultiAgent
from oma.store import InMemoryStore
from oma.team import AgentConfig, Team
from oma_operator.approvals.approved_work import approved_not_run
from oma_operator.approvals.sync import run_records
from tests.engine.approval_fixtures import (
    CHARGE_REQUEST,
    DEPLOY_REQUEST,
    DEPLOY_TASK,
    Recorder,
    charge_team,
    charge_tool,
    ts_store,
)
from tests.operator.charge_runs import OlderRunnersHeads, suspend_at_the_charge


async def _decide(store: Any, request_id: str, word: str) -> None:
    record = next(r for r in await run_records(store, "conf-c") if r.request.id == request_id)
    await decide_approval(
        store,
        request_id=request_id,
        request_hash=record.request.request_hash,
        decision=word,
        reviewer={"id": "carol"},
    )


@pytest.mark.parametrize("layout", ["journal", "older journal", "snapshot"])
async def test_an_approved_call_stands_until_it_is_committed(layout: str) -> None:
    store = OlderRunnersHeads() if layout == "older journal" else InMemoryStore()
    await suspend_at_the_charge(store, journal=layout != "snapshot")
    assert await approved_not_run(store, "conf-c") == []  # undecided
    await _decide(store, CHARGE_REQUEST, "approve")
    (record,) = await approved_not_run(store, "conf-c")
    assert record.request.id == CHARGE_REQUEST and record.decision is not None
    assert record.decision.reviewer.id == "carol"
    recorder = Recorder()
    options = CheckpointOptions(store=store, run_id="conf-c", journal=layout != "snapshot")
    done = await OpenMultiAgent().restore(charge_team(recorder)[0], checkpoint=options)
    assert done.success and len(recorder.tool_calls) == 1
    assert await approved_not_run(store, "conf-c") == []  # the approved call ran
    assert await approved_not_run(store, "no-such-run") == []


async def test_a_rejected_request_is_no_approved_work() -> None:
    store = InMemoryStore()
    await suspend_at_the_charge(store, journal=True)
    await _decide(store, CHARGE_REQUEST, "reject")
    assert await approved_not_run(store, "conf-c") == []


async def test_without_a_checkpoint_every_approval_of_the_run_stands() -> None:
    """A restart without a checkpoint asks the same requests again (ids from their content)
    and finds them decided: each approved one stands."""
    store = InMemoryStore()
    await suspend_at_the_charge(store, journal=True)
    await _decide(store, CHARGE_REQUEST, "approve")
    await Checkpoint(store, run_id="conf-c").delete()
    assert await Checkpoint(store, run_id="conf-c").load_latest() is None
    (record,) = await approved_not_run(store, "conf-c")
    assert record.request.id == CHARGE_REQUEST


class _Crash(BaseException):
    """The runner's process dying mid-task (an eviction, an OOM kill)."""


class _CrashingAt(ScriptedAdapter):
    def __init__(self, script: dict[str, list[Any]], crash_at: str) -> None:
        super().__init__(script)
        self.crash_at = crash_at

    async def chat(self, request: ChatRequest) -> ChatResponse:
        if any(self.crash_at in str(message.to_wire()) for message in request.messages):
            raise _Crash
        return await super().chat(request)


def _deploy_team(crash: bool) -> Team:
    """conf-d's team; its Deploy task charges a card, then (crashing) dies before its answer."""
    turns: list[Any] = [
        {"tool_calls": [{"id": "c1", "name": "charge_card", "input": {"amount": 1}}]},
        {"text": "deployed"},
    ]
    script = {"# Task: Deploy": turns}
    model = _CrashingAt(script, "charged:1") if crash else ScriptedAdapter(script)
    tools = [charge_tool(Recorder())]
    return Team(name="conf-d", agents=[AgentConfig(name="worker", adapter=model, tools=tools)])


async def test_an_approved_dispatch_stands_until_its_task_has_ended(tmp_path: Path) -> None:
    """Found in review: a dispatch approval leaves the pending list when the task starts, but
    the task's work runs after that. An attempt that dies inside the task leaves the approval
    standing; once the task has completed it is spent."""
    store, _ = ts_store("d4-approved.store.json", tmp_path)
    (pending,) = await approved_not_run(store, "conf-d")
    assert (pending.request.id, pending.request.scope) == (DEPLOY_REQUEST, "task_dispatch")
    options = CheckpointOptions(store=store, run_id="conf-d")
    with pytest.raises(_Crash):
        await OpenMultiAgent().restore(_deploy_team(crash=True), checkpoint=options)
    saved = await Checkpoint(store, run_id="conf-d").load_latest()
    assert isinstance(saved, CheckpointSnapshotV4)
    assert saved.pending_approvals == []  # the dispatch was taken: it is no longer pending
    assert [d.request_id for d in saved.approval_decisions] == [DEPLOY_REQUEST]
    (standing,) = await approved_not_run(store, "conf-d")
    assert standing.request.id == DEPLOY_REQUEST  # its task has not ended
    done = await OpenMultiAgent().restore(_deploy_team(crash=False), checkpoint=options)
    assert done.success
    assert next(t for t in done.tasks if t.id == DEPLOY_TASK).status == "completed"
    assert await approved_not_run(store, "conf-d") == []

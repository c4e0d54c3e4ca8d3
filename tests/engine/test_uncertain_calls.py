"""Non-idempotent tools: a call that started but never committed is put to a reviewer on
restore, never silently re-run; idempotent tools keep re-running."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from oma import AgentConfig, CheckpointOptions, OpenMultiAgent, ScriptedAdapter, Team
from oma.approval.ledger import decide_approval
from oma.checkpoint.keys import checkpoint_key
from oma.checkpoint.manager import Checkpoint
from oma.checkpoint.summary import summarize
from oma.orchestrator.results import TeamRunResult
from oma.tools import ToolContext, define_tool
from tests.engine.crashing import CrashingStore, SimulatedCrash, in_flight

TASKS = [{"title": "Pay", "description": "Pay invoice 42.", "assignee": "payer"}]
CALL = "call-transfer-1"


class TransferInput(BaseModel):
    amount: int


class Bank:
    """The external system: counts every transfer it receives (it cannot deduplicate)."""

    def __init__(self) -> None:
        self.transfers: list[tuple[str, int]] = []

    def team(self, *, idempotent: bool, script: list[dict[str, Any]]) -> Team:
        async def transfer(args: TransferInput, ctx: ToolContext) -> str:
            self.transfers.append((ctx.tool_call_id, args.amount))
            return f"transferred {args.amount}"

        tool = define_tool(
            "transfer", "Move money.", TransferInput, transfer, idempotent=idempotent
        )
        agent = AgentConfig(name="payer", tools=[tool], adapter=ScriptedAdapter(script))
        return Team(name="pay", agents=[agent])


# The scripted model answers by turn number, so a restored run uses the same script.
FIRST_ATTEMPT: list[dict[str, Any]] = [
    {"tool_calls": [{"id": CALL, "name": "transfer", "input": {"amount": 42}}]},
    {"text": "paid"},
]


def _has(snapshot: dict[str, Any], field: str) -> bool:
    return any(
        field in call and call["call"]["id"] == CALL
        for task in in_flight(snapshot)
        for call in task.get("pendingToolCalls") or []
    )


async def _crash_at(store: CrashingStore, bank: Bank, field: str, *, idempotent: bool) -> None:
    """Run until the first write that carries ``field`` ("started" or "commit") and die there."""
    store.crash_before = lambda snapshot: _has(snapshot, field)
    with pytest.raises(SimulatedCrash):
        await OpenMultiAgent().run_tasks(
            bank.team(idempotent=idempotent, script=FIRST_ATTEMPT),
            TASKS,
            checkpoint=CheckpointOptions(store=store, run_id="pay-1"),
        )


async def _restore(store: CrashingStore, bank: Bank, *, idempotent: bool = False) -> TeamRunResult:
    return await OpenMultiAgent().restore(
        bank.team(idempotent=idempotent, script=FIRST_ATTEMPT),
        checkpoint=CheckpointOptions(store=store, run_id="pay-1"),
    )


async def _decide(store: CrashingStore, result: TeamRunResult, word: str) -> dict[str, Any]:
    (request,) = result.pending_approvals
    await decide_approval(
        store,
        request_id=request.id,
        request_hash=request.request_hash,
        decision=word,
        reviewer={"id": "alice"},
    )
    return request.content


async def test_started_but_uncommitted_call_is_put_to_a_reviewer_not_rerun() -> None:
    store, bank = CrashingStore(), Bank()
    await _crash_at(store, bank, "commit", idempotent=False)
    assert bank.transfers == [(CALL, 42)]  # it happened; its result was never saved

    suspended = await _restore(store, bank)
    assert suspended.status.code == "suspended" and bank.transfers == [(CALL, 42)]
    content = await _decide(store, suspended, "approve")
    assert content["toolCallId"] == CALL and content["input"] == {"amount": 42}
    assert (
        content["uncertain"]["startedAttempt"] == 1
        and content["uncertain"]["afterApproval"] is None
    )
    assert "may or may not have happened" in (suspended.pending_approvals[0].reason or "")

    retried = await _restore(store, bank)
    assert retried.success and bank.transfers == [(CALL, 42), (CALL, 42)]  # the reviewer's choice


async def test_rejecting_records_the_call_as_not_repeated() -> None:
    store, bank = CrashingStore(), Bank()
    await _crash_at(store, bank, "commit", idempotent=False)
    await _decide(store, await _restore(store, bank), "reject")
    result = await _restore(store, bank)
    assert result.success and bank.transfers == [(CALL, 42)]
    (record,) = result.task_results[result.tasks[0].id].tool_calls
    assert "may or may not have run" in record.output and "not to run it again" in record.output


async def test_a_crash_during_the_approved_retry_asks_again() -> None:
    store, bank = CrashingStore(), Bank()
    await _crash_at(store, bank, "commit", idempotent=False)
    first = await _restore(store, bank)
    await _decide(store, first, "approve")
    store.crash_before = lambda snapshot: _has(snapshot, "commit")
    with pytest.raises(SimulatedCrash):
        await _restore(store, bank)
    assert len(bank.transfers) == 2
    again = await _restore(store, bank)
    assert again.status.code == "suspended" and len(bank.transfers) == 2
    (request,) = again.pending_approvals
    assert request.id != first.pending_approvals[0].id
    assert request.content["uncertain"]["afterApproval"] == first.pending_approvals[0].id
    assert request.content["uncertain"]["startedAttempt"] == 3


async def test_a_crash_before_the_start_mark_runs_the_call_once_without_asking() -> None:
    store, bank = CrashingStore(), Bank()
    await _crash_at(store, bank, "started", idempotent=False)
    assert bank.transfers == []  # the mark is written before the tool runs: it never ran
    result = await _restore(store, bank)
    assert result.success and result.pending_approvals == [] and bank.transfers == [(CALL, 42)]


async def test_idempotent_tools_keep_rerunning_and_write_no_start_mark() -> None:
    store, bank = CrashingStore(), Bank()
    await _crash_at(store, bank, "commit", idempotent=True)
    assert not any(_has(snapshot, "started") for snapshot in store.checkpoint_writes)
    result = await _restore(store, bank, idempotent=True)
    assert result.success and bank.transfers == [(CALL, 42), (CALL, 42)]  # same tool_call_id


async def test_a_committed_non_idempotent_call_is_replayed_never_rerun() -> None:
    store, bank = CrashingStore(), Bank()
    store.crash_before = lambda snapshot: any(
        t["phase"] == "awaiting_model" for t in in_flight(snapshot)
    )
    with pytest.raises(SimulatedCrash):
        await OpenMultiAgent().run_tasks(
            bank.team(idempotent=False, script=FIRST_ATTEMPT),
            TASKS,
            checkpoint=CheckpointOptions(store=store, run_id="pay-1"),
        )
    result = await _restore(store, bank)
    assert result.success and result.pending_approvals == [] and bank.transfers == [(CALL, 42)]


async def test_checkpoint_summary_shows_the_call_as_uncertain() -> None:
    store, bank = CrashingStore(), Bank()
    await _crash_at(store, bank, "commit", idempotent=False)
    key = checkpoint_key("pay-1")
    snapshot = await Checkpoint(store, run_id="pay-1").load_latest()
    assert snapshot is not None
    (task,) = summarize(snapshot, key, None).in_flight
    assert [(call.id, call.state) for call in task.tool_calls] == [(CALL, "uncertain")]

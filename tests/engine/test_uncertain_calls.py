"""Non-idempotent tools: a call that started but never committed is put to a reviewer on
restore, never silently re-run; idempotent tools keep re-running."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from oma import AgentConfig, CheckpointOptions, InMemoryStore, OpenMultiAgent, ScriptedAdapter, Team
from oma.approval.errors import DurableApprovalError
from oma.approval.ledger import DurableApprovalLedger, decide_approval, get_approval_record
from oma.approval.requests import create_approval_request, parse_approval_decision
from oma.checkpoint.keys import checkpoint_key
from oma.checkpoint.manager import Checkpoint
from oma.checkpoint.snapshot import CheckpointSnapshotV4
from oma.checkpoint.summary import summarize
from oma.cli import app
from oma.orchestrator.results import TeamRunResult
from oma.store import FileStore
from oma.tools import ToolContext, define_tool
from tests.engine.crashing import CrashingStore, SimulatedCrash, in_flight

TASKS = [{"title": "Pay", "description": "Pay invoice 42.", "assignee": "payer"}]
CALL = "call-transfer-1"
TASK_SNAPSHOT = {
    "id": "t1",
    "title": "T",
    "description": "D",
    "status": "pending",
    "createdAt": "2026-12-01T00:00:00.000Z",
    "updatedAt": "2026-12-01T00:00:00.000Z",
}


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
            checkpoint=CheckpointOptions(journal=False, store=store, run_id="pay-1"),
        )


async def _restore(store: CrashingStore, bank: Bank, *, idempotent: bool = False) -> TeamRunResult:
    return await OpenMultiAgent().restore(
        bank.team(idempotent=idempotent, script=FIRST_ATTEMPT),
        checkpoint=CheckpointOptions(journal=False, store=store, run_id="pay-1"),
    )


async def _decide(
    store: CrashingStore, result: TeamRunResult, word: str, found: str | None = None
) -> dict[str, Any]:
    (request,) = result.pending_approvals
    await decide_approval(
        store,
        request_id=request.id,
        request_hash=request.request_hash,
        decision=word,
        reviewer={"id": "alice"},
        result=found,
    )
    return request.content


async def test_started_but_uncommitted_call_is_put_to_a_reviewer_not_rerun() -> None:
    store, bank = CrashingStore(), Bank()
    await _crash_at(store, bank, "commit", idempotent=False)
    assert bank.transfers == [(CALL, 42)]  # it happened; its result was never saved

    suspended = await _restore(store, bank)
    assert suspended.status.code == "suspended" and bank.transfers == [(CALL, 42)]
    (request,) = suspended.pending_approvals
    assert request.scope == "uncertain_tool_call"  # a request of its own kind
    assert request.boundary == f"{suspended.tasks[0].id}:{CALL}"
    content = await _decide(store, suspended, "approve")
    assert content["kind"] == "uncertain_tool_call" and content["toolCallId"] == CALL
    assert content["input"] == {"amount": 42} and content["startedAttempt"] == 1
    assert "afterApproval" not in content
    assert "may or may not have happened" in (request.reason or "")

    retried = await _restore(store, bank)
    assert retried.success and bank.transfers == [(CALL, 42), (CALL, 42)]  # the reviewer's choice


@pytest.mark.parametrize("word", ["reject", "failed"])
async def test_rejecting_records_the_call_as_failed_not_repeated(word: str) -> None:
    store, bank = CrashingStore(), Bank()
    await _crash_at(store, bank, "commit", idempotent=False)
    await _decide(store, await _restore(store, bank), word)
    result = await _restore(store, bank)
    assert result.success and bank.transfers == [(CALL, 42)]
    (decision,) = result.approval_decisions
    assert (decision.decision, decision.resolution) == ("rejected", "failed")
    (record,) = result.task_results[result.tasks[0].id].tool_calls
    assert "may or may not have run" in record.output and "recorded it as failed" in record.output


async def test_recording_the_call_as_done_gives_the_model_the_reviewers_record() -> None:
    store, bank = CrashingStore(), Bank()
    await _crash_at(store, bank, "commit", idempotent=False)
    await _decide(store, await _restore(store, bank), "done", "bank shows transfer T-981 of 42")
    result = await _restore(store, bank)
    assert result.success and bank.transfers == [(CALL, 42)]  # not run again
    (decision,) = result.approval_decisions
    assert (decision.decision, decision.resolution) == ("rejected", "done")
    assert decision.result == "bank shows transfer T-981 of 42"
    (record,) = result.task_results[result.tasks[0].id].tool_calls
    assert "recorded that it took effect" in record.output
    assert "bank shows transfer T-981 of 42" in record.output
    messages = result.task_results[result.tasks[0].id].messages
    results = [
        block
        for message in messages
        if message["role"] == "user"
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]
    assert len(results) == 1 and not results[0].get("is_error")  # what the model is told
    assert "bank shows transfer T-981 of 42" in str(results[0]["content"])


async def test_settling_words_are_refused_where_they_do_not_fit() -> None:
    store, bank = CrashingStore(), Bank()
    await _crash_at(store, bank, "commit", idempotent=False)
    (request,) = (await _restore(store, bank)).pending_approvals
    ids = {"request_id": request.id, "request_hash": request.request_hash}
    with pytest.raises(DurableApprovalError) as refused:
        await decide_approval(store, **ids, decision="retry", reviewer={"id": "a"}, result="x")
    assert refused.value.code == "APPROVAL_VALIDATION_ERROR" and "only with 'done'" in str(
        refused.value
    )
    with pytest.raises(DurableApprovalError) as unknown:
        await decide_approval(store, **ids, decision="maybe", reviewer={"id": "a"})
    assert unknown.value.code == "APPROVAL_VALIDATION_ERROR"
    record = await get_approval_record(store, request.id)
    assert record is not None and record.decision is None  # nothing was recorded


async def test_settling_words_are_refused_on_ordinary_requests() -> None:
    store = InMemoryStore()
    request = create_approval_request(
        run_id="r",
        scope="task_dispatch",
        boundary="t1",
        content={"kind": "task_dispatch", "task": TASK_SNAPSHOT},
    )
    await DurableApprovalLedger(store).ensure_request(request)
    for word in ("retry", "done", "failed"):
        with pytest.raises(DurableApprovalError) as refused:
            await decide_approval(
                store,
                request_id=request.id,
                request_hash=request.request_hash,
                decision=word,
                reviewer={"id": "a"},
            )
        assert refused.value.code == "APPROVAL_VALIDATION_ERROR"
        assert "approve or reject it" in str(refused.value)
    made = await decide_approval(
        store,
        request_id=request.id,
        request_hash=request.request_hash,
        decision="reject",
        reviewer={"id": "a"},
    )
    assert made.resolution is None and "resolution" not in made.to_wire()  # reference shape


def test_a_decision_record_must_fit_its_scope() -> None:
    base = {
        "version": 1,
        "requestId": "apr_" + "0" * 32,
        "runId": "r",
        "requestHash": "0" * 64,
        "reviewer": {"id": "a"},
        "decidedAt": "2026-12-01T00:00:00.000Z",
    }
    bad = [
        {"scope": "tool_call", "decision": "approved", "resolution": "retry"},
        {"scope": "uncertain_tool_call", "decision": "approved"},
        {"scope": "uncertain_tool_call", "decision": "approved", "resolution": "done"},
        {"scope": "uncertain_tool_call", "decision": "rejected", "resolution": "retry"},
        {
            "scope": "uncertain_tool_call",
            "decision": "rejected",
            "resolution": "failed",
            "result": "x",
        },
    ]
    for fields in bad:
        with pytest.raises(DurableApprovalError) as refused:
            parse_approval_decision(base | fields)
        assert refused.value.code == "APPROVAL_INTEGRITY_ERROR", fields
    ok = parse_approval_decision(
        base
        | {
            "scope": "uncertain_tool_call",
            "decision": "rejected",
            "resolution": "done",
            "result": "x",
        }
    )
    assert ok.result == "x"


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
    assert request.content["afterApproval"] == first.pending_approvals[0].id
    assert request.content["startedAttempt"] == 3


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
            checkpoint=CheckpointOptions(journal=False, store=store, run_id="pay-1"),
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


async def test_checkpoint_summary_of_a_suspended_and_of_a_done_call() -> None:
    store, bank = CrashingStore(), Bank()
    await _crash_at(store, bank, "commit", idempotent=False)
    suspended = await _restore(store, bank)
    key = checkpoint_key("pay-1")
    snapshot = await Checkpoint(store, run_id="pay-1").load_latest()
    assert isinstance(snapshot, CheckpointSnapshotV4)
    (task,) = summarize(snapshot, key, None).in_flight
    assert [(call.id, call.state) for call in task.tool_calls] == [(CALL, "uncertain")]

    # A snapshot holding the decision on the call (as a decided suspension may be saved).
    await _decide(store, suspended, "done")
    record = await get_approval_record(store, suspended.pending_approvals[0].id)
    assert record is not None and record.decision is not None
    (state,) = snapshot.in_flight_tasks
    calls = [
        c.model_copy(update={"approval_decision": record.decision})
        for c in state.pending_tool_calls or []
    ]
    decided = snapshot.model_copy(
        update={"in_flight_tasks": [state.model_copy(update={"pending_tool_calls": calls})]}
    )
    (task,) = summarize(decided, key, None).in_flight
    assert [(call.id, call.state) for call in task.tool_calls] == [(CALL, "recorded_done")]


def test_oma_approvals_resolve_settles_an_uncertain_call(tmp_path: Path) -> None:
    """The reviewer's path on the command line: show names the request's own kind and how to
    settle it; resolve ... done records it without running the tool again."""
    crashed, bank = CrashingStore(), Bank()
    file_store = FileStore(tmp_path / "run.json")

    async def crash_then_suspend() -> TeamRunResult:
        await _crash_at(crashed, bank, "commit", idempotent=False)
        for entry in await crashed.list():
            await file_store.set(entry.key, entry.value, entry.metadata)
        return await OpenMultiAgent().restore(
            bank.team(idempotent=False, script=FIRST_ATTEMPT),
            checkpoint=CheckpointOptions(journal=False, store=file_store, run_id="pay-1"),
        )

    (request,) = asyncio.run(crash_then_suspend()).pending_approvals
    url = f"file://{tmp_path}/run.json"

    def oma(*args: str) -> tuple[int, str]:
        result = CliRunner().invoke(app, ["approvals", *args, "--store", url])
        return result.exit_code, result.output

    code, out = oma("list")
    assert code == 0 and "uncertain_tool_call" in out and "pending" in out
    code, out = oma("show", request.id)
    assert code == 0 and "may or may not have happened" in out
    assert f"oma approvals resolve {request.id} retry|done|failed" in out
    code, out = oma("approve", request.id, "--reviewer", "a", "--hash", "0" * 12)
    assert code == 1 and "APPROVAL_STALE_DECISION" in out  # the hash binds, as for any request
    code, out = oma(
        "resolve", request.id, "maybe", "--reviewer", "alice", "--hash", request.request_hash
    )
    assert code == 2 and "maybe" in out  # typer refuses a word that is not an outcome
    code, out = oma(
        "resolve",
        request.id,
        "done",
        "--reviewer",
        "alice",
        "--hash",
        request.request_hash[:12],
        "--result",
        "bank shows T-981",
    )
    assert code == 0 and f"rejected (done) {request.id} as alice" in out
    code, out = oma("show", request.id)
    assert "rejected (done) by alice" in out and "result    bank shows T-981" in out

    async def resume() -> TeamRunResult:
        return await OpenMultiAgent().restore(
            bank.team(idempotent=False, script=FIRST_ATTEMPT),
            checkpoint=CheckpointOptions(journal=False, store=file_store, run_id="pay-1"),
        )

    result = asyncio.run(resume())
    assert result.success and bank.transfers == [(CALL, 42)]
    (record,) = result.task_results[result.tasks[0].id].tool_calls
    assert "bank shows T-981" in record.output

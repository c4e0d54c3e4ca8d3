"""The ledger's rules and every error code it raises (reference §2.9-2.10)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from oma.approval import (
    ApprovalRequest,
    DurableApprovalError,
    DurableApprovalLedger,
    approval_key,
    create_approval_request,
    decide_approval,
    get_approval_record,
)
from oma.store import FileStore, InMemoryStore
from tests.engine.helpers import NoCasStore


def _request(run_id: str = "run-1", amount: int = 7) -> ApprovalRequest:
    return create_approval_request(
        run_id=run_id,
        scope="tool_call",
        boundary="t1:c1",
        reason="review",
        content={
            "kind": "tool_call",
            "toolName": "pay",
            "rawInput": {"amount": amount},
            "input": {"amount": amount},
            "agentName": "a",
            "taskId": "t1",
            "toolCallId": "c1",
            "consequential": True,
        },
        requested_at="2026-01-01T00:00:00.000Z",
    )


def _code(error: pytest.ExceptionInfo[DurableApprovalError]) -> str:
    return error.value.code


REVIEWER = {"id": "alice", "displayName": "Alice"}


async def test_ensure_request_is_idempotent_and_conflicts_on_other_content() -> None:
    store = InMemoryStore()
    ledger = DurableApprovalLedger(store)
    request = _request()
    created = await ledger.ensure_request(request)
    again = await ledger.ensure_request(request)
    assert created == again and again.decision is None
    entry = await store.get(approval_key(request.id))
    assert entry is not None and entry.metadata == {
        "namespace": "approval",
        "version": 1,
        "runId": "run-1",
        "scope": "tool_call",
        "requestHash": request.request_hash,
        "requestedAt": "2026-01-01T00:00:00.000Z",
    }
    later = request.model_copy(update={"requested_at": "2026-01-02T00:00:00.000Z"})
    with pytest.raises(DurableApprovalError) as caught:
        await ledger.ensure_request(later)
    assert _code(caught) == "APPROVAL_CONFLICT"


async def test_first_decision_wins_and_is_never_replaced() -> None:
    store = InMemoryStore()
    request = _request()
    await DurableApprovalLedger(store).ensure_request(request)
    decision = await decide_approval(
        store,
        request_id=request.id,
        request_hash=request.request_hash,
        decision="approve",
        reviewer=REVIEWER,
    )
    assert decision.decision == "approved" and decision.reviewer.id == "alice"
    with pytest.raises(DurableApprovalError) as caught:
        await decide_approval(
            store,
            request_id=request.id,
            request_hash=request.request_hash,
            decision="reject",
            reviewer={"id": "mallory"},
        )
    assert _code(caught) == "APPROVAL_CONFLICT" and "already approved by alice" in str(caught.value)
    record = await get_approval_record(store, request.id)
    assert record is not None and record.decision == decision
    entry = await store.get(approval_key(request.id))
    assert entry is not None and entry.metadata is not None
    assert (entry.metadata["decision"], entry.metadata["reviewerId"]) == ("approved", "alice")


async def test_the_reviewers_reason_is_kept_in_the_ledger_row() -> None:
    store = InMemoryStore()
    request = _request()
    await DurableApprovalLedger(store).ensure_request(request)
    made = await decide_approval(
        store,
        request_id=request.id,
        request_hash=request.request_hash,
        decision="reject",
        reviewer=REVIEWER,
        reason="amount not in the budget",
    )
    entry = await store.get(approval_key(request.id))
    assert entry is not None
    assert json.loads(entry.value)["decision"]["reason"] == "amount not in the budget"
    record = await get_approval_record(store, request.id)
    assert record is not None and record.decision == made
    assert made.reason == "amount not in the budget"
    other = _request(run_id="run-2")
    await DurableApprovalLedger(store).ensure_request(other)
    plain = await decide_approval(
        store,
        request_id=other.id,
        request_hash=other.request_hash,
        decision="approve",
        reviewer=REVIEWER,
    )
    assert "reason" not in plain.to_wire()  # the reference's shape when none is given


async def test_fifty_concurrent_decisions_one_winner_on_a_file_store(tmp_path: Any) -> None:
    store = FileStore(tmp_path / "ledger.json")
    request = _request()
    await DurableApprovalLedger(store).ensure_request(request)

    async def decide(i: int) -> str:
        try:
            await decide_approval(
                store,
                request_id=request.id,
                request_hash=request.request_hash,
                decision="approve" if i % 2 else "reject",
                reviewer={"id": f"reviewer-{i}"},
            )
        except DurableApprovalError as exc:
            return exc.code
        return "won"

    outcomes = await asyncio.gather(*(decide(i) for i in range(50)))
    assert outcomes.count("won") == 1
    assert set(outcomes) == {"won", "APPROVAL_CONFLICT"}
    record = await get_approval_record(FileStore(tmp_path / "ledger.json"), request.id)
    assert record is not None and record.decision is not None
    assert record.decision.reviewer.id == f"reviewer-{outcomes.index('won')}"


@pytest.mark.parametrize(
    ("kwargs", "code", "message"),
    [
        ({"reviewer": {"id": "  "}}, "APPROVAL_VALIDATION_ERROR", "reviewer"),
        ({"reviewer": {}}, "APPROVAL_VALIDATION_ERROR", "reviewer"),
        ({"decision": "maybe"}, "APPROVAL_VALIDATION_ERROR", "'approve' or 'reject'"),
        ({"request_id": "apr_" + "0" * 32}, "APPROVAL_NOT_FOUND", "No approval request"),
        ({"request_hash": "f" * 64}, "APPROVAL_STALE_DECISION", "Review the current content"),
        ({"reason": "x" * 4097}, "APPROVAL_VALIDATION_ERROR", "at most 4096 characters"),
    ],
)
async def test_decide_refuses_bad_input(kwargs: dict[str, Any], code: str, message: str) -> None:
    store = InMemoryStore()
    request = _request()
    await DurableApprovalLedger(store).ensure_request(request)
    arguments: dict[str, Any] = {
        "request_id": request.id,
        "request_hash": request.request_hash,
        "decision": "approve",
        "reviewer": REVIEWER,
        **kwargs,
    }
    with pytest.raises(DurableApprovalError, match=message) as caught:
        await decide_approval(store, **arguments)
    assert _code(caught) == code


@pytest.mark.parametrize(
    "tamper",
    ["not json", "row-of-another-id", "edited-content", "wrong-version", "bad-decision"],
)
async def test_tampered_rows_are_integrity_errors(tamper: str) -> None:
    store = InMemoryStore()
    request, other = _request(), _request(amount=8)
    await DurableApprovalLedger(store).ensure_request(request)
    row: Any = {"version": 1, "request": request.to_wire()}
    if tamper == "not json":
        row = "{half"
    elif tamper == "row-of-another-id":
        row["request"] = other.to_wire()
    elif tamper == "edited-content":
        row["request"]["content"]["input"]["amount"] = 700
    elif tamper == "wrong-version":
        row["version"] = 2
    else:
        row["decision"] = {
            "version": 1,
            "requestId": other.id,
            "runId": "run-1",
            "scope": "tool_call",
            "requestHash": other.request_hash,
            "decision": "approved",
            "reviewer": {"id": "x"},
            "decidedAt": "2026-01-01T00:00:00.000Z",
        }
    await store.set(approval_key(request.id), row if isinstance(row, str) else json.dumps(row))
    with pytest.raises(DurableApprovalError) as read:
        await get_approval_record(store, request.id)
    assert _code(read) == "APPROVAL_INTEGRITY_ERROR"
    with pytest.raises(DurableApprovalError) as decided:
        await decide_approval(
            store,
            request_id=request.id,
            request_hash=request.request_hash,
            decision="approve",
            reviewer=REVIEWER,
        )
    assert _code(decided) == "APPROVAL_INTEGRITY_ERROR"


async def test_a_store_without_compare_and_set_cannot_hold_approvals() -> None:
    store = NoCasStore()
    request = _request()
    with pytest.raises(DurableApprovalError) as created:
        await DurableApprovalLedger(store).ensure_request(request)
    assert _code(created) == "APPROVAL_ATOMIC_STORE_REQUIRED"
    await store.set(
        approval_key(request.id), json.dumps({"version": 1, "request": request.to_wire()})
    )
    with pytest.raises(DurableApprovalError) as decided:
        await decide_approval(
            store,
            request_id=request.id,
            request_hash=request.request_hash,
            decision="approve",
            reviewer=REVIEWER,
        )
    assert _code(decided) == "APPROVAL_ATOMIC_STORE_REQUIRED"

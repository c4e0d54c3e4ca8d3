"""Approval expiry (``approvals.expireAfterSeconds``): when a request expires, what expiry
decides, and that it is recorded in the run's ledger like any decision, by ``expired``, once
(the pure half and the ledger; the API server's half is in tests/cluster)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from oma.approval.ledger import DurableApprovalLedger
from oma.approval.models import ApprovalRequest
from oma.approval.requests import create_approval_request
from oma.store import InMemoryStore
from oma.timeutil import parse_iso
from oma_operator.approvals.rules.binding import mirrored_status
from oma_operator.approvals.rules.expiry import EXPIRED_REVIEWER, expires_at, expiry_word
from oma_operator.approvals.sync import _expire, _not_recorded
from oma_operator.resources.models import TeamRunApprovals


def _request() -> ApprovalRequest:
    content = {
        "kind": "tool_call",
        "toolName": "wire",
        "rawInput": {"amount": 7},
        "input": {"amount": 7},
        "agentName": "clerk",
        "taskId": "t-1",
        "toolCallId": "c1",
        "consequential": True,
    }
    return create_approval_request(
        run_id="r1", scope="tool_call", boundary="t-1:c1", content=content
    )


def test_a_request_expires_its_seconds_after_it_was_made_and_never_by_default() -> None:
    request = _request()
    asked = parse_iso(request.requested_at)
    assert asked is not None
    policy = TeamRunApprovals(tools=["wire"], expire_after_seconds=5)
    assert expires_at(request, policy) == asked + timedelta(seconds=5)
    assert expires_at(request, TeamRunApprovals(tools=["wire"])) is None
    assert expires_at(request, None) is None


@pytest.mark.parametrize(
    ("scope", "on_expiry", "word"),
    [
        ("tool_call", "Reject", "reject"),
        ("tool_call", "Approve", "approve"),
        ("plan", "Approve", "approve"),
        # Nobody looked at a call that may have run: never run again, whatever onExpiry says.
        ("uncertain_tool_call", "Approve", "failed"),
        ("uncertain_tool_call", "Reject", "failed"),
    ],
)
def test_expiry_decides_as_the_spec_says_but_never_reruns_an_uncertain_call(
    scope: str, on_expiry: str, word: str
) -> None:
    policy = TeamRunApprovals.model_validate({"expireAfterSeconds": 5, "onExpiry": on_expiry})
    request = _request().model_copy(update={"scope": scope})
    assert expiry_word(request, policy) == word


def test_the_policy_refuses_a_zero_expiry_and_unknown_outcomes() -> None:
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        TeamRunApprovals.model_validate({"expireAfterSeconds": 0})
    with pytest.raises(ValueError, match="'Reject' or 'Approve'"):
        TeamRunApprovals.model_validate({"expireAfterSeconds": 5, "onExpiry": "Maybe"})


async def test_expiry_is_recorded_once_in_the_ledger_by_expired_and_a_later_decision_is_not() -> (
    None
):
    store = InMemoryStore()
    ledger = DurableApprovalLedger(store)
    request = _request()
    pending = await ledger.ensure_request(request)
    policy = TeamRunApprovals(tools=["wire"], expire_after_seconds=5)
    record = await _expire(store, pending, policy)
    assert record.decision is not None
    assert (record.decision.decision, record.decision.reviewer.id) == ("rejected", EXPIRED_REVIEWER)
    assert "expireAfterSeconds (5s)" in (record.decision.reason or "")
    assert mirrored_status(pending, expires="2026-12-06T10:00:05Z")["expiresAt"] == (
        "2026-12-06T10:00:05Z"
    )
    status = mirrored_status(record, expires="2026-12-06T10:00:05Z")
    assert status["decision"] == "Rejected" and status["reviewer"] == "expired"
    assert "expiresAt" not in status and "decidedAt" in status  # decided: no longer expires
    late = _not_recorded({"decision": "Approved", "reviewer": "bob"}, record)
    assert late == (
        "spec.decision Approved by bob was not recorded: the request was already rejected "
        "by expired"
    )
    # Expiring again (another poll) changes nothing: the first decision stands.
    again = await _expire(
        store, record, TeamRunApprovals(expire_after_seconds=5, on_expiry="Approve")
    )
    assert again.decision == record.decision


async def test_a_decision_recorded_before_expiry_stands() -> None:
    store = InMemoryStore()
    ledger = DurableApprovalLedger(store)
    request = _request()
    pending = await ledger.ensure_request(request)
    await ledger.decide(
        request_id=request.id,
        request_hash=request.request_hash,
        decision="approve",
        reviewer={"id": "bob"},
    )
    # The record as read before the decision: still undecided.
    record = await _expire(store, pending, TeamRunApprovals(expire_after_seconds=5))
    assert record.decision is not None and record.decision.reviewer.id == "bob"


@pytest.mark.parametrize(
    "extra", [{"separationOfDuties": True}, {"reviewers": {"default": {"users": ["alice"]}}}]
)
def test_approve_on_expiry_cannot_bypass_reviewers_or_separation_of_duties(
    extra: dict[str, object],
) -> None:
    with pytest.raises(ValueError, match="cannot be combined with reviewers"):
        TeamRunApprovals.model_validate({"expireAfterSeconds": 5, "onExpiry": "Approve", **extra})
    rejecting = {"expireAfterSeconds": 5, "onExpiry": "Reject", **extra}
    assert TeamRunApprovals.model_validate(rejecting).on_expiry == "Reject"

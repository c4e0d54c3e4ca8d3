"""When an undecided request expires, and what expiry decides (pure).

Expiry is a decision like any other: recorded once in the run's ledger (first decision wins),
by the reviewer ``expired``. A request that is settled first is not expired; one expired is
not decided again. An uncertain tool call (it may or may not have run) is settled ``failed`` by
expiry whatever ``onExpiry`` says: nobody looked, so it is never run again.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from oma.approval.models import ApprovalRequest
from oma.approval.words import DecisionWord
from oma.timeutil import parse_iso
from oma_operator.resources.models import TeamRunApprovals

EXPIRED_REVIEWER = "expired"


def expires_at(request: ApprovalRequest, approvals: TeamRunApprovals | None) -> datetime | None:
    """When ``request`` expires (None: never, or a request time that does not parse)."""
    if approvals is None or approvals.expire_after_seconds is None:
        return None
    asked = parse_iso(request.requested_at)
    if asked is None:
        return None
    return asked + timedelta(seconds=approvals.expire_after_seconds)


def expiry_word(request: ApprovalRequest, approvals: TeamRunApprovals) -> DecisionWord:
    if request.scope == "uncertain_tool_call":
        return "failed"
    if request.scope == "budget":
        return "reject"  # spending more is never decided by nobody
    return "approve" if approvals.on_expiry == "Approve" else "reject"


def expiry_reason(approvals: TeamRunApprovals) -> str:
    return f"nobody decided within approvals.expireAfterSeconds ({approvals.expire_after_seconds}s)"

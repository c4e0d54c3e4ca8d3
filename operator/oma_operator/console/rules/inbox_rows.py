"""The inbox: one row per ApprovalDecision still waiting for a reviewer (pure).

Only resources the operator verified are listed (anyone allowed to create ApprovalDecisions
could add others; they decide nothing); newest first. Every text is shown escaped by the page.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from oma.timeutil import parse_iso
from oma_operator.resources.bodies import DecisionBody

WAITING = "Pending"


@dataclass(frozen=True)
class InboxRow:
    namespace: str
    name: str
    team_run: str
    scope: str
    subject: str  # the tool called, the plan, the budget raise: what is asked
    summary: str  # the summary's first line
    waiting_since: str
    waited: str  # "3m", "2h5m"
    expires_at: str  # "" when the request does not expire


def inbox_rows(decisions: list[DecisionBody], now: datetime) -> list[InboxRow]:
    rows = [_row(d, now) for d in decisions if _waiting(d)]
    return sorted(rows, key=lambda r: (r.waiting_since, r.namespace, r.name), reverse=True)


def _waiting(decision: DecisionBody) -> bool:
    spec, status = decision.get("spec") or {}, decision.get("status") or {}
    return (
        status.get("verified") is True
        and spec.get("decision", WAITING) == WAITING
        and status.get("decision", WAITING) == WAITING
        and not (decision.get("metadata") or {}).get("deletionTimestamp")
    )


def _row(decision: DecisionBody, now: datetime) -> InboxRow:
    meta, spec = decision["metadata"], decision.get("spec") or {}
    since = str(meta.get("creationTimestamp") or "")
    summary = next((line for line in str(spec.get("summary") or "").split("\n") if line), "")
    return InboxRow(
        namespace=str(meta.get("namespace") or ""),
        name=meta["name"],
        team_run=str(spec.get("teamRun") or ""),
        scope=str(spec.get("scope") or ""),
        subject=subject_of(spec),
        summary=summary,
        waiting_since=since,
        waited=waited(since, now),
        expires_at=str((decision.get("status") or {}).get("expiresAt") or ""),
    )


def subject_of(spec: dict[str, object]) -> str:
    """What the request is about, from its boundary: ``task:call`` for a tool call."""
    scope = str(spec.get("scope") or "")
    boundary = str(spec.get("boundary") or "")
    if scope in ("tool_call", "uncertain_tool_call"):
        return f"tool call {boundary.rpartition(':')[2] or boundary}"
    return f"{scope.replace('_', ' ')} {boundary}".strip()


def waited(since: str, now: datetime) -> str:
    """How long since ``since`` (an ISO time), in whole minutes, hours and days."""
    start = parse_iso(since)
    if start is None:
        return "?"
    seconds = int((now - start).total_seconds())
    minutes, hours, days = seconds // 60 % 60, seconds // 3600 % 24, seconds // 86400
    if days:
        return f"{days}d{hours}h"
    if hours:
        return f"{hours}h{minutes}m"
    return f"{max(minutes, 0)}m" if seconds >= 60 else f"{max(seconds, 0)}s"

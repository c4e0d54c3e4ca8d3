"""The inbox: one row per ApprovalDecision still waiting for a reviewer (pure).

Only resources the operator verified are listed (anyone allowed to create ApprovalDecisions
could add others; they decide nothing); newest first. Every text is shown escaped by the page.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from oma import jsonutil
from oma.timeutil import parse_iso
from oma_operator.console.rules.task_titles import task_title
from oma_operator.resources.bodies import DecisionBody, TeamRunBody

WAITING = "Pending"


@dataclass(frozen=True)
class InboxRow:
    namespace: str
    name: str
    team_run: str
    task: str  # the task's title, when the content names a task of the TeamRun's spec
    scope: str
    subject: str  # the tool called, the plan, the budget raise: what is asked
    summary: str  # the summary's first line
    waiting_since: str
    waited: str  # "3m", "2h5m"
    expires_at: str  # "" when the request does not expire


def inbox_rows(
    decisions: list[DecisionBody],
    now: datetime,
    teamruns: Mapping[tuple[str, str], TeamRunBody] | None = None,
) -> list[InboxRow]:
    """``teamruns`` by (namespace, name): where the task titles come from."""
    rows = [_row(d, now, teamruns or {}) for d in decisions if _waiting(d)]
    return sorted(rows, key=lambda r: (r.waiting_since, r.namespace, r.name), reverse=True)


def _waiting(decision: DecisionBody) -> bool:
    spec, status = decision.get("spec") or {}, decision.get("status") or {}
    return (
        status.get("verified") is True
        and spec.get("decision", WAITING) == WAITING
        and status.get("decision", WAITING) == WAITING
        and not (decision.get("metadata") or {}).get("deletionTimestamp")
    )


def _row(
    decision: DecisionBody, now: datetime, teamruns: Mapping[tuple[str, str], TeamRunBody]
) -> InboxRow:
    meta, spec = decision["metadata"], decision.get("spec") or {}
    since = str(meta.get("creationTimestamp") or "")
    summary = next((line for line in str(spec.get("summary") or "").split("\n") if line), "")
    namespace, team_run = str(meta.get("namespace") or ""), str(spec.get("teamRun") or "")
    content = _content(spec)
    return InboxRow(
        namespace=namespace,
        name=meta["name"],
        team_run=team_run,
        task=task_title(teamruns.get((namespace, team_run)), str(content.get("taskId") or "")),
        scope=str(spec.get("scope") or ""),
        subject=subject_of(spec, content),
        summary=summary,
        waiting_since=since,
        waited=waited(since, now),
        expires_at=str((decision.get("status") or {}).get("expiresAt") or ""),
    )


def subject_of(spec: dict[str, Any], content: dict[str, Any]) -> str:
    """What the request is about: the tool a call is of, else the scope and boundary."""
    scope = str(spec.get("scope") or "")
    boundary = str(spec.get("boundary") or "")
    if scope in ("tool_call", "uncertain_tool_call"):
        uncertain = "uncertain " if scope == "uncertain_tool_call" else ""
        return f"{uncertain}call of {content.get('toolName') or '?'}"
    return f"{scope.replace('_', ' ')} {boundary}".strip()


def _content(spec: dict[str, Any]) -> dict[str, Any]:
    """The content's top level, for the inbox's labels only (the decision page checks it
    against the hash before showing it as what is decided)."""
    try:
        content = jsonutil.loads(str(spec.get("content") or "{}"))
    except (ValueError, RecursionError):
        return {}
    return content if isinstance(content, dict) else {}


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

"""Everything the decision page shows of one ApprovalDecision (pure): the exact content's rows
and its hash recomputed from them, the task and agent it belongs to, and what changed since the
previous request of the same task or call.

The content shown is ``spec.content`` once it hashes to ``spec.requestHash``
(``decision_view.verified_content``); a resource whose content does not is shown as refused,
with no decision buttons.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from oma.approval.models import hash_approval_request
from oma_operator.approvals.rules.decision_view import ContentMismatch, verified_content
from oma_operator.console.rules.content_diff import Change, content_diff
from oma_operator.console.rules.content_view import ContentView, content_view
from oma_operator.console.rules.task_titles import task_title
from oma_operator.resources.bodies import DecisionBody, TeamRunBody


@dataclass(frozen=True)
class Previous:
    name: str
    created: str
    decision: str  # how it was decided: Approved, Rejected, Pending
    changes: list[Change]


@dataclass(frozen=True)
class DecisionPage:
    namespace: str
    name: str
    uid: str
    scope: str
    boundary: str
    team_run: str
    request_id: str
    request_hash: str
    recomputed: str  # "" when there is no content to hash
    summary: list[str]
    decision: str  # Pending, Approved, Rejected
    reviewer: str
    status_message: str
    expires_at: str
    reviewers: list[str]
    task: str  # the task's title (or id)
    agent: str
    attempt: int
    view: ContentView | None
    refused: str  # why nobody should decide on it ("" when it may be decided)
    previous: Previous | None = None
    notes: list[str] = field(default_factory=list)


def decision_page(
    decision: DecisionBody, teamrun: TeamRunBody | None, siblings: list[DecisionBody]
) -> DecisionPage:
    meta, spec = decision["metadata"], decision.get("spec") or {}
    status = decision.get("status") or {}
    refused, content = "", None
    try:
        content = verified_content(spec)
    except ContentMismatch as exc:
        refused = f"{exc}: this resource must not be decided"
    if status.get("verified") is not True and not refused:
        refused = str(status.get("message") or "the operator has not verified this resource")
    notes = []
    if content is None and not refused:
        notes.append(
            "This resource holds no exact content (too large for it): read it with "
            f"oma approvals show {spec.get('requestId')} --store URL before deciding."
        )
    recomputed = ""
    if content is not None:
        recomputed = hash_approval_request(
            str(spec.get("scope")), str(spec.get("boundary") or ""), content
        )
    details = content if isinstance(content, dict) else {}
    reviewers = spec.get("reviewers") or {}
    return DecisionPage(
        namespace=str(meta.get("namespace") or ""),
        name=meta["name"],
        uid=str(meta.get("uid") or ""),
        scope=str(spec.get("scope") or ""),
        boundary=str(spec.get("boundary") or ""),
        team_run=str(spec.get("teamRun") or ""),
        request_id=str(spec.get("requestId") or ""),
        request_hash=str(spec.get("requestHash") or ""),
        recomputed=recomputed,
        summary=[line for line in str(spec.get("summary") or "").split("\n") if line.strip()],
        decision=str(spec.get("decision") or "Pending"),
        reviewer=str(spec.get("reviewer") or status.get("reviewer") or ""),
        status_message=str(status.get("message") or ""),
        expires_at=str(status.get("expiresAt") or ""),
        reviewers=[
            *(str(u) for u in reviewers.get("users") or []),
            *(f"group {g}" for g in reviewers.get("groups") or []),
        ],
        task=task_title(teamrun, str(details.get("taskId") or "")),
        agent=str(details.get("agentName") or ""),
        attempt=int(((teamrun or {}).get("status") or {}).get("attempt") or 0),
        view=content_view(content) if content is not None else None,
        refused=refused,
        previous=previous_request(decision, content, siblings),
        notes=notes,
    )


def previous_request(
    decision: DecisionBody, content: Any, siblings: list[DecisionBody]
) -> Previous | None:
    """The latest earlier request of the same run about the same thing (the same boundary: a
    re-requested call, an uncertain call's retry; the same task's plan), and what changed."""
    meta, spec = decision["metadata"], decision.get("spec") or {}
    created = str(meta.get("creationTimestamp") or "")
    earlier = [
        s
        for s in siblings
        if s["metadata"].get("uid") != meta.get("uid")
        and (s.get("spec") or {}).get("teamRun") == spec.get("teamRun")
        and _same_subject(s.get("spec") or {}, spec)
        and str(s["metadata"].get("creationTimestamp") or "") <= created
        and (s.get("status") or {}).get("verified") is True
    ]
    if not earlier or content is None:
        return None
    latest = max(earlier, key=lambda s: str(s["metadata"].get("creationTimestamp") or ""))
    try:
        before = verified_content(latest.get("spec") or {})
    except ContentMismatch:
        before = None
    if before is None:
        return None
    return Previous(
        name=latest["metadata"]["name"],
        created=str(latest["metadata"].get("creationTimestamp") or ""),
        decision=str((latest.get("spec") or {}).get("decision") or "Pending"),
        changes=content_diff(before, content),
    )


def _same_subject(other: dict[str, Any], spec: dict[str, Any]) -> bool:
    """The same boundary, or a call of the same task (a tool call's boundary is
    ``task:call``), or the run's plan again."""
    if other.get("boundary") and other.get("boundary") == spec.get("boundary"):
        return True
    calls = ("tool_call", "uncertain_tool_call")
    if spec.get("scope") in calls and other.get("scope") in calls:
        task = str(spec.get("boundary") or "").rpartition(":")[0]
        return bool(task) and str(other.get("boundary") or "").rpartition(":")[0] == task
    return other.get("scope") == spec.get("scope") == "plan"

"""Who may decide a request (pure): the TeamRun's reviewer sets, and its authors (its creator
and every user who changed what it executes) under separation of duties.

The API server enforces both (the approval-decisions admission policy checks
``request.userInfo`` against the resource's ``reviewers`` and ``excludedReviewers``); the
operator copies them into each ApprovalDecision and re-checks what it can see itself (user
names; group membership is known only to the API server).
"""

from __future__ import annotations

from oma.approval.models import ApprovalRequest
from oma_operator.resources.bodies import TeamRunBody
from oma_operator.resources.models import (
    CREATOR_ANNOTATION,
    EDITORS_ANNOTATION,
    ReviewerSet,
    TeamRunApprovals,
)

ANY = "*"


def reviewers_for(
    approvals: TeamRunApprovals | None, request: ApprovalRequest
) -> ReviewerSet | None:
    """The reviewer set of ``request``: its tool's, task's or the plan's entry, else the
    default; None when the TeamRun names none (RBAC alone decides)."""
    spec = approvals.reviewers if approvals is not None else None
    if spec is None:
        return None
    content = request.content
    specific: ReviewerSet | None = None
    if request.scope in ("tool_call", "uncertain_tool_call"):
        specific = _entry(spec.tools, str(content.get("toolName")))
    elif request.scope == "task_dispatch":
        specific = _entry(spec.dispatch, str((content.get("task") or {}).get("title")))
    elif request.scope == "plan":
        specific = spec.plan
    elif request.scope == "budget":
        specific = spec.budget
    return specific or spec.default


def _entry(table: dict[str, ReviewerSet], name: str) -> ReviewerSet | None:
    return table.get(name) or table.get(ANY)


def creator_of(teamrun: TeamRunBody, recorded: bool) -> str | None:
    """The TeamRun's creator, when the API server recorded it: ``recorded`` says the creator
    policy is installed (without it the annotation is whatever the author wrote)."""
    if not recorded:
        return None
    annotations = (teamrun.get("metadata") or {}).get("annotations") or {}
    creator = annotations.get(CREATOR_ANNOTATION)
    return str(creator) if creator else None


def editors_of(teamrun: TeamRunBody, recorded: bool) -> list[str]:
    """The users who changed what the TeamRun executes, as the API server recorded them (one
    per line; the same policy group as the creator's, so believed under the same condition)."""
    if not recorded:
        return []
    annotations = (teamrun.get("metadata") or {}).get("annotations") or {}
    return [name for name in str(annotations.get(EDITORS_ANNOTATION) or "").split("\n") if name]


def excluded_reviewers(
    approvals: TeamRunApprovals | None, teamrun: TeamRunBody, recorded: bool
) -> list[str] | None:
    """The users who may not decide: the TeamRun's authors (creator, then editors), when it
    asks for separation of duties (``missing_creator`` tells when that cannot be known)."""
    if approvals is None or not approvals.separation_of_duties:
        return None
    creator = creator_of(teamrun, recorded)
    authors = [creator] if creator else []
    authors += [name for name in editors_of(teamrun, recorded) if name not in authors]
    return authors or None


def missing_creator(
    approvals: TeamRunApprovals | None, teamrun: TeamRunBody, recorded: bool
) -> str | None:
    """Why the TeamRun cannot run as asked, when it wants separation of duties and the API
    server did not record its creator; None when all is well."""
    if approvals is None or not approvals.separation_of_duties:
        return None
    if not recorded:
        return (
            "approvals.separationOfDuties needs the TeamRun's creator as recorded by the API "
            "server, and this operator runs without the creator policy (approvals.creatorPolicy "
            f"in the chart, env OMA_CREATOR_POLICY): the {CREATOR_ANNOTATION} annotation could "
            "have been written by anyone. Install the policy (Kubernetes 1.36+) and create the "
            "TeamRun again, or drop separationOfDuties"
        )
    if creator_of(teamrun, recorded):
        return None
    return (
        "approvals.separationOfDuties needs the TeamRun's creator as recorded by the API server "
        f"(annotation {CREATOR_ANNOTATION}, set by the chart's creator policy, "
        "approvals.creatorPolicy); it is missing: install the policy and create the TeamRun "
        "again, or drop separationOfDuties"
    )


def reviewer_problem(
    reviewer: str, reviewers: ReviewerSet | None, excluded: list[str] | None
) -> str | None:
    """Why ``reviewer`` may not decide, as far as names tell (None: allowed, or only group
    membership could tell, which the API server checked)."""
    if excluded and reviewer in excluded:
        return (
            f"{reviewer} created this TeamRun or changed what it executes, and its approvals "
            "require separation of duties: someone else must decide"
        )
    if reviewers is not None and not reviewers.groups and reviewer not in reviewers.users:
        return f"{reviewer} is not a reviewer of this request ({describe(reviewers)})"
    return None


def describe(reviewers: ReviewerSet) -> str:
    parts = []
    if reviewers.users:
        parts.append("users " + ", ".join(reviewers.users))
    if reviewers.groups:
        parts.append("groups " + ", ".join(reviewers.groups))
    return "; ".join(parts)

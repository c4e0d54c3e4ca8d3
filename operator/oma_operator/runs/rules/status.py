"""TeamRun status as a projection of pod outcomes (pure): phase, conditions, attempts.

Every condition's message and the status message have the Secret values the operator read
masked (``masking``): they may quote a runner's termination message."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from oma.budget.text import budget_column
from oma.pod_contract import TerminationReport
from oma.timeutil import format_iso, now_iso, parse_iso
from oma_operator import masking
from oma_operator.resources.bodies import Condition, TeamRunStatus
from oma_operator.resources.phases import ConditionType
from oma_operator.runs.rules.decisions import MAX_ATTEMPT_HISTORY, Decision

PHASE_BY_ACTION = {
    "succeeded": "Succeeded",
    "failed": "Failed",
    "awaiting_approval": "AwaitingApproval",
    "fenced": "Running",
    "next_attempt": "Running",
    "suspended": "Suspended",
    "cancelled": "Cancelled",
}


POLLED: ConditionType = "CheckpointPolled"  # False while a snapshot is too large to poll


def condition(
    kind: ConditionType, status: bool | None, reason: str, message: str, generation: int
) -> Condition:
    """``status`` None: Unknown."""
    return {
        "type": kind,
        "status": "Unknown" if status is None else "True" if status else "False",
        "reason": reason,
        "message": masking.mask(message)[:1024],
        "lastTransitionTime": now_iso(),
        "observedGeneration": generation,
    }


def ended(succeeded: bool, reason: str, message: str, generation: int) -> list[Condition]:
    """The conditions every end of a run sets, whatever ended it (an attempt, a cancel, a spec
    refused before any pod): ``Succeeded`` and ``Ready``, True only for a success, so that
    ``kubectl wait --for=condition=Ready`` (or ``=Succeeded``, ``=Succeeded=false``) waits for
    every terminal outcome."""
    return [
        condition("Succeeded", succeeded, reason, message, generation),
        condition("Ready", succeeded, reason, message, generation),
    ]


def unstuck(conditions: list[Condition], message: str, generation: int) -> list[Condition]:
    """``PodStuck`` set False when the attempt it was about ended (or the run is held): the
    next attempt's pod is a new one."""
    stuck = any(c.get("type") == "PodStuck" and c.get("status") == "True" for c in conditions)
    return [condition("PodStuck", False, "AttemptEnded", message, generation)] if stuck else []


def merge_conditions(current: list[Condition], updates: list[Condition]) -> list[Condition]:
    """Replace by type; keep lastTransitionTime when the status did not change."""
    by_type = {c["type"]: c for c in current}
    for update in updates:
        old = by_type.get(update["type"])
        kept = old.get("lastTransitionTime") if old is not None else None
        if old is not None and old.get("status") == update["status"] and kept is not None:
            update = {**update, "lastTransitionTime": kept}
        by_type[update["type"]] = update
    return list(by_type.values())


def started(
    status: TeamRunStatus, attempt: int, run_id: str, generation: int, work: str
) -> dict[str, Any]:
    """An attempt starts under the spec whose work digest is ``work``
    (``resources.specs.work_digest``; the same for every attempt until the run ends, the spec
    being frozen meanwhile)."""
    times = {} if status.get("startTime") else {"startTime": now_iso()}  # the first attempt's
    return {
        "runId": run_id,
        "attempt": attempt,
        "phase": "Running",
        "workDigest": work,
        "observedGeneration": generation,
        **times,
        "conditions": merge_conditions(
            status.get("conditions") or [],
            [
                condition(
                    "Progressing",
                    True,
                    "AttemptStarted",
                    f"attempt {attempt} is running",
                    generation,
                )
            ],
        ),
    }


def queued(status: TeamRunStatus, run_id: str, why: str, generation: int) -> dict[str, Any]:
    """The status of a run that waits for a slot (``why``: the limit it is held back by); the
    next attempt to start is ``attempt + 1``."""
    message = f"waiting for a slot: {why}"
    return {
        "runId": run_id,
        "phase": "Queued",
        "queuedAt": now_iso(),
        "observedGeneration": generation,
        "message": message[:1024],
        "conditions": merge_conditions(
            status.get("conditions") or [],
            [
                condition("Queued", True, "ConcurrencyLimit", message, generation),
                condition("Progressing", False, "Queued", message, generation),
            ],
        ),
    }


def admitted(
    status: TeamRunStatus, attempt: int, run_id: str, generation: int, work: str
) -> dict[str, Any]:
    """``started`` for a run that had been queued: it leaves the queue."""
    update = started(status, attempt, run_id, generation, work)
    note = condition("Queued", False, "Admitted", f"attempt {attempt} got a slot", generation)
    update["conditions"] = merge_conditions(update["conditions"], [note])
    update["queuedAt"] = None  # merge patch: remove
    update["message"] = f"attempt {attempt} got a slot and is running"
    return update


def after_attempt(
    status: TeamRunStatus,
    decision: Decision,
    record: dict[str, Any],
    generation: int,
    next_attempt: int | None,
    report: TerminationReport | None = None,
) -> dict[str, Any]:
    """The status after an attempt ended. ``report`` is the runner's termination report, parsed
    from its whole message (the attempt record keeps only its first 1024 characters)."""
    history = [*(status.get("attempts") or []), record][-MAX_ATTEMPT_HISTORY:]
    phase = "Rejected" if decision.reason == "Rejected" else PHASE_BY_ACTION[decision.action]
    final = decision.action in ("succeeded", "failed", "cancelled")
    waits = decision.action in ("awaiting_approval", "suspended")
    updates = [
        condition(
            "Progressing",
            not final and not waits,
            decision.reason,
            decision.message,
            generation,
        )
    ]
    if final:
        updates += ended(
            decision.action == "succeeded", decision.reason, decision.message, generation
        )
        updates.append(
            condition(
                "Failed", decision.action == "failed", decision.reason, decision.message, generation
            )
        )
    conditions: list[Condition] = status.get("conditions") or []
    updates += unstuck(conditions, decision.message, generation)
    polled: Condition = next((c for c in conditions if c.get("type") == POLLED), Condition())
    if polled.get("status") == "False":  # the end reads the checkpoint whatever its size
        message = "the attempt's end read the checkpoint"
        updates.append(condition(POLLED, True, "AttemptEnded", message, generation))
    if decision.action in ("suspended", "cancelled"):
        kind: ConditionType = "Suspended" if decision.action == "suspended" else "Cancelled"
        updates.append(condition(kind, True, "Requested", decision.message, generation))
    if decision.action == "awaiting_approval":
        updates.append(
            condition("AwaitingApproval", True, decision.reason, decision.message, generation)
        )
    new: dict[str, Any] = {
        "phase": phase,
        "attempts": history,
        "observedGeneration": generation,
        "message": masking.mask(decision.message)[:1024],
        "conditions": merge_conditions(status.get("conditions") or [], updates),
        **decision.counters,
    }
    if report is not None:
        if report.tasks is not None:
            new["taskSummary"] = f"{report.tasks.completed}/{report.tasks.total}"
        new["pendingApprovals"] = len(report.pending_approvals)
        if report.budget is not None:
            new["budget"] = report.budget.to_data()
            new["budgetSummary"] = budget_column(report.budget)
    if final:
        new["completionTime"] = now_iso()
    new["modelOutageSince"] = decision.outage_since  # None: merge patch removes it
    new["toolChangedSince"] = decision.tool_changed_since
    if next_attempt is not None:
        new["attempt"] = next_attempt
        start = datetime.now(UTC) + timedelta(seconds=decision.delay_seconds)
        new["nextAttemptAfter"] = format_iso(start)
    else:
        new["nextAttemptAfter"] = None  # merge patch: remove
    return new


def backoff_left(status: TeamRunStatus, now: datetime) -> float:
    """Seconds until the current attempt may start (0: now), from ``nextAttemptAfter``."""
    after = parse_iso(str(status.get("nextAttemptAfter") or ""))
    return max(0.0, (after - now).total_seconds()) if after is not None else 0.0


MAX_RETRIES_KEPT = 20


def retried(status: TeamRunStatus, requested: str, generation: int) -> dict[str, Any]:
    """A failed run taken up again (``oma retry``): it waits for its next attempt as ``Queued``
    (the concurrency limits apply), with its failure budget reset; the retry is recorded."""
    conditions: list[Condition] = status.get("conditions") or []
    failed: Condition = next((c for c in conditions if c.get("type") == "Failed"), Condition())
    attempt = int(status.get("attempt") or 0)
    budgets = ("failures", "disruptions", "oomKills")
    record = {
        "requested": requested,
        "retriedAt": now_iso(),
        "attempt": attempt,
        "failures": int(status.get("failures") or 0),
        "disruptions": int(status.get("disruptions") or 0),
        "oomKills": int(status.get("oomKills") or 0),
        "reason": failed.get("reason"),
    }
    message = (
        f"retried on request after attempt {attempt} failed ({failed.get('reason') or 'failed'});"
        " the budgets (failures, disruptions, OOM kills) start again"
    )
    return {
        "phase": "Queued",
        "queuedAt": now_iso(),
        **{budget: 0 for budget in budgets},
        "nextAttemptAfter": None,  # merge patch: remove
        "retries": [*(status.get("retries") or []), record][-MAX_RETRIES_KEPT:],
        "observedGeneration": generation,
        "message": message[:1024],
        "conditions": merge_conditions(
            status.get("conditions") or [],
            [
                condition("Failed", False, "Retried", message, generation),
                condition("Progressing", True, "Retried", message, generation),
                condition("Succeeded", None, "Retried", message, generation),
                condition("Ready", None, "Retried", message, generation),
            ],
        ),
        "completionTime": None,  # merge patch: remove (it runs again)
    }


RETRY_REFUSED = "SpecChangedSinceApproval"


def retry_refused(
    status: TeamRunStatus, requested: str, why: str, reason: str = RETRY_REFUSED
) -> dict[str, Any]:
    """A retry the operator did not act on (``why``): the run stays Failed as it was, and the
    request is recorded as handled, so it is not looked at again (a new ``oma retry`` is)."""
    record = {
        "requested": requested,
        "refusedAt": now_iso(),
        "attempt": int(status.get("attempt") or 0),
        "reason": reason,
        "message": why[:1024],
    }
    return {
        "retries": [*(status.get("retries") or []), record][-MAX_RETRIES_KEPT:],
        "message": f"retry refused: {why}"[:1024],
    }

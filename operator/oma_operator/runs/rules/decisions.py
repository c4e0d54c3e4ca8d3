"""What the operator does after an attempt ended (pure): next attempt, or a final state."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from oma.timeutil import format_iso, parse_iso
from oma_operator import masking
from oma_operator.resources.bodies import TeamRunStatus
from oma_operator.resources.models import RetryPolicy
from oma_operator.runs.rules.outcomes import Outcome

Action = Literal[
    "next_attempt", "succeeded", "failed", "awaiting_approval", "fenced", "suspended", "cancelled"
]
# Attempt ends a person should look at (the Kubernetes convention: Warning for what went
# wrong); a success, a wait for approval, an eviction or a newer attempt taking over are Normal.
TROUBLE_KINDS = frozenset({"permanent", "oom", "crash", "outage", "tool_changed"})
Hold = Literal["cancel", "suspend"]  # spec.cancel, spec.suspend (oma_operator.runs.rules.holds)
MAX_ATTEMPT_HISTORY = 50
CANCELLED = "cancelled on request (spec.cancel); the checkpoint is kept"
SUSPENDED = "suspended on request (spec.suspend): set it to false to resume from the checkpoint"
MAX_OUTAGE_BACKOFF_SECONDS = 300  # attempts during a provider outage: at most 5 minutes apart


@dataclass(frozen=True)
class Decision:
    action: Action
    counters: dict[str, int]
    reason: str
    message: str
    delay_seconds: int = 0
    # status.modelOutageSince after this decision: when the current provider outage began
    # (None: there is none, the field is removed).
    outage_since: str | None = None
    # status.toolChangedSince after this decision: since when the run holds for a changed tool.
    tool_changed_since: str | None = None


def decide(
    outcome: Outcome,
    counters: TeamRunStatus,
    policy: RetryPolicy,
    attempt: int = 0,
    hold: Hold | None = None,
    stopped_for_hold: bool = False,
    now: datetime | None = None,
) -> Decision:
    """``counters`` is the TeamRun's status (its budgets' counts, its current ``attempt``);
    ``attempt`` the one that ended; ``hold`` what the spec asks for now. A held run gets no
    next attempt: ``cancel`` ends it (unless it succeeded or failed for good first),
    ``suspend`` leaves it ``Suspended``. The pod the operator stopped for the hold
    (``stopped_for_hold``) counts against no budget, also when the hold was cleared before
    its end is recorded. ``now`` (default: the clock) measures a provider outage."""
    decision = _decide(outcome, counters, policy, attempt, now or datetime.now(UTC))
    used = _budgets_used(counters)
    before = {key: used.get(key, 0) for key in decision.counters}
    if hold is None and stopped_for_hold and outcome.kind == "disruption":
        # Stopped for a hold that was cleared before this end was recorded: the next attempt
        # starts as the cleared hold asks, and the stop costs no budget.
        message = "attempt stopped for a hold that was cleared since; starting the next one"
        return Decision("next_attempt", before, "StoppedForHold", message)
    if hold is None or decision.action not in ("next_attempt", "awaiting_approval"):
        return decision
    if hold == "cancel":
        return Decision("cancelled", before, "Cancelled", CANCELLED)
    if decision.action == "next_attempt":
        return Decision("suspended", before, "Suspended", SUSPENDED)
    return decision  # waiting for a person already: the gate decides when it goes on


def _budgets_used(status: TeamRunStatus) -> dict[str, int]:
    return {
        "disruptions": int(status.get("disruptions") or 0),
        "failures": int(status.get("failures") or 0),
        "oomKills": int(status.get("oomKills") or 0),
    }


def _decide(
    outcome: Outcome, counters: TeamRunStatus, policy: RetryPolicy, attempt: int, now: datetime
) -> Decision:
    counts = _budgets_used(counters)
    if outcome.kind == "outage":
        return _outage(outcome, counters, policy, attempt, now)
    if outcome.kind == "tool_changed":
        return _tool_changed(outcome, counters, policy, attempt, now)
    if outcome.kind == "succeeded":
        return Decision("succeeded", counts, "RunSucceeded", "the run completed")
    if outcome.kind == "suspended":
        return Decision("awaiting_approval", counts, "AwaitingApproval", outcome.said)
    if outcome.kind == "fenced":
        if int(counters.get("attempt") or 0) > attempt:
            return Decision(
                "fenced", counts, "Fenced", "a newer attempt owns the run; this attempt stopped"
            )
        return Decision("failed", counts, "Superseded", _superseded(attempt))
    if outcome.reason == "CheckpointLost":
        return Decision("failed", counts, "CheckpointLost", outcome.said)
    if outcome.kind == "permanent":
        report = outcome.report
        if report is not None and report.status == "rejected":
            return Decision("failed", counts, "Rejected", "a reviewer rejected the run")
        return Decision("failed", counts, "PermanentFailure", outcome.said)
    budget_key, limit = {
        "disruption": ("disruptions", policy.max_disruptions),
        "oom": ("oomKills", policy.max_oom_kills),
        "crash": ("failures", policy.max_failures),
    }[outcome.kind]
    counts[budget_key] += 1
    if counts[budget_key] > limit:
        return Decision(
            "failed",
            counts,
            f"{budget_key[0].upper()}{budget_key[1:]}Exhausted",
            f"{counts[budget_key]} {budget_key} exceed the budget of {limit}: "
            f"{outcome.reason} {outcome.said}".strip(),
        )
    delay = policy.backoff_seconds * 2 ** (counts["failures"] - 1) if outcome.kind == "crash" else 0
    return Decision(
        "next_attempt",
        counts,
        outcome.reason,
        f"attempt ended ({outcome.reason}); starting the next one",
        min(delay, 3600),
    )


def _outage(
    outcome: Outcome, status: TeamRunStatus, policy: RetryPolicy, attempt: int, now: datetime
) -> Decision:
    """A model provider that stayed unavailable: the next attempt after a backoff, no budget
    used, until the outage (since the first of the attempts that ended so, one after another)
    has lasted ``modelOutageSeconds``."""
    counts = _budgets_used(status)
    since = outage_began(status, outcome, now)
    waited = max(0.0, (now - since).total_seconds())
    limit = policy.model_outage_seconds
    said = masking.mask(outcome.said)[:600]
    if waited >= limit:
        return Decision(
            "failed",
            counts,
            "ModelOutageExhausted",
            f"the model provider has been unavailable for {waited:.0f}s, "
            f"retryPolicy.modelOutageSeconds is {limit}: {said}",
        )
    delay = _backoff(status, "outage", policy)
    return Decision(
        "next_attempt",
        counts,
        "ModelUnavailable",
        f"the model provider is unavailable ({said}); attempt {attempt + 1} in {delay}s, "
        f"for up to {limit - waited:.0f}s more of this outage",
        delay,
        outage_since=format_iso(since),
    )


def _backoff(status: TeamRunStatus, kind: str, policy: RetryPolicy) -> int:
    """The wait before the next attempt of a run that waits something out: ``backoffSeconds``
    doubled for each attempt before this one that ended the same way (since the last
    ``oma retry``, which starts the run's waits again), at most 5 minutes."""
    retries = status.get("retries") or []
    retried_after = max((int(r.get("attempt") or 0) for r in retries), default=None)
    streak = 1  # this attempt, and the ones before it that ended the same way
    for record in reversed(status.get("attempts") or []):
        if record.get("outcome") != kind:
            break
        if retried_after is not None and int(record.get("attempt") or 0) <= retried_after:
            break
        streak += 1
    delay: int = policy.backoff_seconds * 2 ** min(streak - 1, 16)
    return min(delay, MAX_OUTAGE_BACKOFF_SECONDS)


def _tool_changed(
    outcome: Outcome, status: TeamRunStatus, policy: RetryPolicy, attempt: int, now: datetime
) -> Decision:
    """A resumed attempt found a tool it recorded changed or gone on its server and called
    nothing: the run holds, trying again after a backoff (no budget used) in case the tool is
    back, until it has held ``toolChangeSeconds``; then it fails, and ``oma retry`` takes it
    up again once the tool is back."""
    counts = _budgets_used(status)
    since = parse_iso(str(status.get("toolChangedSince") or "")) or now
    held = max(0.0, (now - since).total_seconds())
    limit = policy.tool_change_seconds
    said = masking.mask(outcome.said)[:600]
    if held >= limit:
        return Decision(
            "failed",
            counts,
            "ToolChangeExhausted",
            f"held {held:.0f}s for a changed tool, retryPolicy.toolChangeSeconds is {limit}; "
            f"once the tool is back, 'oma retry' resumes the run: {said}",
        )
    delay = _backoff(status, "tool_changed", policy)
    return Decision(
        "next_attempt",
        counts,
        "ToolChanged",
        f"holding: {said}; attempt {attempt + 1} in {delay}s looks again, for up to "
        f"{limit - held:.0f}s more",
        delay,
        tool_changed_since=format_iso(since),
    )


def outage_began(status: TeamRunStatus, outcome: Outcome, now: datetime) -> datetime:
    """When the outage that ended this attempt began: where the attempt's model calls began
    failing, if one of them worked first (the provider had recovered: a new outage); else the
    outage the attempts before it waited out (``modelOutageSince``), else that same point."""
    report = outcome.report
    found = report.metrics if report is not None and isinstance(report.metrics, dict) else {}
    failing = parse_iso(str(found.get("modelFailingSince") or ""))
    recovered = type(found.get("modelOk")) is int and found["modelOk"] > 0
    if recovered and failing is not None:
        return min(failing, now)
    before = parse_iso(str(status.get("modelOutageSince") or ""))
    return before or (min(failing, now) if failing is not None else now)


def attempt_record(attempt: int, outcome: Outcome, pod: str, ended_at: str) -> dict[str, Any]:
    return {
        "attempt": attempt,
        "pod": pod,
        "outcome": outcome.kind,
        "reason": outcome.reason,
        "exitCode": outcome.exit_code,
        "message": masking.mask(outcome.said)[:1024],  # a runner's: it may quote a Secret
        "endedAt": ended_at,
    }


def _superseded(attempt: int) -> str:
    return (
        f"attempt {attempt} stopped: another writer replaced this run's checkpoint in the store, "
        "and no newer attempt of this TeamRun exists (another TeamRun, an 'oma run' or a person "
        "uses the same store and run id). Nothing more runs here: find that writer "
        "('oma checkpoint show --tenant <namespace> --run-id <runId>' names its attempt and "
        "pod), then create a TeamRun with a new runId if the work is still to be done"
    )


def end_event_type(kind: str, action: Action, *, unconfirmed: bool) -> Literal["Normal", "Warning"]:
    """The type of the Event an attempt's end posts: ``Warning`` when the attempt failed (a
    crash, out of memory, an outage, a changed tool, a permanent error), the run failed, or a
    success could not be confirmed; else ``Normal``."""
    if unconfirmed or action == "failed" or kind in TROUBLE_KINDS:
        return "Warning"
    return "Normal"

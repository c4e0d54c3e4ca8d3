"""``spec.suspend`` and ``spec.cancel`` (pure): what a TeamRun's hold asks for, and its status.

A hold never interrupts a step: the operator deletes the runner pod, the runner drains at its
next durable boundary (SIGTERM) and exits, and the attempt's end is recorded with the hold in
mind (``decisions.decide``): ``Suspended`` (no next attempt until the field is cleared) or
``Cancelled`` (final). A run with no pod (queued, waiting for approvals, in a backoff, created
suspended) is held at once. Clearing ``suspend`` queues the run's next attempt, which resumes
from the checkpoint under the concurrency limits.
"""

from __future__ import annotations

from typing import Any, Literal

from oma.timeutil import now_iso
from oma_operator.resources.bodies import TeamRunStatus
from oma_operator.resources.models import TeamRunSpec
from oma_operator.resources.phases import FINAL_PHASES, WAITING_PHASES, ConditionType
from oma_operator.runs.rules.decisions import CANCELLED, SUSPENDED, Hold
from oma_operator.runs.rules.status import condition, ended, merge_conditions, unstuck

Action = Literal["cancel", "suspend", "resume"]


def hold_of(spec: TeamRunSpec) -> Hold | None:
    if spec.cancel:
        return "cancel"
    return "suspend" if spec.suspend else None


def action_for(phase: str | None, hold: Hold | None) -> Action | None:
    """What the operator must do for a run in ``phase`` with ``hold`` (None: nothing)."""
    if phase in FINAL_PHASES:
        return None
    if hold == "cancel":
        return "cancel"
    if hold == "suspend":
        # Waiting for a person already: no pod to stop (an approved gate's next attempt is
        # held when it would start).
        return None if phase in WAITING_PHASES else "suspend"
    return "resume" if phase == "Suspended" else None


def held(status: TeamRunStatus, hold: Hold, generation: int) -> dict[str, Any]:
    """The status of a run held while no pod of it runs."""
    cancel = hold == "cancel"
    message = CANCELLED if cancel else SUSPENDED
    reason: ConditionType = "Cancelled" if cancel else "Suspended"
    updates = [condition("Progressing", False, reason, message, generation)]
    updates.append(condition(reason, True, "Requested", message, generation))
    if status.get("phase") == "Queued":
        updates.append(condition("Queued", False, reason, message, generation))
    updates += unstuck(status.get("conditions") or [], message, generation)
    times: dict[str, Any] = {}
    if cancel:  # the end of the run
        updates += ended(False, "Cancelled", message, generation)
        times["completionTime"] = now_iso()
    return {
        **times,
        "phase": reason,
        "observedGeneration": generation,
        "message": message,
        "queuedAt": None,  # merge patch: remove
        "nextAttemptAfter": None,
        # A run held between the attempts of a provider outage or of a changed tool: that
        # wait ends here, as when its pod is stopped for the hold; the clock starts again
        # from the first such attempt after the run is let go.
        "modelOutageSince": None,
        "toolChangedSince": None,
        "conditions": merge_conditions(status.get("conditions") or [], updates),
    }


def resumed(status: TeamRunStatus, generation: int) -> dict[str, Any]:
    """A suspended run let go again: it waits for its next attempt as ``Queued`` (the
    concurrency limits apply), which resumes from the checkpoint."""
    message = (
        "resumed on request (spec.suspend cleared); the next attempt resumes from the checkpoint"
    )
    return {
        "phase": "Queued",
        "queuedAt": now_iso(),
        "observedGeneration": generation,
        "message": message,
        "conditions": merge_conditions(
            status.get("conditions") or [],
            [
                condition("Suspended", False, "Resumed", message, generation),
                condition("Progressing", True, "Resumed", message, generation),
            ],
        ),
    }

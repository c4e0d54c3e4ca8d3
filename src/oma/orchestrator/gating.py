"""Run-level approval gates: plan, task dispatch and round gates, and durable suspension."""

from __future__ import annotations

from collections.abc import Sequence

from oma.approval.errors import DurableApprovalError
from oma.approval.models import ApprovalRequest
from oma.approval.requests import create_approval_request
from oma.errors import AttemptInterruptedError, CheckpointFencedError, StoreError
from oma.orchestrator.context import RunContext, Stop
from oma.orchestrator.events import OrchestratorEvent
from oma.orchestrator.saver import save_run
from oma.tasks.task import Task

PLAN_BOUNDARY = "coordinator-plan"

# Errors of a save that end the attempt rather than describe what was being saved: a newer
# attempt took the run over or its checkpoint is gone (fenced, exit 12; lost, 13), or the
# store failed (exit 1 when transient). A suspension, a gate or a task that meets one lets it
# through unchanged, so the process exits with its code: as an approval or task failure it
# would be a permanent failure of the run (exit 2) that no retry repairs. So does a step whose
# outcome is unknown (``AttemptInterruptedError``: a tool's server lost mid-call).
ENDS_THE_ATTEMPT: tuple[type[Exception], ...] = (
    CheckpointFencedError,
    StoreError,
    AttemptInterruptedError,
)


def dispatch_request(run_id: str, task: Task, reason: str | None = None) -> ApprovalRequest:
    return create_approval_request(
        run_id=run_id,
        scope="task_dispatch",
        boundary=task.id,
        content={"kind": "task_dispatch", "task": task.to_wire()},
        reason=reason,
    )


def round_boundary(completed: Sequence[str], upcoming: Sequence[str]) -> str:
    return f"{','.join(completed)}->{','.join(upcoming)}"


def round_request(
    run_id: str, completed: list[Task], upcoming: list[Task], reason: str | None = None
) -> ApprovalRequest:
    return create_approval_request(
        run_id=run_id,
        scope="task_round",
        boundary=round_boundary([t.id for t in completed], [t.id for t in upcoming]),
        content={
            "kind": "task_round",
            "completedTasks": [t.to_wire() for t in completed],
            "nextTasks": [t.to_wire() for t in upcoming],
        },
        reason=reason,
    )


def plan_request(
    run_id: str, tasks: list[Task], plan_only: bool, reason: str | None = None
) -> ApprovalRequest:
    return create_approval_request(
        run_id=run_id,
        scope="plan",
        boundary=PLAN_BOUNDARY,
        content={
            "kind": "plan",
            "continuation": "plan_only" if plan_only else "execute",
            "tasks": [t.to_wire() for t in tasks],
        },
        reason=reason,
    )


async def persist_pending_approval(context: RunContext, request: ApprovalRequest) -> None:
    """Checkpoint the request strictly, then create its ledger row, then report it.

    When the save fails the request is dropped again and nothing is reported (no row, no
    ``approval_pending``). A failure of the store or of the attempt (``ENDS_THE_ATTEMPT``)
    propagates unchanged; any other (the snapshot could not be built) is the request's:
    ``APPROVAL_INTEGRITY_ERROR``, as in the reference."""
    if context.ledger is None:
        raise DurableApprovalError(
            "APPROVAL_ATOMIC_STORE_REQUIRED",
            "A gate answered suspend, but the run has no checkpoint: durable approval needs "
            "checkpoint persistence in a store with compare_and_set.",
        )
    context.ledger.assert_atomic_support()
    context.pending_approvals.append(request)
    try:
        await save_run(context, strict=True)
    except ENDS_THE_ATTEMPT:
        context.pending_approvals.remove(request)
        raise
    except Exception as exc:
        context.pending_approvals.remove(request)
        raise DurableApprovalError(
            "APPROVAL_INTEGRITY_ERROR",
            f"Approval request {request.id} could not be checkpointed; suspension was not "
            f"reported ({exc}).",
        ) from exc
    await context.ledger.ensure_request(request)
    context.emit(OrchestratorEvent("approval_pending", data={"request": request}))


def callback_failure(what: str, error: Exception) -> Stop:
    return Stop(
        code="error",
        message=f"{what} callback failed: {error}",
        skip_reason=f"Skipped: {what.lower()} callback error — {error}",
    )

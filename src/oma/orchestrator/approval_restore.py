"""Approval continuation on restore (reference §4.7): check, re-derive, attach, decide."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NoReturn

from oma.agent.result import RunStatus
from oma.approval.errors import DurableApprovalError
from oma.approval.ledger import DurableApprovalLedger
from oma.approval.models import (
    TOOL_CALL_SCOPES,
    ApprovalDecisionRecord,
    ApprovalRequest,
    hash_approval_request,
)
from oma.checkpoint.snapshot import CheckpointSnapshotV4
from oma.orchestrator.context import RunContext
from oma.orchestrator.gating import PLAN_BOUNDARY, round_boundary
from oma.orchestrator.saver import save_run

REJECTED = RunStatus(code="rejected", message="Durable approval rejected.")
PENDING = RunStatus(code="suspended", message="Durable approval decision pending.")


@dataclass
class Continuation:
    """What restore does next: stop with ``status``, or go on (``status`` is ``None``)."""

    status: RunStatus | None = None
    plan_only: bool = False
    undecided: list[ApprovalRequest] = field(default_factory=list)


async def continue_approvals(context: RunContext, snapshot: CheckpointSnapshotV4) -> Continuation:
    ledger = context.ledger
    if ledger is None or not (snapshot.pending_approvals or snapshot.approval_decisions):
        return Continuation()
    await _check_consumed(ledger, snapshot)
    tasks = {task.id: task.to_wire() for task in snapshot.queue.tasks}
    calls = {
        (state.task_id, call.call.id): (state, call)
        for state in snapshot.in_flight_tasks
        for call in state.pending_tool_calls or []
    }
    outcome = Continuation()
    rejected_boundary = False
    for request in snapshot.pending_approvals:
        if request.run_id != context.identity.run_id:
            raise DurableApprovalError(
                "APPROVAL_INTEGRITY_ERROR",
                f"Pending approval {request.id} belongs to run {request.run_id}.",
            )
        if request.scope == "budget" and not _budget_still_asked(context, request):
            continue  # the spec's limit changed since: the run asks again if it must
        if request.scope != "budget":
            _check_still_current(request, tasks, calls)
        record = await ledger.ensure_request(request)
        if record.decision is None:
            outcome.undecided.append(request)
        elif not _apply(context, request, record.decision, outcome):
            rejected_boundary = True
    return await _after_decisions(context, outcome, rejected_boundary)


async def _check_consumed(ledger: DurableApprovalLedger, snapshot: CheckpointSnapshotV4) -> None:
    """Every decision the checkpoint says it consumed is the ledger's, unchanged."""
    for consumed in snapshot.approval_decisions:
        stored = await ledger.get(consumed.request_id)
        if stored is None or stored.decision is None or stored.decision != consumed:
            raise DurableApprovalError(
                "APPROVAL_INTEGRITY_ERROR",
                f"Checkpointed decision for {consumed.request_id} does not match the ledger.",
            )


def _apply(
    context: RunContext,
    request: ApprovalRequest,
    decision: ApprovalDecisionRecord,
    outcome: Continuation,
) -> bool:
    """Attach a decided request to the run; False for a rejected boundary (not a tool call)."""
    if decision not in context.approval_decisions:
        context.approval_decisions.append(decision)
        context.journal("approval/decision", {"decision": decision.to_data()})
    if request.scope in TOOL_CALL_SCOPES:
        _attach(context, request, decision)
        return True
    approved = decision.decision == "approved"
    if approved and request.scope == "budget":
        content = request.content
        assert context.budget is not None  # _budget_still_asked
        context.budget.raise_limit(content["limit"], content["current"], content["proposed"])
    if approved and request.scope == "task_dispatch":
        context.approved_dispatch[request.boundary] = request
        return True  # stays pending until the dispatch consumes it
    if approved and request.scope == "plan" and request.content.get("continuation") == "plan_only":
        outcome.plan_only = True
    context.pending_approvals = [r for r in context.pending_approvals if r.id != request.id]
    return approved


async def _after_decisions(
    context: RunContext, outcome: Continuation, rejected_boundary: bool
) -> Continuation:
    """Stop for what is undecided or rejected; else go on."""
    if outcome.undecided:
        outcome.status = PENDING
        return outcome
    if rejected_boundary:
        for task in context.queue.skip_remaining("Skipped: durable approval rejected."):
            del task  # skipped tasks are reported through the result
        await save_run(context, strict=True)
        outcome.status = REJECTED
        return outcome
    decisions = context.approval_decisions
    if any(d.decision == "rejected" and d.scope not in TOOL_CALL_SCOPES for d in decisions):
        outcome.status = REJECTED  # a rejection is terminal across restores
        return outcome
    if outcome.plan_only and not context.goal:
        raise DurableApprovalError(
            "APPROVAL_INTEGRITY_ERROR", "An approved plan-only request needs the run's goal."
        )
    return outcome


def _budget_still_asked(context: RunContext, request: ApprovalRequest) -> bool:
    """Whether a budget request still asks about the limit the run has now; one that does not
    (the spec's budget was changed or removed since) is dropped, undecided or not."""
    content, account = request.content, context.budget
    if account is not None and account.limit(content["limit"]) == content["current"]:
        return True
    context.pending_approvals = [r for r in context.pending_approvals if r.id != request.id]
    return False


def _check_still_current(
    request: ApprovalRequest,
    tasks: dict[str, dict[str, Any]],
    calls: dict[tuple[str, str], Any],
) -> None:
    content = request.content
    if request.scope == "plan":
        if request.boundary != PLAN_BOUNDARY:
            _stale(request, "its boundary is not the coordinator plan")
        rebuilt = {**content, "tasks": list(tasks.values())}
    elif request.scope == "task_dispatch":
        task = tasks.get(request.boundary)
        if task is None:
            _stale(request, f"task {request.boundary} is gone")
        rebuilt = {**content, "task": task}
    elif request.scope == "task_round":
        ids = [[t.get("id") for t in content.get(k, [])] for k in ("completedTasks", "nextTasks")]
        if any(task_id not in tasks for group in ids for task_id in group):
            _stale(request, "a task of the round is gone")
        if round_boundary(*ids) != request.boundary:
            raise DurableApprovalError(
                "APPROVAL_INTEGRITY_ERROR", f"Round boundary of {request.id} does not match."
            )
        rebuilt = {
            **content,
            "completedTasks": [tasks[i] for i in ids[0] if i],
            "nextTasks": [tasks[i] for i in ids[1] if i],
        }
    else:
        rebuilt = _current_tool_content(request, calls)
    if hash_approval_request(request.scope, request.boundary, rebuilt) != request.request_hash:
        _stale(request, "the checkpointed content differs from what was requested")


def _current_tool_content(
    request: ApprovalRequest, calls: dict[tuple[str, str], Any]
) -> dict[str, Any]:
    content = request.content
    found = calls.get((str(content.get("taskId")), str(content.get("toolCallId"))))
    if found is None:
        _stale(request, "its tool call is no longer pending")
    state, call = found
    ok = (
        call.commit is None
        and call.approval_request is not None
        and call.approval_request.id == request.id
        and state.assignee == content.get("agentName")
        and call.call.name == content.get("toolName")
        and request.boundary == f"{state.task_id}:{call.call.id}"
    )
    if not ok:
        _stale(request, "its tool call was committed or changed")
    return {**content, "rawInput": call.call.input}


def _attach(context: RunContext, request: ApprovalRequest, decision: Any) -> None:
    task_id = str(request.content.get("taskId"))
    state = context.resume_states.get(task_id)
    if state is None:
        _stale(request, f"task {task_id} has no resumable state")
    calls = [
        call.model_copy(update={"approval_decision": decision})
        if call.approval_request is not None and call.approval_request.id == request.id
        else call
        for call in state.pending_tool_calls or []
    ]
    context.resume_states[task_id] = state.model_copy(update={"pending_tool_calls": calls})


def _stale(request: ApprovalRequest, why: str) -> NoReturn:
    raise DurableApprovalError(
        "APPROVAL_STALE_DECISION", f"Approval {request.id} no longer matches the run: {why}."
    )

"""A readable account of a stored checkpoint: what is done, what is in flight, what waits.

Pure: built from a snapshot (any version) and the run's attempt log, so ``oma checkpoint show``
and anything else that reports on a run print the same facts.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from oma.checkpoint.attempts import AttemptLog, AttemptRecord, ForkedFrom, ForkRef, run_trace_id
from oma.checkpoint.runner_state import InFlightTask, PendingToolCall
from oma.checkpoint.snapshot import (
    CheckpointSnapshot,
    CheckpointSnapshotV1,
    CheckpointSnapshotV3,
    CheckpointSnapshotV4,
)
from oma.wire import WireModel

# committed: its result is durable and is replayed, never run again. not_committed: the call
# may have started before the attempt stopped; a resume runs it again (tools get the same
# ``tool_call_id`` so they can deduplicate). The other states wait for or carry a decision.
# uncertain: a non-idempotent call that started and did not commit; a resume asks a reviewer
# (an uncertain_tool_call request), who may record it as done without running it.
ToolCallState = Literal[
    "committed",
    "not_committed",
    "uncertain",
    "awaiting_approval",
    "approved_not_run",
    "recorded_done",
    "rejected",
]


class _Report(WireModel):
    omit_none = False  # scripts reading --json should not have to guess what is absent


class TaskLine(_Report):
    id: str
    title: str
    status: str
    assignee: str | None = None


class ToolCallLine(_Report):
    id: str
    tool: str
    state: ToolCallState
    approval_request_id: str | None = None


class InFlightLine(_Report):
    task_id: str
    assignee: str
    phase: str
    turns: int
    committed_tool_calls: int
    tool_calls: list[ToolCallLine]  # of the turn in progress
    earlier_tool_calls: list[str]  # the tools of the calls done in its earlier turns, in order


class ApprovalLine(_Report):
    request_id: str
    scope: str
    boundary: str
    state: Literal["pending", "approved", "rejected"]
    reviewer: str | None = None


class RunEndLine(_Report):
    """How the latest attempt ended, from the attempt log (``outcome`` ``None``: no end was
    recorded: the attempt was killed outright, or it is still running)."""

    attempt: int
    outcome: str | None
    message: str | None
    ended_at: str | None


class CheckpointSummary(_Report):
    run_id: str | None
    key: str
    version: int
    mode: str
    saved_at: str
    attempt: int | None
    goal: str | None = None
    task_counts: dict[str, int]
    tasks: list[TaskLine]
    in_flight: list[InFlightLine]
    approvals: list[ApprovalLine]
    attempts: list[AttemptRecord] | None
    trace_id: str | None  # the run's trace (oma.tracing), from the attempt log
    last_attempt: RunEndLine | None
    shared_memory_entries: int | None
    forked_from: ForkedFrom | None = None  # lineage, from the attempt logs
    forks: list[ForkRef] = Field(default_factory=list)


def summarize(
    snapshot: CheckpointSnapshot, key: str, attempt_log: AttemptLog | None
) -> CheckpointSummary:
    if isinstance(snapshot, CheckpointSnapshotV1):
        run_id, attempt = snapshot.run_id, None
    else:
        run_id, attempt = snapshot.identity.run_id, snapshot.identity.attempt
    tasks = [
        TaskLine(id=task.id, title=task.title, status=task.status, assignee=task.assignee)
        for task in snapshot.queue.tasks
    ]
    counts: dict[str, int] = {}
    for task in tasks:
        counts[task.status] = counts.get(task.status, 0) + 1
    in_flight = (
        [_in_flight(task) for task in snapshot.in_flight_tasks]
        if isinstance(snapshot, CheckpointSnapshotV3 | CheckpointSnapshotV4)
        else []
    )
    return CheckpointSummary(
        run_id=run_id,
        key=key,
        version=snapshot.version,
        mode=snapshot.mode,
        saved_at=snapshot.created_at,
        attempt=attempt,
        goal=snapshot.goal,
        task_counts=counts,
        tasks=tasks,
        in_flight=in_flight,
        approvals=_approvals(snapshot) if isinstance(snapshot, CheckpointSnapshotV4) else [],
        attempts=attempt_log.attempts if attempt_log is not None else None,
        trace_id=run_trace_id(attempt_log) if attempt_log is not None else None,
        last_attempt=_last_attempt(attempt_log),
        shared_memory_entries=(
            len(snapshot.shared_memory.entries) if snapshot.shared_memory is not None else None
        ),
        forked_from=attempt_log.forked_from if attempt_log is not None else None,
        forks=(attempt_log.forks or []) if attempt_log is not None else [],
    )


def _last_attempt(attempt_log: AttemptLog | None) -> RunEndLine | None:
    if attempt_log is None or not attempt_log.attempts:
        return None
    last = max(attempt_log.attempts, key=lambda record: record.attempt)
    return RunEndLine(
        attempt=last.attempt, outcome=last.outcome, message=last.message, ended_at=last.ended_at
    )


def _in_flight(task: InFlightTask) -> InFlightLine:
    calls = [_tool_call(pending) for pending in task.pending_tool_calls or []]
    return InFlightLine(
        task_id=task.task_id,
        assignee=task.assignee,
        phase=task.phase,
        turns=task.turns,
        committed_tool_calls=sum(1 for call in calls if call.state == "committed"),
        tool_calls=calls,
        earlier_tool_calls=[record.tool_name for record in task.tool_calls],
    )


def _tool_call(pending: PendingToolCall) -> ToolCallLine:
    request = pending.approval_request
    state: ToolCallState
    if pending.commit is not None:
        state = "committed"
    elif pending.approval_decision is not None:
        decision = pending.approval_decision
        if decision.resolution == "done":
            state = "recorded_done"
        else:
            state = "approved_not_run" if decision.decision == "approved" else "rejected"
    elif request is not None:
        state = "uncertain" if request.scope == "uncertain_tool_call" else "awaiting_approval"
    elif pending.started is not None:
        state = "uncertain"
    else:
        state = "not_committed"
    return ToolCallLine(
        id=pending.call.id,
        tool=pending.call.name,
        state=state,
        approval_request_id=request.id if request is not None else None,
    )


def _approvals(snapshot: CheckpointSnapshotV4) -> list[ApprovalLine]:
    """One line per request: decided ones with the decision, the rest pending."""
    boundaries = {request.id: request.boundary for request in snapshot.pending_approvals}
    decided = {decision.request_id: decision for decision in snapshot.approval_decisions}
    lines = [
        ApprovalLine(
            request_id=request.id, scope=request.scope, boundary=request.boundary, state="pending"
        )
        for request in snapshot.pending_approvals
        if request.id not in decided
    ]
    lines += [
        ApprovalLine(
            request_id=decision.request_id,
            scope=decision.scope,
            boundary=boundaries.get(decision.request_id, ""),
            state=decision.decision,
            reviewer=decision.reviewer.id,
        )
        for decision in snapshot.approval_decisions
    ]
    return lines

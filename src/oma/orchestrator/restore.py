"""Rebuilding a run from its latest snapshot (reference §4.5)."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from oma.agent.result import AgentRunResult, RunStatus, Usage
from oma.approval.models import TOOL_CALL_SCOPES
from oma.checkpoint.runner_state import InFlightTask
from oma.checkpoint.snapshot import CheckpointSnapshot, CheckpointSnapshotV3, CheckpointSnapshotV4
from oma.errors import OmaError
from oma.orchestrator.context import RunContext
from oma.orchestrator.events import ProgressCallback
from oma.orchestrator.identity import restored_identity
from oma.tasks.loading import validate_dependency_graph
from oma.tasks.queue import TaskQueue
from oma.team import Team


class InvalidCheckpointStateError(OmaError):
    """Raised on restore when a valid snapshot holds a run that cannot be rebuilt: task metadata or
    dependencies that do not hold, or in-flight state that fits neither its task nor the team."""

    code = "INVALID_CHECKPOINT_STATE"


async def rebuild_context(
    snapshot: CheckpointSnapshot,
    team: Team,
    *,
    requested_run_id: str | None,
    metadata: dict[str, Any] | None,
    emit: ProgressCallback | None,
    max_concurrency: int,
) -> RunContext:
    identity = restored_identity(snapshot, requested_run_id)
    shared = team.shared_memory
    if shared is not None:
        if snapshot.shared_memory is not None:
            await shared.restore(snapshot.shared_memory)
        elif snapshot.turn_count is not None:
            shared.turn_count = snapshot.turn_count
    if snapshot.message_bus is not None:
        team.bus.restore(snapshot.message_bus)
    try:
        queue = TaskQueue.from_snapshot(snapshot.queue, reset_in_progress=True)
    except ValueError as exc:  # a task's metadata as the reference re-validates it on restore
        raise InvalidCheckpointStateError(f"Invalid checkpoint task: {exc}") from exc
    try:
        validate_dependency_graph(queue.tasks)
    except OmaError as exc:
        raise InvalidCheckpointStateError(f"Invalid checkpoint task dependencies: {exc}") from exc
    context = RunContext(
        team=team,
        queue=queue,
        identity=identity,
        mode=snapshot.mode,
        emit_event=emit,
        goal=snapshot.goal,
        metadata=metadata if metadata is not None else snapshot.metadata,
        max_concurrency=max_concurrency,
    )
    if isinstance(snapshot, CheckpointSnapshotV3 | CheckpointSnapshotV4):
        context.resume_states = _in_flight_states(snapshot, team)
    if isinstance(snapshot, CheckpointSnapshotV4):
        # Tool-call requests live on their in-flight calls; only gate requests are kept here.
        context.pending_approvals = [
            r for r in snapshot.pending_approvals if r.scope not in TOOL_CALL_SCOPES
        ]
        context.approval_decisions = list(snapshot.approval_decisions)
    for completed in snapshot.completed_task_results:
        task = queue.find(completed.task_id)
        context.results[completed.task_id] = _agent_result(
            completed.agent_result, completed.result or (task.result if task else None) or ""
        )
    return context


def _in_flight_states(
    snapshot: CheckpointSnapshotV3 | CheckpointSnapshotV4, team: Team
) -> dict[str, InFlightTask]:
    in_progress = set(snapshot.queue.in_progress) | {
        t.id for t in snapshot.queue.tasks if t.status == "in_progress"
    }
    tasks = {task.id: task for task in snapshot.queue.tasks}
    states: dict[str, InFlightTask] = {}
    for state in snapshot.in_flight_tasks:
        task = tasks.get(state.task_id)
        if task is None or state.task_id not in in_progress:
            raise InvalidCheckpointStateError(
                f"Invalid checkpoint in-flight state: task {state.task_id} is not in progress"
            )
        if task.assignee != state.assignee:
            raise InvalidCheckpointStateError(
                f"Invalid checkpoint in-flight state: task {state.task_id} is assigned to "
                f"{task.assignee!r}, its runner state to {state.assignee!r}"
            )
        if state.assignee not in team.roster:
            raise InvalidCheckpointStateError(
                f"cannot resume task {state.task_id}: agent {state.assignee!r} is not in team "
                f"{team.name!r} (agents: {', '.join(team.roster)})"
            )
        states[state.task_id] = state
    return states


def _agent_result(raw: dict[str, Any] | None, output: str) -> AgentRunResult:
    if raw is not None:
        try:
            return AgentRunResult.model_validate(raw, strict=False)
        except ValidationError:
            pass  # a result we cannot type keeps its output through the minimal form below
    return AgentRunResult(
        success=True, status=RunStatus(code="ok"), output=output, token_usage=Usage()
    )

"""A run's state as a checkpoint snapshot: the model (``build_snapshot``) and, for saves, the
same document as JSON built incrementally (``encode_snapshot``: the unchanged parts of a
conversation are not converted again at every boundary).
"""

from __future__ import annotations

from typing import Any

from oma.checkpoint.manager import snapshot_metadata
from oma.checkpoint.queue_snapshot import TaskQueueSnapshot
from oma.checkpoint.snapshot import (
    CheckpointSnapshotV4,
    CheckpointSnapshotV5,
    CompletedTaskCheckpoint,
    RunIdentityCheckpoint,
    RunJournalRef,
)
from oma.orchestrator.context import RunContext
from oma.orchestrator.snapshot_wire import EncodedSnapshot, agent_result_wire, free_form
from oma.run_metadata import validate_run_metadata
from oma.timeutil import now_iso


def _queue_snapshot(context: RunContext) -> TaskQueueSnapshot:
    """The queue, with waiting resumed tasks still shown in progress (as they were saved):
    a snapshot's in-flight states must belong to in-progress tasks."""
    snapshot = context.queue.snapshot()
    waiting = set(context.waiting_resumes())
    if not waiting:
        return snapshot
    tasks = [
        task.model_copy(update={"status": "in_progress"}) if task.id in waiting else task
        for task in snapshot.tasks
    ]
    return snapshot.model_copy(
        update={
            "tasks": tasks,
            "pending": [i for i in snapshot.pending if i not in waiting],
            "in_progress": [*snapshot.in_progress, *(t.id for t in tasks if t.id in waiting)],
        }
    )


async def encode_snapshot(context: RunContext, *, embed_shared_memory: bool) -> EncodedSnapshot:
    """The JSON of ``build_snapshot``'s snapshot (the same text), built incrementally."""
    if getattr(context.queue, "_plan_revisions", None):  # a v2 queue: rare, the model path
        snapshot = await build_snapshot(context, embed_shared_memory=embed_shared_memory)
        return EncodedSnapshot(snapshot.to_wire(), snapshot_metadata(snapshot))
    shared = context.team.shared_memory
    # The only await comes first: everything after it is read in one step of the event loop,
    # so a task that starts or ends meanwhile is either wholly in this snapshot or not at all
    # (a queue read before the await and in-flight states read after it could disagree).
    memory = await shared.snapshot() if shared is not None and embed_shared_memory else None
    created_at = now_iso()
    # Captured here, not after the write: events appended while it is written are not in it.
    watermark = context.recorder.seq if context.recorder is not None else None
    version = 4 if watermark is None else 5
    wire: dict[str, Any] = {"version": version, "mode": context.mode, "createdAt": created_at}
    if context.metadata is not None:
        validate_run_metadata(context.metadata, allow_engine_keys=True)  # as the model does
        wire["metadata"] = free_form(context.metadata)
    if context.goal is not None:
        wire["goal"] = context.goal
    wire["queue"] = context.encoder.queue_wire(context.queue.tasks, set(context.waiting_resumes()))
    if memory is not None:
        wire["sharedMemory"] = memory.to_data()
    wire["messageBus"] = context.team.bus.snapshot().to_data()
    if shared is not None:
        wire["turnCount"] = shared.turn_count
    wire["completedTaskResults"] = context.encoder.completed_wire(
        (task, context.results.get(task.id)) for task in context.queue.by_status("completed")
    )
    wire["identity"] = {
        "runId": context.identity.run_id,
        "attempt": context.identity.attempt,
        "lastTraceId": context.identity.trace_id,
        "lastRootSpanId": context.identity.root_span_id,
    }
    wire["inFlightTasks"] = context.encoder.in_flight_wire(context.durable_in_flight())
    wire["pendingApprovals"] = [r.to_data() for r in context.all_pending_approvals()]
    wire["approvalDecisions"] = [d.to_data() for d in context.approval_decisions]
    if context.budget is not None:
        wire["budget"] = context.budget.state.to_data()
    elif context.kept_budget is not None:
        wire["budget"] = context.kept_budget.to_data()
    if watermark is not None:
        wire["journalWatermarkSeq"] = watermark
        ref = _journal_ref(context)
        if ref is not None:
            wire["journalRef"] = ref
    metadata: dict[str, Any] = {
        "namespace": "checkpoint",
        "version": version,
        "runId": context.identity.run_id,
        "createdAt": created_at,
    }
    return EncodedSnapshot(wire, metadata)


def _journal_ref(context: RunContext) -> dict[str, str] | None:
    recorder = context.recorder
    return recorder.journal.describe(recorder.run_id) if recorder is not None else None


async def build_snapshot(context: RunContext, *, embed_shared_memory: bool) -> CheckpointSnapshotV4:
    """A v5 snapshot when the run keeps a journal, else v4."""
    shared = context.team.shared_memory
    memory = await shared.snapshot() if shared and embed_shared_memory else None  # see above
    watermark = context.recorder.seq if context.recorder is not None else None
    completed = []
    for task in context.queue.by_status("completed"):
        result = context.result_for(task.id)
        completed.append(
            CompletedTaskCheckpoint(
                task_id=task.id,
                assignee=task.assignee,
                result=task.result,
                agent_result=agent_result_wire(task.id, result) if result is not None else None,
            )
        )
    snapshot = CheckpointSnapshotV4(
        version=4,
        mode=context.mode,
        created_at=now_iso(),
        metadata=context.metadata,
        goal=context.goal,
        identity=RunIdentityCheckpoint(
            run_id=context.identity.run_id,
            attempt=context.identity.attempt,
            last_trace_id=context.identity.trace_id,
            last_root_span_id=context.identity.root_span_id,
        ),
        queue=_queue_snapshot(context),
        shared_memory=memory,
        message_bus=context.team.bus.snapshot(),
        turn_count=shared.turn_count if shared else None,
        completed_task_results=completed,
        in_flight_tasks=context.durable_in_flight(),
        pending_approvals=context.all_pending_approvals(),
        approval_decisions=list(context.approval_decisions),
        budget=context.budget.state.model_copy(deep=True)
        if context.budget
        else context.kept_budget,
    )
    if watermark is None:
        return snapshot
    ref = _journal_ref(context)
    fields: dict[str, Any] = {
        name: getattr(snapshot, name) for name in CheckpointSnapshotV4.model_fields
    }
    fields.update(
        version=5,
        journal_watermark_seq=watermark,
        journal_ref=RunJournalRef.model_validate(ref) if ref is not None else None,
    )
    return CheckpointSnapshotV5(**fields)

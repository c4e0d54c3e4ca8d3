"""Everything one run (or one restored attempt) works with, and how it becomes a snapshot."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from oma.agent.result import AgentRunResult, RunIdentity
from oma.approval.ledger import DurableApprovalLedger
from oma.approval.models import ApprovalDecisionRecord, ApprovalRequest
from oma.checkpoint.manager import snapshot_metadata
from oma.checkpoint.queue_snapshot import TaskQueueSnapshot
from oma.checkpoint.runner_state import InFlightTask
from oma.checkpoint.snapshot import (
    CheckpointSnapshotV4,
    CompletedTaskCheckpoint,
    RunIdentityCheckpoint,
    RunMode,
)
from oma.orchestrator.events import OrchestratorEvent, ProgressCallback
from oma.orchestrator.snapshot_wire import EncodedSnapshot, SnapshotEncoder, free_form
from oma.run_metadata import validate_run_metadata
from oma.tasks.queue import TaskQueue
from oma.team import Team
from oma.timeutil import now_iso

if TYPE_CHECKING:
    from oma.orchestrator.gating import Gates
    from oma.orchestrator.saver import ActiveCheckpoint


class FatalRunError(Exception):
    """Raised inside a task when the whole run must stop (not retried, not a task failure)."""


@dataclass(frozen=True)
class Stop:
    """Why the run stops admitting work: suspended, rejected, or a gate callback failed.

    Running tasks drain first; then, if ``skip_reason`` is set, every unfinished task is skipped.
    """

    code: Literal["suspended", "rejected", "error", "cancelled"]
    message: str
    skip_reason: str | None = None


@dataclass
class RunContext:
    team: Team
    queue: TaskQueue
    identity: RunIdentity
    mode: RunMode
    emit_event: ProgressCallback | None
    checkpoint: ActiveCheckpoint | None = None
    goal: str | None = None
    metadata: dict[str, Any] | None = None
    max_concurrency: int = 5
    in_flight: dict[str, InFlightTask] = field(default_factory=dict)
    resume_states: dict[str, InFlightTask] = field(default_factory=dict)
    results: dict[str, AgentRunResult] = field(default_factory=dict)
    pending_approvals: list[ApprovalRequest] = field(default_factory=list)
    approval_decisions: list[ApprovalDecisionRecord] = field(default_factory=list)
    gates: Gates | None = None
    ledger: DurableApprovalLedger | None = None
    stop: Stop | None = None
    approved_dispatch: dict[str, ApprovalRequest] = field(default_factory=dict)
    drain: asyncio.Event | None = None  # set (e.g. on SIGTERM): stop at the next boundary
    encoder: SnapshotEncoder = field(default_factory=SnapshotEncoder, repr=False, compare=False)

    def drain_requested(self) -> bool:
        return self.drain is not None and self.drain.is_set()

    def all_pending_approvals(self) -> list[ApprovalRequest]:
        """Gate requests plus tool-call requests still waiting in in-flight state."""
        found = {request.id: request for request in self.pending_approvals}
        for state in self._durable_in_flight():
            for call in state.pending_tool_calls or []:
                request = call.approval_request
                if request is not None and call.commit is None and request.id not in found:
                    found[request.id] = request
        return list(found.values())

    def emit(self, event: OrchestratorEvent) -> None:
        if self.emit_event is not None:
            self.emit_event(event)

    def result_for(self, task_id: str) -> AgentRunResult | None:
        task = self.queue.find(task_id)
        if task is None:
            return None
        return self.results.get(f"{task.assignee or 'unknown'}:{task_id}")

    def _in_progress(self, task_id: str) -> bool:
        task = self.queue.find(task_id)
        return task is not None and task.status == "in_progress"

    def _waiting_resumes(self) -> dict[str, InFlightTask]:
        """Restored runner states whose task has not been dispatched again yet."""
        found = {}
        for task_id, state in self.resume_states.items():
            task = self.queue.find(task_id)
            if task is not None and task.status == "pending":
                found[task_id] = state
        return found

    def _durable_in_flight(self) -> list[InFlightTask]:
        """Running tasks' states, and restored ones still waiting to run: a save made before a
        resumed task re-enters its runner (the fencing claim, another task's boundary) must
        keep its committed tool results, or a kill right then would lose them."""
        running = [state for task_id, state in self.in_flight.items() if self._in_progress(task_id)]
        return running + list(self._waiting_resumes().values())

    def _queue_snapshot(self) -> TaskQueueSnapshot:
        """The queue, with waiting resumed tasks still shown in progress (as they were saved):
        a snapshot's in-flight states must belong to in-progress tasks."""
        snapshot = self.queue.snapshot()
        waiting = set(self._waiting_resumes())
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

    async def save(self, *, strict: bool = False) -> bool:
        return await self.checkpoint.save(self, strict=strict) if self.checkpoint else False

    async def encode_snapshot(self, *, embed_shared_memory: bool) -> EncodedSnapshot:
        """The JSON of ``build_snapshot()``'s snapshot (the same text), built incrementally."""
        if getattr(self.queue, "_plan_revisions", None):  # a v2 queue: rare, the model path
            snapshot = await self.build_snapshot(embed_shared_memory=embed_shared_memory)
            return EncodedSnapshot(snapshot.to_wire(), snapshot_metadata(snapshot))
        shared = self.team.shared_memory
        # The only await comes first: everything after it is read in one step of the event loop,
        # so a task that starts or ends meanwhile is either wholly in this snapshot or not at all
        # (a queue read before the await and in-flight states read after it could disagree).
        memory = await shared.snapshot() if shared is not None and embed_shared_memory else None
        created_at = now_iso()
        wire: dict[str, Any] = {"version": 4, "mode": self.mode, "createdAt": created_at}
        if self.metadata is not None:
            validate_run_metadata(self.metadata, allow_engine_keys=True)  # as the model does
            wire["metadata"] = free_form(self.metadata)
        if self.goal is not None:
            wire["goal"] = self.goal
        wire["queue"] = self.encoder.queue_wire(self.queue.tasks, set(self._waiting_resumes()))
        if memory is not None:
            wire["sharedMemory"] = memory.to_data()
        wire["messageBus"] = self.team.bus.snapshot().to_data()
        if shared is not None:
            wire["turnCount"] = shared.turn_count
        wire["completedTaskResults"] = self.encoder.completed_wire(
            (task, self.results.get(f"{task.assignee or 'unknown'}:{task.id}"))
            for task in self.queue.by_status("completed")
        )
        wire["identity"] = {
            "runId": self.identity.run_id,
            "attempt": self.identity.attempt,
            "lastTraceId": self.identity.trace_id,
            "lastRootSpanId": self.identity.root_span_id,
        }
        wire["inFlightTasks"] = self.encoder.in_flight_wire(self._durable_in_flight())
        wire["pendingApprovals"] = [r.to_data() for r in self.all_pending_approvals()]
        wire["approvalDecisions"] = [d.to_data() for d in self.approval_decisions]
        metadata: dict[str, Any] = {
            "namespace": "checkpoint",
            "version": 4,
            "runId": self.identity.run_id,
            "createdAt": created_at,
        }
        return EncodedSnapshot(wire, metadata)

    async def build_snapshot(self, *, embed_shared_memory: bool) -> CheckpointSnapshotV4:
        shared = self.team.shared_memory
        memory = await shared.snapshot() if shared and embed_shared_memory else None  # see above
        completed = []
        for task in self.queue.by_status("completed"):
            result = self.result_for(task.id)
            completed.append(
                CompletedTaskCheckpoint(
                    task_id=task.id,
                    assignee=task.assignee,
                    result=task.result,
                    agent_result=result.to_wire() if result is not None else None,
                )
            )
        return CheckpointSnapshotV4(
            version=4,
            mode=self.mode,
            created_at=now_iso(),
            metadata=self.metadata,
            goal=self.goal,
            identity=RunIdentityCheckpoint(
                run_id=self.identity.run_id,
                attempt=self.identity.attempt,
                last_trace_id=self.identity.trace_id,
                last_root_span_id=self.identity.root_span_id,
            ),
            queue=self._queue_snapshot(),
            shared_memory=memory,
            message_bus=self.team.bus.snapshot(),
            turn_count=shared.turn_count if shared else None,
            completed_task_results=completed,
            in_flight_tasks=self._durable_in_flight(),
            pending_approvals=self.all_pending_approvals(),
            approval_decisions=list(self.approval_decisions),
        )
